"""Issue 40 (D1, D2, D4): every storage failure ends in one line that names the table or URL (credentials masked), the
status and the way out, with exit 1; the same command then resumes (or, for a damaged table, a re-index into a new --db
works).

Object storage is moto's S3 server behind a small proxy that resets, answers 500 or 403 on request (`s3fault.S3Fault`,
started once for this file); a damaged table is a copy of the suite's hash-embedded index whose largest data file has
bytes overwritten.
"""
import os, shutil
from pathlib import Path

import pytest

from conftest import ENV, SAMPLE, ok, ragbench, record
from s3fault import S3Fault

KEY, SECRET = "AKIAFAKEKEY0001", "wJalrFAKE%2FSECRET+0001"          # a / in a secret is %2F in a URL


@pytest.fixture(scope="module")
def s3():
    "The faulty S3 store with table 'chunks' in s3://ragbench/t (hash embedder); healed after each test."
    pytest.importorskip("moto.server")
    store = S3Fault()
    store.run_env = {**ENV, **store.env}
    ok(ragbench("index", SAMPLE, "--db", "s3://ragbench/t", "--embedder", "hash", "--quiet", env=store.run_env))
    yield store
    store.stop()


@pytest.fixture
def store(s3):
    s3.fail("pass")
    yield s3
    s3.fail("pass")


def one_line(p, *words) -> str:
    "Exit 1, no Python traceback, the last stderr line is `ragbench CMD: ...` with `words` and no credential."
    last = (p.stderr.strip().splitlines() or [""])[-1]
    assert p.returncode == 1 and "Traceback" not in p.stderr and last.startswith("ragbench"), (p.returncode, p.stderr[-3000:])
    assert all(w in last for w in words), (words, last)
    assert SECRET not in p.stderr and KEY not in p.stderr and len(last) < 600, last
    return last


STATUS = {"403": "HTTP 403 AccessDenied", "500": "HTTP 500", "reset": "connection reset"}


@pytest.mark.parametrize("mode", ["403", "500", "reset"])
def test_store_fails_at_connect(mode, store):
    "D4: search against a store that refuses, fails or resets: one line with the masked URL, the status, exit 1; then the same command works."
    args = ["search", "--db", f"s3://{KEY}:{SECRET}@ragbench/t", "git branch", "-k", 2]
    store.fail(mode)
    line = one_line(ragbench(*args, env=store.run_env), "table 'chunks' in s3://***@ragbench/t", STATUS[mode],
                    "run the same command again")
    store.fail("pass")
    again = ragbench(*args, env=store.run_env)
    record(message=line[:160], resumed_rc=again.returncode)
    ok(again)


@pytest.mark.parametrize("mode", ["500", "reset"])
def test_store_fails_mid_index(mode, store):
    "D1: a 500 or a reset after the build started: one line, exit 1; the same command resumes to the whole table."
    args = ["index", SAMPLE, "--db", f"s3://ragbench/mid{mode}", "--embedder", "hash", "--quiet", "--write-rows", 64]
    store.fail(mode, after=20)
    line = one_line(ragbench(*args, env=store.run_env), f"table 'chunks' in s3://ragbench/mid{mode}",
                    {"500": "HTTP 500", "reset": "connection"}[mode],          # mid-run, lance says 'error sending request'
                    "run the same command again to resume")
    store.fail("pass")
    again = ok(ragbench(*args, env=store.run_env))
    record(message=line[:160], resumed=again.stdout.splitlines()[1][:80])
    assert "189 chunks" in again.stdout.splitlines()[1], again.stdout


def test_read_only_credentials(store):
    "D1: credentials that may read but not write (403 on PUT/POST/DELETE): one line naming 403 AccessDenied and the credentials."
    args = ["index", SAMPLE, "--db", "s3://ragbench/ro", "--embedder", "hash", "--quiet"]
    store.fail("403", methods=("PUT", "POST", "DELETE"))
    line = one_line(ragbench(*args, env=store.run_env), "table 'chunks' in s3://ragbench/ro", "HTTP 403 AccessDenied",
                    "credentials", "run the same command again")
    store.fail("pass")
    record(message=line[:160])
    ok(ragbench(*args, env=store.run_env))


