"""Issue 24: `evaluate`'s meter (calls.jsonl) against what the server received, as the generation side is checked.

A call is counted before it is sent, so the meter equals the server's count after a clean run, and after a kill -9
it may count more than the server received only by requests booked but not yet received at the kill (at most the
client's concurrency: 8 requests per LLM spec, one spec here), never fewer. A `--max-calls` budget holds across the
kill and two resumes: the server never receives more than the budget, and the last resume sends nothing.
"""
import json, os, signal, time
from pathlib import Path

from conftest import Server, ok, ragbench, read_lines, record, setups_file, start

LATENCY, CONCURRENCY = 0.05, 8          # 8: the LLM client's default max_concurrency (requests booked at once)


def sends(out: Path) -> int:
    "Requests the run's meter booked (calls.jsonl `send` events)."
    return sum(1 for e in read_lines(out / "calls.jsonl")[0] if e.get("e") == "send")


def evaluate_cmd(out: Path, spec: str, dataset: Path, db: Path, *extra) -> list:
    f = setups_file(out.parent / f"{out.name}_setups.yaml", spec, spec)
    return ["evaluate", "--dataset", dataset, "--db", db, "--setups", f, "--out", out, "--modes", "retrieved,oracle",
            "--no-bertscore", "--quiet", *extra]


def test_evaluate_meter_equals_server_clean_and_across_kill_and_resume(work, hash_db, small_dataset):
    with Server("--latency", LATENCY) as s:
        clean = work / "meter_eval_clean"
        ok(ragbench(*evaluate_cmd(clean, s.spec, small_dataset, hash_db)))
        clean_requests = s.stats()["requests"]
    assert sends(clean) == clean_requests, (sends(clean), clean_requests)      # counted = received
    budget = max(4, round(0.7 * clean_requests))
    with Server("--latency", LATENCY) as s:
        out = work / "meter_eval_kill"
        cmd = evaluate_cmd(out, s.spec, small_dataset, hash_db, "--max-calls", budget)
        p = start(*cmd)
        while p.poll() is None and s.stats()["requests"] < budget // 2: time.sleep(0.01)
        killed = p.poll() is None
        if killed: os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        at_kill, booked_at_kill = s.stats()["requests"], sends(out)
        first = ragbench(*cmd)
        after_first = s.stats()["requests"]
        second = ragbench(*cmd)
        end = s.stats()["requests"]
    summary = json.loads((out / "summary.json").read_text())
    record(clean_requests=clean_requests, clean_meter=sends(clean), budget=budget, killed=killed, requests_at_kill=at_kill,
           meter_at_kill=booked_at_kill, requests=end, meter=sends(out), second_resume_requests=end - after_first,
           stop=summary.get("stop_reason"), rc=(first.returncode, second.returncode))
    assert killed, "the run finished before the kill"
    assert 0 <= booked_at_kill - at_kill <= CONCURRENCY, (booked_at_kill, at_kill)   # never under-counts; over only in flight
    assert 0 <= sends(out) - end <= CONCURRENCY, (sends(out), end)
    assert end <= budget and sends(out) <= budget, (end, sends(out), budget)           # the budget holds across resumes
    assert end == after_first, "a resume with the budget spent sent requests"
    assert summary["usage"]["run"]["calls"] == sends(out)
    assert str(summary.get("stop_reason", "")).startswith("budget spent"), summary.get("stop_reason")
    assert "Traceback" not in first.stderr + second.stderr
