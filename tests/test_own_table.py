"""Issue 25 (part B): your own LanceDB table, command by command: column detection, --table / --column on every
command, reads that leave the table folder unchanged, vectors of another model, gold ids missing from the index,
unanswerable items in the ragas export, several queries per `ragbench search`. Run: pytest tests/test_own_table.py -q
"""
import hashlib, json, os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.cli import main
from ragbench.core import Dataset, QAItem
from ragbench.embed import HashEmbedder


def run_cli(argv, capsys):
    "Run `ragbench ARGV` in-process; (status, stdout, stderr)."
    rc = main([str(a) for a in argv]); out = capsys.readouterr()
    return rc, out.out, out.err


TEXTS = ["git bisect finds the commit that introduced a bug by binary search.",
         "git blame shows what revision last modified each line of a file.",
         "git grep prints lines matching a pattern in tracked files.",
         "git gc cleans up unnecessary files and optimizes the local repository.",
         "git stash saves your local modifications away and reverts the working directory.",
         "git tag -a creates an annotated tag that marks a release."]


def own_table(db, names=("chunk_id", "content", "embedding", "doc"), vectors=None, dim=64):
    "A LanceDB table made by plain lancedb code with the column names `names` (id, text, vector, doc id)."
    import lancedb, pyarrow as pa
    vecs = HashEmbedder(dim).encode(TEXTS) if vectors is None else vectors
    cols = {names[0]: [f"k{i}" for i in range(len(TEXTS))], names[1]: TEXTS,
            names[2]: pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel().astype("float32")), vecs.shape[1])}
    if len(names) > 3: cols[names[3]] = ["bisect", "blame", "grep", "gc", "stash", "tag"]
    lancedb.connect(str(db)).create_table("kb", data=pa.table(cols))
    return db


def folder_digest(d: Path) -> dict:
    "{relative path: sha256} of every file under `d`."
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


# ---- 1. obvious names are detected (and said); every missing / ambiguous role in one error ----

def test_obvious_column_names_are_detected_and_said(tmp_path, capsys):
    db = own_table(tmp_path / "db")
    rc, out, err = run_cli(["search", "--db", db, "--table", "kb", "which revision modified a line", "--embedder", "hash:64",
                            "--json", "-k", "2"], capsys)
    assert rc == 0, err
    hits = json.loads(out)
    assert hits[0]["chunk_id"] == "k1" and hits[0]["doc_id"] == "blame"
    assert "detected" in err and "id=chunk_id" in err and "text=content" in err and "vector=embedding" in err
    assert "doc_id=doc" in err


def test_every_missing_or_ambiguous_role_in_one_error(tmp_path, capsys):
    import lancedb, pyarrow as pa
    vecs = HashEmbedder(8).encode(["a", "b"])
    arr = lambda: pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), 8)
    lancedb.connect(str(tmp_path / "db")).create_table("kb", data=pa.table(
        {"ref": ["a", "b"], "words": ["x", "y"], "vec": arr(), "embedding": arr()}))
    rc, _, err = run_cli(["search", "--db", tmp_path / "db", "--table", "kb", "q", "--embedder", "hash:8"], capsys)
    assert rc == 2
    assert "no id column found" in err and "no text column found" in err                  # both missing, one error
    assert "vec, embedding" in err and "vector" in err                          # ambiguous: both candidates named
    assert err.count("ragbench search:") == 1 and "--column id=" in err and "--column text=" in err


# ---- 2. evaluate --table, export-ragas --column ----

def _dataset(path, gold, answerable_extra=True):
    items = [QAItem(id="q1", method="static", kind="bridge", question="which revision modified a line", answer="git blame", gold_chunk_ids=gold)]
    if answerable_extra:
        items.append(QAItem(id="q2", method="static", kind="bridge", question="who wrote the moon landing script", answer="", answerable=False,
                            unanswerable_kind="corpus"))
    Dataset(items).write(path)
    return path


