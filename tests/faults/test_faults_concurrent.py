"""Two processes on one output: the second is refused (exit 2) with a message naming the holder's pid, and the
first finishes with nothing duplicated. For triad, dora, evaluate (one --out) and index (one --db table).

The first process is paused (SIGSTOP) once its lock file names it and it has sent a request (checked to still hold
the lock then); the second runs meanwhile; then the first goes on (SIGCONT) and must finish as if alone.
"""
import json, os, signal, time
from pathlib import Path

import pytest

from conftest import (DORA, EVAL, SAMPLE, TRIAD, Server, ok, ragbench, read_lines, record, setups_file, start,
                      user_error)

GITDOCS_FULL = Path("/work/shared/data/gitdocs/git_docs.jsonl")


def holds(lock: Path, pid: int) -> bool:
    "Whether `lock` (a RunLock file) names process `pid`."
    try: return f'"pid": {pid}' in lock.read_text()
    except OSError: return False


def locked(lock: Path) -> bool:
    "Whether some process holds `lock` now (the file keeps the last holder's pid after it lets go: try the lock itself)."
    import fcntl
    try:
        with open(lock, "a+") as f:
            try: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError: return True
            fcntl.flock(f, fcntl.LOCK_UN); return False
    except OSError: return False


def second_is_refused(args: list, out: Path, server: Server, keys_of) -> None:
    "Start one run, pause it (SIGSTOP) once it holds its lock and has sent a request, run a second, let the first go on."
    first = start(*args)
    # in its run: the lock names it and requests are going out (opening the index takes the lock a moment earlier, to
    # save the column mapping, and lets go: the pid stays in the file)
    while first.poll() is None and not (holds(out / ".lock", first.pid) and server.stats()["requests"] > 0): time.sleep(0.01)
    assert first.poll() is None, first.communicate()
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        held = locked(out / ".lock")       # paused while holding it (not after its run let go, before it exits)
        second = ragbench(*args)
    finally: os.killpg(first.pid, signal.SIGCONT)
    out1, err1 = first.communicate(timeout=600)
    assert held, "the first run had let go of its lock before it was paused: lengthen its run (more items, more latency)"
    keys = keys_of(out)
    record(None, first_rc=first.returncode, second_rc=second.returncode, second_says=second.stderr.strip()[-160:],
           records=len(keys), duplicated=len(keys) - len(set(keys)))
    assert first.returncode == 0, err1[-3000:]
    user_error(second, "in use by another ragbench process", f'"pid": {first.pid}')
    assert len(keys) == len(set(keys))


def dataset_ids(out): return [r["id"] for r in read_lines(out / "dataset.jsonl")[0]]


def test_two_triads_on_one_out(work, hash_db):
    with Server("--latency", 0.2) as s:                 # long enough to be paused mid-run on a busy machine
        out = work / "conc_triad"
        second_is_refused(["triad", "--db", hash_db, "--out", out, "--n", 3,
                                                      "--concurrency", 2, "--llm", s.spec], out, s, dataset_ids)


def test_two_doras_on_one_out(work, hash_db):
    with Server("--latency", 0.2) as s:                 # a DoRA run this small is over in a second without latency
        out = work / "conc_dora"
        second_is_refused(["dora", "--db", hash_db, "--out", out, "--per-style", 2,
                                                    "--styles", "find,explain", "--llm", s.spec, "--no-embed",
                                                    "--no-progress"], out, s, dataset_ids)


def test_two_evaluates_on_one_out(work, hash_db, small_dataset):
    with Server("--latency", 0.2) as s:                 # long enough to be paused mid-run on a busy machine
        out = work / "conc_eval"
        f = setups_file(work / "conc_eval_setups.yaml", s.spec)
        second_is_refused(["evaluate", "--dataset", small_dataset, "--db", hash_db, "--setups", f, "--out", out,
                           "--no-bertscore", "--quiet"], out, s,
                          lambda o: [(r["item_id"], r["setup"], r["mode"]) for r in read_lines(o / "scores.jsonl")[0]])


def test_two_indexes_on_one_table(work):
    import lancedb
    db = work / "conc_index"
    src = GITDOCS_FULL if GITDOCS_FULL.exists() else SAMPLE
    args = ["index", src, "--db", db, "--embedder", "hash", "--batch-size", 16, "--quiet"]
    first = start(*args)
    lock = db / "chunks.ragbench.lock"
    while first.poll() is None and not holds(lock, first.pid): time.sleep(0.01)
    assert first.poll() is None, first.communicate()
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        held = locked(lock)
        second = ragbench(*args)
    finally: os.killpg(first.pid, signal.SIGCONT)
    _, err1 = first.communicate(timeout=600)
    assert held, "the first index had let go of its lock before it was paused"
    ids = lancedb.connect(str(db)).open_table("chunks").to_arrow().column("id").to_pylist()
    record(None, first_rc=first.returncode, second_rc=second.returncode,
           second_says=second.stderr.strip()[-160:], rows=len(ids), duplicated=len(ids) - len(set(ids)))
    assert first.returncode == 0, err1[-3000:]
    user_error(second, "table 'chunks' in", "is in use by another ragbench process", f'"pid": {first.pid}')
    assert len(ids) == len(set(ids))
