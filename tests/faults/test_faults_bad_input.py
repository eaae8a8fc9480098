"""Bad input (issue 12 #3, #7, #8 and the before-measurements): each case exits with one clear message naming the
problem and writes nothing it should not, or (for failures a run survives) finishes with the failure counted and
named, never a traceback, never a silent success."""
import json, shutil

import pytest

from conftest import (DORA, EVAL, SAMPLE, TRIAD, ok, ragbench, read_lines, record, setups_file, user_error)

UNREACHABLE = "openai:http://127.0.0.1:9/v1@m"          # nothing listens on port 9


@pytest.fixture(scope="module")
def empty_db(work, hash_db):
    "A table with no rows (what a failed index of older versions left): the sample's sidecar, an empty table."
    import lancedb, pyarrow as pa
    db = work / "empty_db"
    if not db.exists():
        schema = lancedb.connect(str(hash_db)).open_table("chunks").schema
        lancedb.connect(str(db)).create_table("chunks", schema=schema)
        shutil.copy(hash_db / "chunks.ragbench.json", db / "chunks.ragbench.json")
    return db


def case(name, p, *words):
    "Record and check a bad-input case that must exit 2 naming the problem."
    record(None, rc=p.returncode, says=(p.stderr.strip().splitlines() or [""])[-1][:160])
    return user_error(p, *words)


@pytest.mark.parametrize("k", [0, -3])
def test_search_k_below_one(hash_db, k):
    case(f"search -k {k}", ragbench("search", "--db", hash_db, "rebase", "-k", k), "-k must be at least 1")


def test_failed_index_creates_nothing(work):
    empty = work / "empty_folder"; empty.mkdir(exist_ok=True)
    db = work / "never_created"
    case("index of an empty folder", ragbench("index", empty, "--db", db, "--quiet"), "nothing loadable")
    assert not db.exists()


@pytest.mark.parametrize("cmd", ["search", "triad", "dora"])
def test_empty_index_is_an_error(work, server, empty_db, cmd):
    args = {"search": ["search", "--db", empty_db, "anything"],
            "triad": ["triad", "--db", empty_db, "--out", work / "empty_triad", "--n", 2, "--llm", server.spec],
            "dora": ["dora", "--db", empty_db, "--out", work / "empty_dora", "--per-style", 1, "--llm", server.spec]}[cmd]
    before = server.stats()["requests"]
    case(f"{cmd} on an empty index", ragbench(*args), "table 'chunks' in", "is empty")
    assert server.stats()["requests"] == before


def test_estimate_with_a_bad_spec(work, hash_db):
    p = ragbench("triad", "--db", hash_db, "--out", work / "est_bad", "--n", 2, "--llm", "foo:bar", "--estimate")
    case("triad --estimate --llm foo:bar", p, "foo:bar")


def test_negative_max_calls(work, hash_db, server):
    p = ragbench("triad", "--db", hash_db, "--out", work / "neg_budget", "--n", 1, "--llm", server.spec, "--max-calls", -1)
    case("triad --max-calls -1", p, "max-calls")


def test_triad_with_an_unreachable_llm(work, hash_db):
    p = ragbench("triad", "--db", hash_db, "--out", work / "unreach_triad", "--n", 1, "--max-seeds", 2, "--llm", UNREACHABLE)
    record(None, rc=p.returncode, says=p.stderr.strip()[-200:])
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "max-seeds" not in p.stderr and "127.0.0.1:9" in p.stderr


def test_changed_option_on_resume_is_named(server, hash_db, work):
    out = work / "resume_changed"
    ok(ragbench("triad", "--db", hash_db, "--out", out, "--n", 1, "--llm", server.spec))
    p = ragbench("triad", "--db", hash_db, "--out", out, "--n", 1, "--llm", server.spec, "--types", "comparison")
    case("triad resume with --types changed", p, "types")


def test_answers_with_unknown_ids(work, small_dataset):
    f = work / "answers_unknown.jsonl"
    f.write_text("".join(json.dumps({"item_id": f"nope-{i}", "answer": "x", "retrieved_chunk_ids": []}) + "\n" for i in range(5)))
    p = ragbench("evaluate", "--dataset", small_dataset, "--answers", f"mine={f}", "--out", work / "ev_unknown",
                 "--judges", "none", "--no-bertscore", "--quiet")
    case("evaluate --answers, every id unknown", p, "nope-0")


def test_items_without_gold_ids_are_named(work, hash_db, small_dataset, server):
    rows = read_lines(small_dataset)[0]
    ds = work / "no_gold.jsonl"
    ds.write_text("".join(json.dumps({**r, "gold_chunk_ids": []}) + "\n" for r in rows))
    p = ragbench("evaluate", "--dataset", ds, "--db", hash_db, "--setups", setups_file(work / "nogold.yaml", server.spec),
                 "--out", work / "ev_nogold", "--judges", "none", "--no-bertscore", "--quiet")
    said = p.stdout + p.stderr
    record(None, rc=p.returncode, says=p.stderr.strip()[-200:])
    assert "Traceback" not in p.stderr
    named = [f"{ds}:{i}" for i, r in enumerate(rows, 1) if r["answerable"]]      # an unanswerable item has none by design
    assert all(n in said for n in named) and f"{len(named)} answerable item(s)" in said and "gold" in said


def test_torn_dataset_line_is_named(work, hash_db, small_dataset, server):
    text = small_dataset.read_text()
    ds = work / "torn.jsonl"
    last = text.splitlines()[-1]
    ds.write_text(text + last[: len(last) // 2])                          # a torn tail: half a line, no newline
    n = len(text.splitlines()) + 1
    p = ragbench("evaluate", "--dataset", ds, "--db", hash_db, "--setups", setups_file(work / "torn.yaml", server.spec),
                 "--out", work / "ev_torn", "--judges", "none", "--no-bertscore", "--quiet")
    record(None, rc=p.returncode, says=p.stderr.strip()[-200:])
    assert "Traceback" not in p.stderr and f"{ds}:{n}" in p.stdout + p.stderr


def test_evaluate_with_an_unreachable_llm(work, hash_db, small_dataset):
    out = work / "ev_unreach"
    p = ragbench("evaluate", "--dataset", small_dataset, "--db", hash_db, "--setups",
                 setups_file(work / "unreach.yaml", UNREACHABLE), "--out", out, "--judges", "none", "--no-bertscore",
                 "--quiet")
    rows = read_lines(out / "scores.jsonl")[0] if (out / "scores.jsonl").exists() else []
    record(None, rc=p.returncode, rows=len(rows), says=p.stderr.strip()[-200:])
    assert p.returncode != 0 and "Traceback" not in p.stderr and (out / "summary.json").exists()
    assert len(rows) == 2 * len(read_lines(small_dataset)[0])          # every row recorded, with its error