def test_evaluate_takes_table_and_export_ragas_takes_column(tmp_path, capsys):
    db = own_table(tmp_path / "db", names=("rid", "passage_text", "emb_vec"))
    ds = _dataset(tmp_path / "ds.jsonl", ["k1"])
    cols = ["--column", "id=rid", "--column", "text=passage_text", "--column", "vector=emb_vec"]
    setups = tmp_path / "setups.yaml"
    setups.write_text('baseline: {name: dense, top_k: 2, embedder: "hash:64"}\n')
    rc, out, err = run_cli(["evaluate", "--dataset", ds, "--db", db, "--table", "kb", *cols, "--setups", setups,
                            "--out", tmp_path / "ev", "--judges", "none", "--no-bertscore", "--quiet"], capsys)
    assert rc == 0, err
    rows = [json.loads(l) for l in (tmp_path / "ev" / "scores.jsonl").read_text().splitlines()]
    assert any(r["retrieved_chunk_ids"] and r["retrieved_chunk_ids"][0] == "k1" for r in rows)
    rc, out, err = run_cli(["export-ragas", "--dataset", ds, "--db", db, "--table", "kb", *cols, "--embedder", "hash:64",
                            "--out", tmp_path / "r.jsonl"], capsys)
    assert rc == 0, err
    exported = [json.loads(l) for l in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert exported[0]["reference_contexts"] == [TEXTS[1]]


# ---- 3. a read leaves the user's table folder byte for byte as it was ----

def test_search_does_not_modify_the_table_folder(tmp_path, capsys):
    db = own_table(tmp_path / "db")
    before = folder_digest(db)
    for mode in ("dense", "bm25", "hybrid"):
        rc, out, err = run_cli(["search", "--db", db, "--table", "kb", "annotated tag release", "--embedder", "hash:64",
                                "--mode", mode, "--json"], capsys)
        assert rc == 0, err
        assert json.loads(out)[0]["chunk_id"] == "k5", (mode, out)
    assert folder_digest(db) == before
    import lancedb
    assert lancedb.connect(str(db)).open_table("kb").list_indices() == []


# ---- 4. vectors of another model than the one named ----

def test_vectors_of_another_model_are_refused(tmp_path, capsys):
    import numpy as np
    other = np.random.default_rng(0).normal(size=(len(TEXTS), 64)).astype("float32")   # 64-dim, but not hash:64's
    db = own_table(tmp_path / "db", vectors=other)
    rc, _, err = run_cli(["search", "--db", db, "--table", "kb", "q", "--embedder", "hash:64"], capsys)
    assert rc == 2
    assert "another model" in err and "hash-64" in err and "cosine" in err


# ---- 5. evaluate against the wrong index ----

def test_evaluate_against_an_index_without_the_gold_ids_refuses(tmp_path, capsys):
    db = own_table(tmp_path / "db")
    ds = _dataset(tmp_path / "ds.jsonl", ["other-7", "other-9"], answerable_extra=False)
    setups = tmp_path / "setups.yaml"
    setups.write_text('baseline: {name: dense, top_k: 2, embedder: "hash:64", table: kb}\n')
    rc, _, err = run_cli(["evaluate", "--dataset", ds, "--db", db, "--setups", setups, "--out", tmp_path / "ev",
                          "--judges", "none", "--no-bertscore", "--quiet"], capsys)
    assert rc == 2
    assert "0 of the dataset's 2 gold chunk ids" in err and "table 'kb'" in err
    assert not (tmp_path / "ev" / "scores.jsonl").exists()


# ---- 6. export-ragas and unanswerable items ----

def test_export_ragas_leaves_out_unanswerable_items_and_says_so(tmp_path, capsys):
    db = own_table(tmp_path / "db")
    ds = _dataset(tmp_path / "ds.jsonl", ["k1"])
    rc, out, err = run_cli(["export-ragas", "--dataset", ds, "--db", db, "--table", "kb", "--embedder", "hash:64",
                            "--out", tmp_path / "r.jsonl", "--with-ids"], capsys)
    assert rc == 0, err
    exported = [json.loads(l) for l in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [r["item_id"] for r in exported] == ["q1"]
    assert "1 unanswerable item(s) left out" in out + err


# ---- 7. several queries, one embedder load ----

def test_search_reads_several_queries_with_one_embedder_load(tmp_path, capsys, monkeypatch):
    import ragbench.index.read as index      # ChunkIndex.open makes the embedder there
    db = own_table(tmp_path / "db")
    made = []
    real = index.make_embedder
    monkeypatch.setattr(index, "make_embedder", lambda spec=None: made.append(spec) or real(spec))
    qf = tmp_path / "queries.txt"
    qf.write_text("annotated tag release\n\nwhich revision modified a line\nbinary search for a bug\n")
    rc, out, err = run_cli(["search", "--db", db, "--table", "kb", "--queries", qf, "--embedder", "hash:64",
                            "--json", "-k", "1"], capsys)
    assert rc == 0, err
    res = json.loads(out)
    assert [r["query"] for r in res] == ["annotated tag release", "which revision modified a line", "binary search for a bug"]
    assert [r["hits"][0]["chunk_id"] for r in res] == ["k5", "k1", "k0"]
    assert len(made) == 1


def test_the_embedder_assumed_for_an_own_table_is_said(tmp_path, capsys):
    "Issue 39: a table that records no embedder is read with the bundled model only after its vectors match, and the run says so."
    from ragbench.embed import make_embedder
    emb = make_embedder()
    db = own_table(tmp_path / "db", vectors=emb.encode(TEXTS))
    rc, out, err = run_cli(["search", "--db", db, "--table", "kb", "which revision modified a line", "-k", "1"], capsys)
    assert rc == 0, err
    assert "records no embedder: questions are embedded with " + emb.spec in err and "--embedder SPEC" in err
    rc, out, err = run_cli(["search", "--db", tmp_path / "db", "--table", "kb", "which revision", "--embedder", emb.spec], capsys)
    assert rc == 0 and "records no embedder" not in err
