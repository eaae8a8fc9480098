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
    from ragbench.scale.gen import _MeterProxy, _RunCoordinator
    gone = subprocess.Popen([sys.executable, "-c", "pass"]); gone.wait()      # the killed driver's pid
    coord = _RunCoordinator(driver_pid=gone.pid)
    coord.add_meter(0, str(tmp_path / "calls.jsonl"), None, None)              # no budget set
    monkeypatch.setattr(ray, "get", lambda x, **kw: x)                        # the handle answers at once
    llm = make_llm("template", meter=_MeterProxy(_Handle(coord), 0))
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


def dead_port() -> int:
    "A local port nothing listens on."
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    return port


@pytest.mark.parametrize("cmd", ["dora", "triad"])
def test_dead_llm_found_in_seconds(work, hash_db, cmd):
    "A dead endpoint is found by a TCP connect before any work: exit 1 in seconds, one line, no run folder written."
    spec, out = f"openai:http://127.0.0.1:{dead_port()}/v1@m", work / f"dead_{cmd}"
    more = ["--per-style", 1, "--styles", "find", "--no-embed", "--no-progress"] if cmd == "dora" else ["--n", 2]
    t0 = time.monotonic()
    p = ragbench(cmd, "--db", hash_db, "--out", out, "--llm", spec, *more, timeout=300)
    secs = round(time.monotonic() - t0, 1)
    record(rc=p.returncode, seconds=secs, stderr=p.stderr.strip().splitlines()[-1:] if p.stderr.strip() else "")
    assert p.returncode == 1 and "cannot be reached" in p.stderr and "Traceback" not in p.stderr, (p.returncode, p.stderr[-1500:])
    assert secs < 30 and not (out / "calls.jsonl").exists(), (secs, sorted(x.name for x in out.glob("*")) if out.exists() else None)


def test_keyless_llm_refused_before_work(work):
    "`demo` and `pipeline` with a gemini spec and no key: refused from the environment at once (before any index is built)."
    demo_out = work / "keyless_demo"
    t0 = time.monotonic()
    p = ragbench("demo", "--out", demo_out, "--llm", "gemini:gemini-2.5-flash", timeout=300)
    demo_secs = round(time.monotonic() - t0, 1)
    cfg = work / "keyless_pipeline.yaml"
    cfg.write_text(ragbench("pipeline", "--example").stdout)          # its llm: gemini:gemini-2.5-flash
    t0 = time.monotonic()
    q = ragbench("pipeline", cfg, "--out", work / "keyless_pipeline", timeout=300)
    pipe_secs = round(time.monotonic() - t0, 1)
    record(demo=(p.returncode, demo_secs), pipeline=(q.returncode, pipe_secs))
    for r, secs in ((p, demo_secs), (q, pipe_secs)):
        user_error(r, "GEMINI_API_KEY")
        assert secs < 30, secs
    assert not (demo_out / "index").exists() and not list(demo_out.rglob("*.lance"))


def test_preflight_sends_nothing(work, hash_db):
    "doctor and --estimate against a live server: the server receives no request; doctor names every problem, exit 1."
    with Server() as s:
        good = ragbench("doctor", "--llm", s.spec, "--db", hash_db)
        est = ragbench("triad", "--db", hash_db, "--out", work / "est_nothing", "--n", 2, "--llm", s.spec, "--estimate")
        requests = s.stats()["requests"]
    bad = ragbench("doctor", "--llm", f"openai:http://127.0.0.1:{dead_port()}/v1@m", "--llm", "gemini:gemini-2.5-flash",
                   "--db", work / "no_such_db")
    record(requests=requests, good=good.returncode, bad=bad.returncode, bad_lines=bad.stdout.count("PROBLEM"))
    ok(good); ok(est)
    assert requests == 0, requests
    assert bad.returncode == 1 and bad.stdout.count("PROBLEM") == 3, bad.stdout
    assert "Traceback" not in good.stderr + bad.stderr


def test_index_skip_list_on_stderr(work):
    "Minor: the inputs `index` skips are listed on stderr (stdout is the summary); a NUL-only JSONL text is skipped as a NUL byte file is."
    src = work / "skips"
    src.mkdir(exist_ok=True)
    (src / "ok.txt").write_text("Git stores snapshots of a project. " * 20)
    (src / "nul.txt").write_bytes(b"some text\x00more text\n")
    p = ok(ragbench("index", src, "--db", work / "skips_db", "--embedder", "hash", "--quiet"))
    (work / "nul.jsonl").write_text(json.dumps({"id": "a", "text": "Git stores snapshots. " * 20}) + "\n"
                                    + json.dumps({"id": "b", "text": "\x00" * 40}) + "\n")
    q = ok(ragbench("index", work / "nul.jsonl", "--db", work / "skips_db2", "--embedder", "hash", "--quiet"))
    record(stdout=p.stdout.strip().splitlines(), stderr=p.stderr.strip().splitlines(), jsonl=q.stdout.strip().splitlines()[:1])
    assert "nul.txt" in p.stderr and "nul.txt" not in p.stdout, (p.stdout, p.stderr)
    assert "1 documents" in q.stdout and "NUL" in q.stderr, (q.stdout, q.stderr)
