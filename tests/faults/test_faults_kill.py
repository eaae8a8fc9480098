"""kill -9 at 10 seeded random points in all (triad 3, dora 2, evaluate 3, index 2), then the same command again.

After the resume: 0 items lost and 0 duplicated (the output equals an uninterrupted run's: same ids), 0 torn lines
in any JSONL file, and calls repeated <= calls in flight at the kill. Both sides are the fake server's counters:
`repeats` (requests whose exact content it had received before) and `in_flight` (received and not answered, or
answered less than a quarter second before: the client's time to store the reply), read just before the kill (plus
any request received between that reading and the kill) and just after it (the larger of the two).
A clean run may itself send identical requests (two seeds meeting on one pair of chunks; evaluate asks the same
question of the same contexts in two modes), so the bound is repeats(kill + resume) <= in_flight + repeats(clean run).
A reply the server sent that the killed client had not yet stored is sent again too, and a loaded machine can take
longer than the quarter second to store one; the client never holds more requests than its `--concurrency`, so for
TRIAD (which sets it) in_flight counts at least that many.
The kill lands when the server has received a seeded random share (20-90%) of the requests the clean run made. Each
run has its own fake server, all on one port (one LLM spec: a resume must see the same one, and the prompts of all
runs are the same), with 50 ms of latency, so that calls are in flight when the kill lands.
"""
import os, random, signal, time
from pathlib import Path

import pytest

from conftest import (DORA, EVAL, SAMPLE, TRIAD, Server, ok, ragbench, read_lines, record, setups_file, start,
                      torn_lines)

def kill_points(name: str, n: int) -> list:
    "The seeded kill points of one command: n shares of its clean run, in [0.2, 0.9]."
    rng = random.Random(f"ragbench-faults-{name}")
    return [round(rng.uniform(0.2, 0.9), 3) for _ in range(n)]
GITDOCS_FULL = Path("/work/shared/data/gitdocs/git_docs.jsonl")
LATENCY = 0.05


def triad_cmd(db, out, spec): return ["triad", "--db", db, "--out", out, "--n", 6, "--concurrency", 4, "--seed", 3, "--llm", spec]
def dora_cmd(db, out, spec): return ["dora", "--db", db, "--out", out, "--per-style", 2, "--styles", "find,explain,summarize",
                                     "--llm", spec, "--no-embed", "--no-progress"]


def item_keys(out: Path, kind: str) -> list:
    "The output's keys, one per record (duplicates kept): dataset ids, or (item, setup, mode) of evaluation rows."
    if kind == "evaluate": return [(r["item_id"], r["setup"], r["mode"]) for r in read_lines(out / "scores.jsonl")[0]]
    return [r["id"] for r in read_lines(out / "dataset.jsonl")[0]]


def free_port() -> int:
    import socket
    with socket.socket() as so: so.bind(("127.0.0.1", 0)); return so.getsockname()[1]


PORT = free_port()              # every server of this module on one port: one LLM spec, so one set of prompts


def run_clean(cmd_of, work: Path, name: str, kind: str) -> dict:
    "An uninterrupted run on its own server: its keys, requests and repeated requests."
    with Server("--latency", LATENCY, "--port", PORT) as s:
        out = work / f"{name}_clean"
        ok(ragbench(*cmd_of(out, s)))
        st = s.stats()
    return {"keys": item_keys(out, kind), "repeats": st["repeats"], "requests": st["requests"]}


def kill_and_resume(cmd_of, out: Path, at_request: int, server: Server) -> dict:
    "Start the command, SIGKILL its process group once the server has received `at_request` requests, read the server, run it again."
    p = start(*cmd_of(out, server))
    while p.poll() is None and (before := server.stats())["requests"] < at_request: time.sleep(0.01)
    finished_first = p.poll() is not None
    if not finished_first: os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    at_kill = server.stats()
    # in flight at the kill: those in flight at the last reading before it, plus any request received since
    in_flight = max(at_kill["in_flight"], before["in_flight"] + at_kill["requests"] - before["requests"])
    torn_at_kill = torn_lines(out) if out.exists() else {}
    r = ragbench(*cmd_of(out, server))
    end = server.stats()
    return {"resume": r, "finished_before_kill": finished_first, "in_flight": in_flight,
            "requests_at_kill": at_kill["requests"], "repeats": end["repeats"], "requests": end["requests"],
            "torn_at_kill": torn_at_kill}


