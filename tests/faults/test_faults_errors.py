"""The fake server at 30% and 60% injected errors (429, 500, a stalled reply, a truncated body), for triad, dora
and evaluate.

Every failure is counted per stage: summed over the stages of summary.json, the calls counted are at least the
requests the server received (a call is counted before it is sent) and the failures + retries + repairs at least
the faults it injected (a stalled reply that arrives is no failure). No item is accepted on a verdict that was
never parsed: every accepted TRIAD question's last attempt carries the judge's full verdict, all true; every
accepted DoRA item carries its gate score; an evaluation row whose judge failed has no judge metric made up.
No traceback, and a summary is written whatever the exit code.
"""
import json

import pytest

from conftest import DORA, EVAL, TRIAD, Server, ragbench, read_lines, record, setups_file, torn_lines

RATES = [0.3, 0.6]


def stage_usage(summary: dict) -> dict:
    "Per-stage usage: the summary's `usage_by_stage` tables (the generation base's), else its `by_stage` ones (one per LLM), summed."
    tables: dict = {"usage_by_stage": [], "by_stage": []}
    def walk(d):
        if not isinstance(d, dict): return
        for k, v in d.items():
            if k in tables and isinstance(v, dict): tables[k].append(v)
            else: walk(v)
    walk(summary)
    out: dict = {}
    for table in tables["usage_by_stage"] or tables["by_stage"]:
        for stage, u in table.items():
            acc = out.setdefault(stage, {})
            for f in ("calls", "failures", "retries", "repairs"): acc[f] = acc.get(f, 0) + (u.get(f) or 0)
    return out


def check_accounting(case: str, p, out, server: Server, in_flight: int = 0) -> dict:
    """The run's own count against the server's; returns the summary. A run that reaches its target cancels the requests
    still in flight (at most `in_flight`, its --concurrency): a fault the server put into one of those reaches no client,
    so the faults seen may fall short of the faults injected by that many; the calls stay counted (counted >= received)."""
    st = server.stats()
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert (out / "summary.json").exists(), (p.returncode, p.stderr[-2000:])
    summary = json.loads((out / "summary.json").read_text())
    usage = stage_usage(summary)
    counted = sum(u["calls"] for u in usage.values())
    failed = sum(u["failures"] + u["retries"] + u["repairs"] for u in usage.values())
    faults = sum(n for k, n in st["faults"].items() if k != "timeout")
    record(None, rc=p.returncode, server_requests=st["requests"], counted_calls=counted, server_faults=faults,
           counted_failures_retries_repairs=failed, stages=len(usage), torn=sum(torn_lines(out).values()))
    assert usage, "no per-stage usage in summary.json"
    assert counted >= st["requests"], f"{counted} calls counted, {st['requests']} requests received"
    assert failed >= faults - in_flight, f"{failed} failures/retries/repairs counted, {faults} faults injected"
    assert not torn_lines(out)
    return summary


def accepted(out):
    return [r for r in read_lines(out / "dataset.jsonl")[0] if r.get("status") == "accepted"] if (out / "dataset.jsonl").exists() else []


@pytest.mark.parametrize("rate", RATES)
def test_triad_under_errors(work, hash_db, rate):
    with Server("--error-rate", rate, "--seed", 5, "--timeout-sleep", 0.2) as s:
        out = work / f"err_triad_{rate}"
        p = ragbench("triad", "--db", hash_db, "--out", out, "--n", 3, "--concurrency", 4, "--llm", s.spec)
        check_accounting(f"triad at {rate:.0%} errors", p, out, s, in_flight=4)
    for it in accepted(out):
        if not it["answerable"]: continue
        verdict = it["attempts"][-1].get("judge")
        assert isinstance(verdict, dict) and verdict, it["id"]
        criteria = [k for k in verdict if f"{k}_reason" in verdict] or ["quality", "multi_hop", "unambiguous"]
        assert all(verdict.get(k) is True for k in criteria), (it["id"], verdict)       # each criterion parsed, and met
        assert all(isinstance(g.get("sufficient"), bool) for g in verdict.get("sufficiency") or []), (it["id"], verdict)


@pytest.mark.parametrize("rate", RATES)
def test_dora_under_errors(work, hash_db, rate):
    with Server("--error-rate", rate, "--seed", 5, "--timeout-sleep", 0.2) as s:
        out = work / f"err_dora_{rate}"
        p = ragbench("dora", "--db", hash_db, "--out", out, "--per-style", 1, "--styles", "find,explain",
                     "--llm", s.spec, "--no-embed", "--no-progress")
        check_accounting(f"dora at {rate:.0%} errors", p, out, s)
    for it in accepted(out):
        j = it["attempts"][-1].get("judge") or {}
        assert isinstance(j.get("score"), (int, float)) and j["score"] >= j.get("tau", 0), (it["id"], j)


@pytest.mark.parametrize("rate", RATES)
def test_evaluate_under_errors(work, hash_db, small_dataset, rate):
    with Server("--error-rate", rate, "--seed", 5, "--timeout-sleep", 0.2) as s:
        out = work / f"err_eval_{rate}"
        f = setups_file(work / f"err_eval_{rate}.yaml", s.spec, s.spec)
        p = ragbench("evaluate", "--dataset", small_dataset, "--db", hash_db, "--setups", f, "--out", out,
                     "--no-bertscore", "--quiet")
        check_accounting(f"evaluate at {rate:.0%} errors", p, out, s)
    rows = read_lines(out / "scores.jsonl")[0]
    n_items = len(read_lines(small_dataset)[0])
    assert len(rows) == 2 * n_items                                 # every item scored, failed or not
    for r in rows:
        if r.get("judge_failures"):                                  # a failed judge leaves its metrics empty
            assert all(r["metrics"].get(m) is None for m in ("correct", "faithful")), r