def test_no_region(store):
    "D1: no region set (and no endpoint to take it from): one line saying so and naming AWS_REGION."
    bare = {k: v for k, v in store.run_env.items() if not k.startswith(("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT"))}
    args = ["search", "--db", "s3://ragbench/t", "git branch", "-k", 2]
    line = one_line(ragbench(*args, env=bare), "table 'chunks' in s3://ragbench/t", "no region set", "AWS_REGION")
    record(message=line[:160])
    ok(ragbench(*args, env=store.run_env))


def test_store_resets_mid_triad(store, server, work):
    "D1: connections reset while TRIAD reads its seeds' neighbours: one line, exit 1; the same command finishes the run."
    out = work / "triad_s3_reset"
    args = ["triad", "--db", "s3://ragbench/t", "--out", out, "--n", 2, "--concurrency", 2, "--llm", server.spec]
    store.fail("reset", after=30, methods=("GET",))
    line = one_line(ragbench(*args, env=store.run_env), "table 'chunks' in s3://ragbench/t", "connection",
                    "run the same command again to resume")
    store.fail("pass")
    again = ok(ragbench(*args, env=store.run_env))
    record(message=line[:160], resumed=again.stdout.splitlines()[0][:60])
    assert (out / "dataset.jsonl").exists()


def damage(db: Path, where: str = "pages") -> Path:
    "Overwrite bytes of the largest data file of `db`'s table 'chunks': its pages (50-99% of the file) or its footer (the last KiB)."
    f = max((db / "chunks.lance" / "data").glob("*.lance"), key=lambda p: p.stat().st_size)
    b = bytearray(f.read_bytes())
    at, to = (int(len(b) * 0.5), int(len(b) * 0.99)) if where == "pages" else (len(b) - 1024, len(b))
    b[at:to] = b"\xff" * (to - at)
    f.write_bytes(bytes(b))
    return f


def test_damaged_table(hash_db, server, work):
    "D2: search, index and triad on a table with a damaged data file: one line naming the table and the re-index; a new --db works."
    db = work / "db_damaged"
    shutil.copytree(hash_db, db); damage(db)
    new = work / "db_reindexed"
    for cmd, args in {"search": ["search", "--db", db, "git branch"],
                      "index": ["index", SAMPLE, "--db", db, "--embedder", "hash", "--quiet"],
                      "triad": ["triad", "--db", db, "--out", work / "triad_damaged", "--n", 1, "--llm", server.spec]}.items():
        line = one_line(ragbench(*args), f"table 'chunks' in {db}", "damaged", f"re-index into a new --db")
        record(sub=cmd, message=line[:160])
    ok(ragbench("index", SAMPLE, "--db", new, "--embedder", "hash", "--quiet"))
    ok(ragbench("search", "--db", new, "git branch"))


def test_damaged_footer(hash_db, work):
    "D2: a data file whose footer is overwritten (no longer a Lance file): search says the table is damaged, exit 1."
    db = work / "db_damaged_footer"
    shutil.copytree(hash_db, db); damage(db, "footer")
    line = one_line(ragbench("search", "--db", db, "git branch"), f"table 'chunks' in {db}", "damaged", "re-index into a new --db")
    record(message=line[:160])


def test_slow_store_says_what_the_run_waits_for(store):
    "Minor: a request the object store holds for 7 s prints one line on stderr while it waits; the search then ends well."
    store.fail("slow", after=2, delay=7)
    p = ok(ragbench("search", "--db", "s3://ragbench/t", "git branch", "-k", 2, env=store.run_env))
    waits = [ln for ln in p.stderr.splitlines() if ln.startswith("waiting for the object store")]
    record(message=(waits or [""])[0][:160])
    assert len(waits) == 1 and "table 'chunks' in s3://ragbench/t has not answered for 5 s" in waits[0], p.stderr[-2000:]