def check_kills(name, kind, cmd_of, work, n_kills, cap: int = 0):
    "n seeded kills of one command; every one must resume to the clean run's output."
    clean = run_clean(cmd_of, work, name, kind)
    failures = []
    for k, frac in enumerate(kill_points(name, n_kills)):
        case = f"kill {name} #{k + 1}"
        with Server("--latency", LATENCY, "--port", PORT) as s:
            out = work / f"{name}_kill{k}"
            res = kill_and_resume(cmd_of, out, max(1, round(frac * clean["requests"])), s)
        ok(res["resume"])
        keys = item_keys(out, kind)
        lost, dup = len(set(clean["keys"]) - set(keys)), len(keys) - len(set(keys))
        extra = len(set(keys) - set(clean["keys"]))
        torn = torn_lines(out)
        bound = max(res["in_flight"], cap) + clean["repeats"]
        bad = lost or dup or extra or torn or res["repeats"] > bound
        record(case, outcome="FAIL" if bad else "ok", kill_at=f"request {round(frac * clean['requests'])} of {clean['requests']}", requests_at_kill=res["requests_at_kill"],
               in_flight=res["in_flight"], repeats=res["repeats"], clean_repeats=clean["repeats"], lost=lost,
               duplicated=dup, not_in_clean_run=extra, torn_after_resume=sum(torn.values()),
               torn_at_kill=sum(res["torn_at_kill"].values()), finished_before_kill=res["finished_before_kill"])
        if bad:
            failures.append((case, dict(lost=lost, duplicated=dup, extra=extra, torn=torn, repeats=res["repeats"], bound=bound)))
    assert not failures, failures


def test_kill_triad(work, hash_db):
    check_kills("triad", "triad", lambda out, s: triad_cmd(hash_db, out, s.spec), work, 3, cap=4)   # --concurrency 4


def test_kill_dora(work, hash_db):
    check_kills("dora", "dora", lambda out, s: dora_cmd(hash_db, out, s.spec), work, 2)


def test_kill_evaluate(work, hash_db, small_dataset):
    def cmd(out, s):
        f = setups_file(out.parent / f"{out.name}_setups.yaml", s.spec, s.spec)
        return ["evaluate", "--dataset", small_dataset, "--db", hash_db, "--setups", f, "--out", out,
                "--modes", "retrieved,oracle", "--no-bertscore", "--quiet"]
    check_kills("evaluate", "evaluate", cmd, work, 3)


def lance_ids(db: Path) -> list:
    import lancedb                           # a dependency, not ragbench: the rows as LanceDB stores them
    return lancedb.connect(str(db)).open_table("chunks").to_arrow().column("id").to_pylist()


def versions(db: Path) -> int:
    "Commits made to the table so far (one manifest per LanceDB version: the creation, each batch, each index)."
    d = db / "chunks.lance" / "_versions"
    return len(list(d.glob("*.manifest"))) if d.is_dir() else 0


def test_kill_index(work):
    "The kill lands after a seeded random share of the clean build's commits (one per 64 chunks written)."
    src = GITDOCS_FULL if GITDOCS_FULL.exists() else SAMPLE
    cmd = lambda db: ["index", src, "--db", db, "--embedder", "hash", "--batch-size", 32, "--write-rows", 64, "--quiet"]
    ok(ragbench(*cmd(work / "index_clean")))
    clean, total = lance_ids(work / "index_clean"), versions(work / "index_clean")
    failures = []
    for k, frac in enumerate(kill_points("index", 2)):
        db = work / f"index_kill{k}"; target = max(2, round(frac * total))
        p = start(*cmd(db))
        while p.poll() is None and versions(db) < target: time.sleep(0.005)
        finished = p.poll() is not None
        if not finished: os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        rows_at_kill = len(lance_ids(db)) if (db / "chunks.lance").exists() else 0
        ok(ragbench(*cmd(db)))
        ids = lance_ids(db)
        lost, dup = len(set(clean) - set(ids)), len(ids) - len(set(ids))
        bad = lost or dup or len(ids) != len(clean)
        record(f"kill index #{k + 1}", outcome="FAIL" if bad else "ok", kill_at=f"commit {target} of {total}",
               rows_at_kill=rows_at_kill, rows=len(ids), lost=lost, duplicated=dup, finished_before_kill=finished)
        if bad: failures.append((k, lost, dup, len(ids), len(clean)))
    assert not failures, failures
