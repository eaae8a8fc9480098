"""Issue 40, the LLM and accounting part: failures counted are failures that happened, the summary's calls are the
requests the server received, and a dead or key-less LLM is found in seconds and costs nothing.

Most cases go through the command line against the fake LLM server, as the rest of the suite; the killed `--ray`
driver (D6) is reproduced without a cluster: the coordinator and the worker's meter proxy are the real classes, the
actor handle runs their methods in this process (a cluster costs minutes on 2 cores; the code path is the same)."""
import json, os, socket, subprocess, sys, time
from pathlib import Path

import pytest

from conftest import ENV, SAMPLE, Server, ok, ragbench, read_lines, record, user_error


class _Handle:
    "A Ray actor handle stand-in: `handle.method.remote(*args)` runs `obj.method(*args)` here."
    def __init__(self, obj): self.obj = obj
    def __getattr__(self, name):
        fn = getattr(self.obj, name)
        return type("M", (), {"remote": staticmethod(lambda *a: fn(*a))})()


def test_killed_ray_driver_counts_no_failure(tmp_path, monkeypatch):
    "D6: a worker that asks to send after its driver was killed is refused, and no `fail` event is journaled."
    import ray
    from ragbench.llm import BudgetExceeded, make_llm
    from ragbench.scale.gen import MeterProxy, RunCoordinator
    gone = subprocess.Popen([sys.executable, "-c", "pass"]); gone.wait()      # the killed driver's pid
    coord = RunCoordinator(driver_pid=gone.pid)
    coord.add_meter(0, str(tmp_path / "calls.jsonl"), None, None)              # no budget set
    monkeypatch.setattr(ray, "get", lambda x, **kw: x)                        # the handle answers at once
    llm = make_llm("template", meter=MeterProxy(_Handle(coord), 0))
    with pytest.raises(BudgetExceeded): llm.complete("What is 2+2?", stage="eval.answer")
    events = read_lines(tmp_path / "calls.jsonl")[0] if (tmp_path / "calls.jsonl").exists() else []
    record(events=events)
    assert [e for e in events if e.get("e") == "fail"] == [], events
    assert coord.report(0, "totals")["failures"] == 0


def test_dora_stops_after_llm_errors_in_a_row(work, hash_db):
    "A server that answers every request with an HTML page: DoRA stops after K tasks in a row failed, as TRIAD does (exit 1)."
    with Server("--faults", ",".join(["html"] * 400)) as s:
        out = work / "dora_llm_errors"
        t0 = time.monotonic()
        p = ragbench("dora", "--db", hash_db, "--out", out, "--per-style", 4, "--styles", "find,explain",
                     "--llm", s.spec, "--no-embed", "--no-progress")
        secs, requests = round(time.monotonic() - t0, 1), s.stats()["requests"]
    summary = json.loads((out / "summary.json").read_text())
    record(rc=p.returncode, seconds=secs, requests=requests, stop=summary.get("stop_reason"))
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == 1 and "the LLM failed on" in p.stderr, (p.returncode, p.stderr[-1500:])
    assert str(summary["stop_reason"]).startswith("the LLM failed on"), summary["stop_reason"]
    assert summary["tasks"]["finished"] + summary["tasks"]["errors"] < 8 + 8, summary["tasks"]   # K, plus those in flight
