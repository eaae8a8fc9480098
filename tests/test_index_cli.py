"""Integration tests of `ragbench index` / `ragbench search` and ChunkIndex on small corpora.

Most tests use the model-free `hash` embedder; one test uses the bundled all-MiniLM-L6-v2 model
(loaded once, in-process). Run: pytest tests/test_index_cli.py -q
"""
import json, os, re, signal, subprocess, sys, textwrap, time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.corpus import paragraph_chunk_id
from ragbench.embed import HashEmbedder
from ragbench.cli import main
from ragbench.index import ChunkIndex

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def run_cli(argv, capsys):
    "Run `ragbench ARGV` in-process through the dispatcher."
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def search_json(capsys, db, query, *extra):
    "Hits of `ragbench search --json` as a list of dicts."
    rc, out, err = run_cli(["search", "--db", str(db), query, "--json", *extra], capsys)
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture
def folder(tmp_path):
    "A small mixed folder: .txt, .md, .html, a binary file, a non-UTF-8 file and an unsupported file."
    d = tmp_path / "docs"; (d / "guide").mkdir(parents=True)
    (d / "stash.txt").write_text("git stash saves your local modifications away and reverts the working "
                                 "directory to match the HEAD commit. Use git stash pop to restore them later.")
    (d / "guide" / "tags.md").write_text("# Tagging\n\nA tag marks a release. Create an annotated tag with "
                                         "git tag -a v1.0 and share it with git push --tags.")
    (d / "remotes.html").write_text("<html><head><title>Remotes</title></head><body><h1>Remotes</h1>"
                                    "<p>A remote is another copy of the repository. git fetch downloads its "
                                    "branches; git remote add registers a new one.</p></body></html>")
    (d / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (d / "latin1.md").write_bytes("R\u00e9sum\u00e9 of merging strategies".encode("latin-1"))
    (d / "archive.zip").write_bytes(b"PK\x03\x04")
    return d


def test_folder_index_and_search_default_embedder(folder, tmp_path, capsys):
    db = tmp_path / "db"
    rc, out, err = run_cli(["index", str(folder), "--db", str(db), "--quiet"], capsys)
    assert rc == 0, err
    assert "3 documents -> 3 chunks (3 new" in out
    assert "all-MiniLM-L6-v2 (dim 384)" in out
    assert "skipped 3 input(s)" in err and "skipped" not in out       # issue 40: the skip list goes to stderr
    assert "image.txt: binary file" in err
    assert "latin1.md:1: not valid UTF-8" in err
    assert "archive.zip: unsupported file type '.zip'" in err
    queries = {"how do I put aside my local modifications": "stash.txt",
               "create an annotated tag for a release": "guide/tags.md",
               "download branches from another copy of the repository": "remotes.html"}
    for mode in ("dense", "bm25", "hybrid"):
        for q, doc in queries.items():
            hits = search_json(capsys, db, q, "--mode", mode, "-k", "2")
            assert hits and hits[0]["doc_id"] == doc, (mode, q, hits)
            assert set(hits[0]) >= {"chunk_id", "text", "score"}
            assert hits[0]["score"] >= hits[-1]["score"]
    # re-running is idempotent: nothing new is embedded
    rc, out, _ = run_cli(["index", str(folder), "--db", str(db), "--quiet"], capsys)
    assert rc == 0 and "(0 new, 3 already in the table)" in out
    # plain-text output
    rc, out, _ = run_cli(["search", "--db", str(db), "annotated tag", "-k", "1"], capsys)
    assert rc == 0 and out.startswith("1. ") and "Tagging" in out


WARM_SEARCHES = textwrap.dedent("""
    import contextlib, io, json, sys, time
    from ragbench.cli import main
    from ragbench.embed import _MODEL_LOADS
    from ragbench.index import ChunkIndex
    db, steps = sys.argv[1], []
    for q in ("how do I put aside my local modifications", "create an annotated tag for a release"):
        t = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()) as f: rc = main(["search", "--db", db, q, "--json", "-k", "1"])
        steps.append({"rc": rc, "doc": json.loads(f.getvalue())[0]["doc_id"], "loads": sum(_MODEL_LOADS.values()),
                      "cpu_s": round(time.process_time() - t, 3)})
    doc = ChunkIndex.open(db).search("download branches from another copy of the repository", k=1)[0].doc_id
    steps.append({"doc": doc, "loads": sum(_MODEL_LOADS.values())})    # the notebook API, the index opened afresh
    print(json.dumps(steps))
""")


def test_a_second_search_in_one_process_loads_no_model(folder, tmp_path, capsys):
    "Issue 42, warm within a kernel: the model loads once per process; later searches (CLI or API) reuse it."
    db = tmp_path / "db"
    rc, _, err = run_cli(["index", str(folder), "--db", str(db), "--quiet"], capsys)     # the bundled MiniLM model
    assert rc == 0, err
    r = subprocess.run([sys.executable, "-c", WARM_SEARCHES, str(db)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    steps = json.loads(r.stdout.strip().splitlines()[-1])
    assert [s["doc"] for s in steps] == ["stash.txt", "guide/tags.md", "remotes.html"], steps
    assert [s["loads"] for s in steps] == [1, 1, 1], steps        # loaded by the first search, never again
    print(f"\nCPU of a first and a second search in one process: {steps[0]['cpu_s']} s, {steps[1]['cpu_s']} s")


def test_jsonl_bad_lines_are_named(tmp_path, capsys):
    src = tmp_path / "docs.jsonl"
    src.write_text('{"id": "a", "title": "A", "text": "git commit records changes to the repository."}\n'
                   '{"id": "b", "title": "B", "text": "broken\n'
                   '{"id": "c", "title": "C"}\n'
                   '{"id": "d", "text": 42}\n'
                   '{"id": "e", "text": "git log shows commit logs."}\n')
    rc, out, err = run_cli(["index", str(src), "--db", str(tmp_path / "db"), "--embedder", "hash", "--quiet"], capsys)
    assert rc == 0, err
    assert "2 documents -> 2 chunks" in out
    assert f"{src}:2: not valid JSON" in err                           # issue 40: the skip list goes to stderr
    assert f"{src}:3: field 'text' is missing" in err
    assert f"{src}:4: field 'text' must be a string" in err


def test_fatal_inputs_exit_2_with_one_message(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad.jsonl"; bad.write_text("not json\n")
    for src, msg in [(tmp_path / "missing", "no such file or folder"), (tmp_path / "empty", "nothing loadable"),
                     (bad, "bad.jsonl:1: not valid JSON")]:
        rc, out, err = run_cli(["index", str(src), "--db", str(tmp_path / "db"), "--embedder", "hash", "--quiet"], capsys)
        assert rc == 2 and msg in err and err.count("\n") == 1, (src, err)
    rc, _, err = run_cli(["search", "--db", str(tmp_path / "nodb"), "q"], capsys)
    assert rc == 2 and "no LanceDB database" in err


def test_huge_document_is_rejected_not_loaded(tmp_path, capsys):
    d = tmp_path / "docs"; d.mkdir()
    (d / "small.txt").write_text("git branch lists, creates or deletes branches.")
    with open(d / "huge.txt", "w") as f:
        for _ in range(3000): f.write("word " * 200 + "\n")          # ~3 MB
    rc, out, err = run_cli(["index", str(d), "--db", str(tmp_path / "db"), "--embedder", "hash", "--quiet",
                            "--max-doc-mb", "1"], capsys)
    assert rc == 0, err
    assert "1 documents" in out and "huge.txt: file is 3.0 MB, above the 1 MB per-document limit" in err


@pytest.mark.skipif(not (SHARED / "hotpotqa" / "hotpotqa_train100.json").exists(), reason="shared data not present")
def test_hotpotqa_slice_paragraph_mode(tmp_path, capsys):
    qs = json.loads((SHARED / "hotpotqa" / "hotpotqa_train100.json").read_text())[:20]
    src = tmp_path / "hotpot20.json"; src.write_text(json.dumps(qs))
    db = tmp_path / "db"
    rc, out, err = run_cli(["index", str(src), "--db", str(db), "--embedder", "hash", "--mode", "paragraph", "--quiet"], capsys)
    assert rc == 0, err
    paragraphs = {(t, "".join(s)) for q in qs for t, s in q["context"]}
    idx = ChunkIndex.open(db)
    assert len(idx) == len(paragraphs) == 200
    # every supporting fact maps to a chunk id that is in the index, with the right title
    for q in qs:
        ctx = dict((t, s) for t, s in q["context"])
        gold = [paragraph_chunk_id(t, ctx[t]) for t in {t for t, _ in q["supporting_facts"]}]
        assert {c.meta["title"] for c in idx.get_many(gold)} == {t for t, _ in q["supporting_facts"]}
    hits = search_json(capsys, db, qs[0]["question"], "--mode", "bm25", "-k", "10")
    assert {h["doc_id"] for h in hits} & {t for t, _ in qs[0]["supporting_facts"]}


def test_kill_and_resume(tmp_path, capsys):
    src = tmp_path / "docs.jsonl"; n = 40
    with open(src, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"doc{i}", "text": f"Document {i} talks about topic {i % 7} and commit {i}."}) + "\n")
    db = tmp_path / "db"
    script = textwrap.dedent(f"""
        import sys, time
        from ragbench.embed import HashEmbedder
        _enc = HashEmbedder.encode
        def slow(self, texts):
            time.sleep(0.25); return _enc(self, texts)
        HashEmbedder.encode = slow
        from ragbench.cli import main
        sys.exit(main(["index", {str(src)!r}, "--db", {str(db)!r}, "--embedder", "hash:64", "--batch-size", "4", "--write-rows", "4", "--quiet"]))  # a write per batch: the kill comes between writes
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    import lancedb
    rows, deadline = 0, time.time() + 60
    try:
        while time.time() < deadline:
            if (db / "chunks.lance").exists():
                try: rows = lancedb.connect(str(db)).open_table("chunks").count_rows()
                except Exception: rows = 0
                if rows >= 4: break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert 4 <= rows < n, rows
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill(); proc.wait()
    assert proc.returncode == -signal.SIGKILL
    written = lancedb.connect(str(db)).open_table("chunks").count_rows()
    assert 0 < written < n and written % 4 == 0          # whole batches only
    rc, out, err = run_cli(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--batch-size", "4", "--quiet"], capsys)
    assert rc == 0, err
    assert f"({n - written} new, {written} already in the table)" in out
    idx = ChunkIndex.open(db)
    ids = [c.id for c in idx.iter_chunks(batch_size=7)]
    assert len(idx) == n and len(ids) == n and len(set(ids)) == n
    assert idx.search("topic 3", k=3, mode="bm25")               # FTS index covers all rows


def _own_table(path, dim=64):
    "A LanceDB table made outside ragbench, with its own column names."
    import lancedb, pyarrow as pa
    texts = ["git bisect finds the commit that introduced a bug by binary search.",
             "git blame shows what revision last modified each line of a file.",
             "git grep prints lines matching a pattern in tracked files.",
             "git gc cleans up unnecessary files and optimizes the local repository."]
    vecs = HashEmbedder(dim).encode(texts)
    tbl = pa.table({"doc_chunk_id": [f"k{i}" for i in range(len(texts))], "content": texts,
                    "source_doc": ["bisect", "blame", "grep", "gc"],
                    "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), dim)})
    lancedb.connect(str(path)).create_table("kb", data=tbl)
    return texts


def test_user_table_with_column_mapping(tmp_path, capsys):
    db = tmp_path / "user_db"; texts = _own_table(db)
    cols = ["--column", "id=doc_chunk_id", "--column", "text=content", "--column", "vector=embedding",
            "--column", "doc_id=source_doc"]
    for mode in ("dense", "bm25", "hybrid"):
        hits = search_json(capsys, db, "which line was modified by what revision", "--table", "kb",
                           "--embedder", "hash:64", "--mode", mode, *cols)
        assert hits[0]["chunk_id"] == "k1" and hits[0]["doc_id"] == "blame", (mode, hits)
    idx = ChunkIndex.open(db, table="kb", embedder=HashEmbedder(64),
                          columns={"id": "doc_chunk_id", "text": "content", "vector": "embedding"})
    assert len(idx) == 4 and idx.get("k2").text == texts[2]
    assert idx.get("k2").meta == {"source_doc": "grep"}
    assert [c.id for c in idx.get_many(["k3", "k0"])] == ["k3", "k0"]
    assert "k0" not in [h.chunk_id for h in idx.neighbours("k0", k=3)]
    with pytest.raises(KeyError, match="'nope'"): idx.get_many(["k0", "nope"])


def test_user_table_errors_name_the_column(tmp_path, capsys):
    db = tmp_path / "user_db"; _own_table(db)
    rc, _, err = run_cli(["search", "--db", str(db), "--table", "kb", "q", "--embedder", "hash:64",
                          "--column", "id=doc_chunk_id", "--column", "text=body", "--column", "vector=embedding"], capsys)
    assert rc == 2
    assert "table 'kb' has no column 'body' (the text column)" in err
    assert "its columns are: doc_chunk_id, content, source_doc, embedding" in err
    rc, _, err = run_cli(["search", "--db", str(db), "--table", "kb", "q", "--embedder", "hash:32",
                          "--column", "id=doc_chunk_id", "--column", "text=content", "--column", "vector=embedding"], capsys)
    assert rc == 2 and "stores 64-dimensional vectors in column 'embedding'" in err
    rc, _, err = run_cli(["search", "--db", str(db), "--table", "nope", "q"], capsys)
    assert rc == 2 and "no table 'nope'" in err and "kb" in err


# ---- issue 12 #2, #3, #8: one writer per table, ids unique, nothing created on failure, bad -k ----

def _docs_jsonl(path, n=40):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"doc{i}", "text": f"Document {i} talks about topic {i % 7} and commit {i}."}) + "\n")
    return path


SLOW_INDEX = """
import sys, time
from ragbench.embed import HashEmbedder
_enc = HashEmbedder.encode
def slow(self, texts):
    time.sleep({delay}); return _enc(self, texts)
HashEmbedder.encode = slow
from ragbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_second_index_on_one_table_is_refused_with_the_holders_pid(tmp_path):
    src, db = _docs_jsonl(tmp_path / "docs.jsonl"), tmp_path / "db"
    args = ["index", str(src), "--db", str(db), "--embedder", "hash:64", "--batch-size", "4", "--quiet"]
    first = subprocess.Popen([sys.executable, "-c", SLOW_INDEX.format(delay=0.3), *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock, deadline = db / "chunks.ragbench.lock", time.time() + 60
        while not (lock.exists() and str(first.pid) in lock.read_text()):
            assert time.time() < deadline and first.poll() is None, first.communicate()
            time.sleep(0.05)
        second = subprocess.run([sys.executable, "-m", "ragbench.cli", *args], capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        assert "is in use by another ragbench process" in second.stderr and f'"pid": {first.pid}' in second.stderr
        assert "Traceback" not in second.stderr
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
    finally:
        first.kill(); first.wait()
    idx = ChunkIndex.open(db)
    ids = [c.id for c in idx.iter_chunks()]
    assert len(ids) == len(set(ids)) == 40


def test_reindex_repairs_a_table_with_duplicated_ids(tmp_path, capsys):
    src, db = _docs_jsonl(tmp_path / "docs.jsonl", 12), tmp_path / "db"
    assert run_cli(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"], capsys)[0] == 0
    import lancedb
    tbl = lancedb.connect(str(db)).open_table("chunks")
    tbl.add(tbl.to_arrow().slice(0, 5))                     # what two concurrent older builds left: 5 ids twice
    assert tbl.count_rows() == 17
    rc, out, err = run_cli(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"], capsys)
    assert rc == 0, err
    assert "removed 5 extra rows of ids stored more than once" in out and "(0 new, 12 already in the table)" in out
    ids = lancedb.connect(str(db)).open_table("chunks").to_arrow().column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 12
    assert search_json(capsys, db, "topic 3", "--mode", "bm25", "-k", "3")


UPSERT_WORKER = """
import random, sys, time
from ragbench.index import ChunkIndex
from ragbench.core import Chunk
idx = ChunkIndex.open(sys.argv[1])
chunks = [Chunk(id=f"w{i}", doc_id=f"d{i}", text=f"worker text {i} about topic {i % 5}") for i in range(600)]
random.Random(int(sys.argv[3])).shuffle(chunks)
while time.time() < float(sys.argv[2]): time.sleep(0.005)          # start together
print(sum(idx.upsert(chunks[i:i + 20]) for i in range(0, 600, 20)))
"""


def test_concurrent_upserts_never_store_an_id_twice(tmp_path):
    "Writers without the file lock (Ray workers, object storage) rely on merge_insert on the primary key."
    from ragbench.core import Chunk
    db = tmp_path / "db"
    ChunkIndex.build(db, [Chunk(id="seed", doc_id="s", text="seed")], HashEmbedder(64), progress=False)
    start = time.time() + 5
    ps = [subprocess.Popen([sys.executable, "-c", UPSERT_WORKER, str(db), str(start), str(j)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for j in range(3)]
    outs = [p.communicate(timeout=300) for p in ps]
    assert all(p.returncode == 0 for p in ps), [o[1][-2000:] for o in outs]
    ids = [c.id for c in ChunkIndex.open(db).iter_chunks()]
    assert len(ids) == len(set(ids)) == 601
    assert sum(int(o[0].split()[-1]) for o in outs) == 600             # each id inserted by exactly one writer


def test_failed_index_creates_nothing_and_an_empty_table_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    db = tmp_path / "db"
    rc, _, err = run_cli(["index", str(tmp_path / "empty"), "--db", str(db), "--embedder", "hash", "--quiet"], capsys)
    assert rc == 2 and "nothing loadable" in err
    assert not db.exists()


def test_an_empty_table_is_an_error_for_search_triad_and_dora(tmp_path, capsys):
    "An empty table (what a failed index of older versions left) is refused by every command that reads it."
    db = tmp_path / "db"
    import lancedb
    from ragbench.index import sidecar_path
    from ragbench.index.build import _schema
    lancedb.connect(str(db)).create_table("chunks", schema=_schema(64))
    sidecar_path(db, "chunks").write_text(json.dumps({"embedder": {"name": "hash-64", "spec": "hash:64", "dim": 64}}))
    for argv in (["search", "--db", str(db), "anything"],
                 ["triad", "--db", str(db), "--out", str(tmp_path / "t"), "--n", "2", "--llm", "template"],
                 ["dora", "--db", str(db), "--out", str(tmp_path / "d"), "--per-style", "1", "--llm", "template"]):
        rc, out, err = run_cli(argv, capsys)
        assert rc == 2 and "table 'chunks' in" in err and "is empty" in err, (argv[0], rc, err[-500:])
    # indexing into it fills it
    rc, out, err = run_cli(["index", str(_docs_jsonl(tmp_path / "docs.jsonl", 5)), "--db", str(db), "--embedder", "hash:64", "--quiet"], capsys)
    assert rc == 0 and "(5 new" in out, err
    assert len(search_json(capsys, db, "topic", "-k", "2")) == 2


@pytest.mark.parametrize("k", ["0", "-3"])
def test_search_k_below_one_is_an_error(tmp_path, capsys, k):
    db = tmp_path / "db"
    assert run_cli(["index", str(_docs_jsonl(tmp_path / "docs.jsonl", 5)), "--db", str(db), "--embedder", "hash", "--quiet"], capsys)[0] == 0
    rc, out, err = run_cli(["search", "--db", str(db), "topic", "-k", k], capsys)
    assert rc == 2 and f"-k must be at least 1 (got {k})" in err


# ---- issue 12/13: your own vector table, end to end (every command opens it with the same --column mapping) ----

SAMPLE = ROOT / "ragbench" / "data" / "gitdocs_sample.jsonl"
OWN_COLUMNS = ["--column", "id=doc_key", "--column", "text=content", "--column", "vector=embedding"]


def own_table(db, n=60, dim=64):
    "A 60-row LanceDB table made by plain lancedb code: its own column names, no doc id column, no full-text index."
    import lancedb, pyarrow as pa
    paras = []
    for line in SAMPLE.read_text().splitlines():
        doc = json.loads(line)
        paras += [(doc["title"], p.strip()) for p in doc["text"].split("\n\n") if 200 < len(p.strip()) < 1500]
    paras = paras[:n]
    texts = [f"{t}: {p}" for t, p in paras]
    vecs = HashEmbedder(dim).encode(texts)                 # any embedding model would do; this one is offline
    lancedb.connect(str(db)).create_table("kb", data=pa.table({
        "doc_key": [f"row-{i}" for i in range(len(texts))], "content": texts, "page": [t for t, _ in paras],
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), dim)}))
    return texts


@pytest.fixture
def fake_server():
    from ragbench.testing import FakeLLMServer
    with FakeLLMServer() as srv: yield srv


def test_own_table_dora_with_column_mapping(tmp_path, capsys, fake_server):
    db, out = tmp_path / "own", tmp_path / "dora"
    own_table(db)
    spec = f"openai:{fake_server.url}/v1@fake-model"
    args = ["dora", "--db", str(db), "--table", "kb", *OWN_COLUMNS, "--embedder", "hash:64", "--out", str(out),
            "--per-style", "1", "--styles", "find,explain", "--llm", spec, "--no-embed", "--no-progress"]
    rc, stdout, err = run_cli(args, capsys)
    assert rc == 0, err[-3000:]
    assert "BM25 runs on an in-memory index of its 60 texts (your table folder is not changed)" in err   # said, once
    items = [json.loads(l) for l in (out / "dataset.jsonl").read_text().splitlines()]
    assert items and all(i["gold_chunk_ids"] and all(g.startswith("row-") for g in i["gold_chunk_ids"]) for i in items)
    assert all(i["meta"]["doc_id"].startswith("row-") for i in items)                 # no doc id column: a row is a document
    saved = json.loads((out / "manifest.json").read_text())["index"]
    assert saved["columns"] == {"id": "doc_key", "text": "content", "vector": "embedding", "doc_id": None, "meta": None}
    # the vectors are the user's, untouched; the table gained no index either (issue 25: a read never writes it)
    import lancedb
    tbl = lancedb.connect(str(db)).open_table("kb")
    assert tbl.schema.names == ["doc_key", "content", "page", "embedding"] and tbl.count_rows() == 60
    assert tbl.list_indices() == []
    # resume without --column: the saved mapping (and embedder) are used, no new request
    before = fake_server.stats()["requests"]
    resume = [a for a in args if a not in OWN_COLUMNS and a != "hash:64" and a != "--embedder"]
    rc, _, err = run_cli(resume, capsys)
    assert rc == 0, err[-3000:]
    assert fake_server.stats()["requests"] == before
    # another mapping is refused, naming both
    rc, _, err = run_cli([*resume, "--column", "id=doc_key", "--column", "text=page", "--column", "vector=embedding"], capsys)
    assert rc == 2 and "read with --column id=doc_key --column text=content --column vector=embedding" in err


def test_own_table_with_a_doc_id_column_and_seed_picker(tmp_path, capsys):
    "A mapped doc id column groups rows into documents; the seed picker works on the user's table as opened by open_index."
    from ragbench.index import open_index
    from ragbench.widgets import SeedPicker
    db = tmp_path / "own"; own_table(db)
    idx = open_index(db, "kb", embedder="hash:64", columns=["id=doc_key", "text=content", "vector=embedding", "doc_id=page"])
    assert idx.get("row-0").doc_id == json.loads(SAMPLE.read_text().splitlines()[0])["title"]
    picker = SeedPicker(idx, k=4, mode="hybrid")
    hits = picker.search("undo the last commit")
    assert hits and all(h.chunk_id.startswith("row-") for h in hits)
    picker.tick(hits[0].chunk_id); picker.save(tmp_path / "run")
    saved = [l for l in (tmp_path / "run" / "seeds.txt").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert saved == [hits[0].chunk_id]


def test_own_table_evaluate_with_column_mapping(tmp_path, capsys, fake_server):
    "DoRA items made from the user's table, then evaluate on the same table: --column for setups that map none."
    db, gen, ev = tmp_path / "own", tmp_path / "dora", tmp_path / "eval"
    own_table(db)
    spec = f"openai:{fake_server.url}/v1@fake-model"
    rc, _, err = run_cli(["dora", "--db", str(db), "--table", "kb", *OWN_COLUMNS, "--embedder", "hash:64", "--out", str(gen),
                          "--per-style", "1", "--styles", "find,explain", "--llm", spec, "--no-embed", "--no-progress"], capsys)
    assert rc == 0, err[-3000:]
    setups = tmp_path / "setups.yaml"
    setups.write_text(f'defaults: {{llm: "{spec}", table: kb, embedder: "hash:64"}}\nbaseline: {{name: dense5, top_k: 5}}\n'
                      'variants:\n  - {name: bm25-3, retrieval: bm25, top_k: 3}\n')
    args = ["evaluate", "--dataset", str(gen / "dataset.jsonl"), "--db", str(db), "--setups", str(setups), "--out", str(ev),
            "--judges", "none", "--no-bertscore", "--quiet"]
    rc, out, err = run_cli([*args, *OWN_COLUMNS], capsys)
    assert rc == 0, err[-3000:]
    rows = [json.loads(l) for l in (ev / "scores.jsonl").read_text().splitlines()]
    n = len((gen / "dataset.jsonl").read_text().splitlines())
    assert len(rows) == 2 * n and all(all(c.startswith("row-") for c in r["retrieved_chunk_ids"]) for r in rows)
    assert any(r["metrics"]["hit@k"] for r in rows)                        # the user's ids match the gold ids
    recorded = json.loads((ev / "manifest.json").read_text())["setups"]
    assert {s["columns"]["text"] for s in recorded.values()} == {"content"}
    rc, out, err = run_cli(args, capsys)                                   # resume without --column: the recorded mapping
    assert rc == 0 and f"{2 * n} rows (0 new)" in out, err[-2000:]
    rc, _, err = run_cli([*args, "--column", "id=doc_key", "--column", "text=page", "--column", "vector=embedding"], capsys)
    assert rc == 2 and "another definition" in err


def test_own_table_triad_from_the_seed_picker(tmp_path, capsys, fake_server):
    "Seeds picked on the user's table, then TRIAD on it with the same mapping; a resume without --column reuses it."
    from ragbench.index import open_index
    from ragbench.widgets import SeedPicker
    db, out = tmp_path / "own", tmp_path / "triad"
    own_table(db)
    picker = SeedPicker(open_index(db, "kb", embedder="hash:64", columns=["id=doc_key", "text=content", "vector=embedding"]), k=8)
    for q in ("undo the last commit", "merge two branches", "stash local changes", "fetch from a remote"):
        for h in picker.search(q)[:3]: picker.tick(h.chunk_id)
    picker.save(tmp_path / "pick")
    spec = f"openai:{fake_server.url}/v1@fake-model"
    args = ["triad", "--db", str(db), "--table", "kb", "--out", str(out), "--n", "2", "--llm", spec,
            "--seeds-file", str(tmp_path / "pick" / "seeds.txt"), "--concurrency", "4"]
    rc, stdout, err = run_cli([*args, *OWN_COLUMNS, "--embedder", "hash:64"], capsys)
    assert rc == 0, err[-3000:]
    items = [json.loads(l) for l in (out / "dataset.jsonl").read_text().splitlines()]
    questions = [i for i in items if i["answerable"]]
    assert len(questions) == 2 and all(g.startswith("row-") for i in questions for g in i["gold_chunk_ids"])
    assert {i["meta"]["seed_id"] for i in questions} <= set(picker.seed_ids)          # the picked seeds, and only them
    assert json.loads((out / "manifest.json").read_text())["index"]["columns"]["text"] == "content"
    before = fake_server.stats()["requests"]
    rc, _, err = run_cli(args, capsys)                                  # resume: no --column, no --embedder
    assert rc == 0 and fake_server.stats()["requests"] == before, err[-2000:]


def test_own_table_pipeline(tmp_path, fake_server):
    "`ragbench pipeline` on the user's table: triad -> evaluate -> report, the mapping given once as a shared parameter."
    import yaml
    db, out = tmp_path / "own", tmp_path / "run"
    own_table(db)
    spec = f"openai:{fake_server.url}/v1@fake-model"
    cfg = {"parameters": {"db": str(db), "table": "kb", "embedder": "hash:64", "llm": spec,
                          "columns": {"id": "doc_key", "text": "content", "vector": "embedding"}},
           "steps": [{"name": "triad", "parameters": {"n": 2, "max_seeds": 20}},
                     {"name": "evaluate", "parameters": {"bertscore": False}}, "report"]}
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    p = subprocess.run([sys.executable, "-m", "ragbench.cli", "pipeline", str(tmp_path / "own.yaml"), "--out", str(out),
                        "--no-progress"], capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    items = [json.loads(l) for l in (out / "dataset.jsonl").read_text().splitlines()]
    assert items and all(g.startswith("row-") for i in items for g in i["gold_chunk_ids"])
    rows = [json.loads(l) for l in (out / "eval" / "scores.jsonl").read_text().splitlines()]
    assert rows and all(c.startswith("row-") for r in rows for c in r["retrieved_chunk_ids"])
    assert json.loads((out / "manifest.json").read_text())["index"]["columns"]["vector"] == "embedding"
    assert (out / "report.html").exists()


def test_index_takes_its_options_from_a_config_file(folder, tmp_path, capsys):
    "issue 18: `ragbench index --config FILE` sets options by name (dashed or not); a flag given wins; bad names and values are named."
    conf = tmp_path / "index.yaml"
    conf.write_text("embedder: hash:32\nmode: paragraph\ntable: from_file\nwrite-rows: 2\n")
    rc, out, err = run_cli(["index", str(folder), "--db", str(tmp_path / "db"), "--config", str(conf), "--table", "given", "--quiet"], capsys)
    assert rc == 0, err
    idx = ChunkIndex.open(tmp_path / "db", "given")            # --table given beats the file's table
    assert idx.dim == 32 and len(idx) == 3                      # the file's embedder
    conf.write_text("target_tokns: 100\n")
    rc, out, err = run_cli(["index", str(folder), "--db", str(tmp_path / "db2"), "--config", str(conf)], capsys)
    assert rc == 2 and "index.yaml: unknown option 'target_tokns'; options: db, table" in err and not (tmp_path / "db2").exists()
    rc, out, err = run_cli(["index", str(folder), "--db", str(tmp_path / "db2"), "--embedder", "hash", "--overlap", "1.5"], capsys)
    assert rc == 2 and "--overlap: Input should be less than 1" in err


def test_search_takes_its_options_from_a_config_file(folder, tmp_path, capsys):
    "issue 18: `ragbench search --config FILE` reads k, mode and as_json from the file; a flag given wins."
    db = tmp_path / "db"
    assert run_cli(["index", str(folder), "--db", str(db), "--embedder", "hash", "--quiet"], capsys)[0] == 0
    conf = tmp_path / "search.yaml"
    conf.write_text("mode: bm25\nk: 3\nas_json: true\n")
    rc, out, err = run_cli(["search", "git", "--db", str(db), "--config", str(conf)], capsys)
    assert rc == 0, err
    assert len(json.loads(out)) == 3                            # the file's k, as JSON
    rc, out, err = run_cli(["search", "git", "--db", str(db), "--config", str(conf), "-k", "1"], capsys)
    assert rc == 0 and len(json.loads(out)) == 1, err           # -k 1 beats the file's k
    conf.write_text("kk: 3\n")
    rc, out, err = run_cli(["search", "git", "--db", str(db), "--config", str(conf)], capsys)
    assert rc == 2 and "search.yaml: unknown option 'kk'; options: db, table, k" in err


# ---- issue 41: a re-index that knows the whole corpus (--prune) ----

PAGES = {"stash": "git stash saves your local modifications away and reverts the working directory.",
         "tag": "git tag -a creates an annotated tag that marks a release.",
         "bisect": "git bisect finds the commit that introduced a bug by binary search.",
         "blame": "git blame shows what revision last modified each line of a file."}


def export(path, ids):
    "A JSONL export of the pages named `ids`."
    path.write_text("".join(json.dumps({"id": i, "title": i, "text": PAGES[i]}) + "\n" for i in ids))
    return str(path)


def doc_ids(capsys, db):
    "The documents `ragbench search` still finds (every chunk of the small table)."
    return {h["doc_id"] for h in search_json(capsys, db, "git", "-k", "10", "--mode", "dense")}


def test_prune_removes_what_the_new_export_lacks_after_yes(tmp_path, capsys):
    db = str(tmp_path / "db")
    for name, ids in (("week1.jsonl", ["stash", "tag"]), ("extra.jsonl", ["bisect"])):   # two files, one corpus
        rc, _, err = run_cli(["index", export(tmp_path / name, ids), "--db", db, "--embedder", "hash", "--quiet"], capsys)
        assert rc == 0, err
    new = export(tmp_path / "week2.jsonl", ["stash", "bisect", "blame"])             # 'tag' was deleted
    base = ["index", new, "--db", db, "--embedder", "hash", "--quiet"]
    rc, out, err = run_cli(base + ["--prune", "--dry-run"], capsys)
    assert rc == 0, err
    assert "1 stored document(s) not in" in out and "week1.jsonl: 1" in out and "    tag" in out
    assert "dry run: nothing removed" in out and "indexed" not in out
    assert doc_ids(capsys, db) == {"stash", "tag", "bisect"}
    rc, out, err = run_cli(base + ["--prune"], capsys)                              # no --yes: refused
    assert rc == 2 and "    tag" in out and "add --yes" in err and "nothing was changed" in err
    assert doc_ids(capsys, db) == {"stash", "tag", "bisect"}
    rc, out, err = run_cli(base, capsys)                                             # a plain re-index keeps it, and says so
    assert rc == 0, err
    assert re.search(r"stored documents not in \S*week2.jsonl: 1 \(\S*week1.jsonl: 1 kept\)", out), out
    assert doc_ids(capsys, db) == {"stash", "tag", "bisect", "blame"}
    before = ChunkIndex.open(db, embedder="hash").tbl.version
    rc, out, err = run_cli(base + ["--prune", "--yes"], capsys)
    assert rc == 0, err
    assert re.search(r"stored documents not in \S*week2.jsonl: 1 \(\S*week1.jsonl: 1 removed\)", out), out
    assert "documents 0 added, 0 changed, 1 removed" in out
    assert doc_ids(capsys, db) == {"stash", "bisect", "blame"}
    idx = ChunkIndex.open(db, embedder="hash")
    assert idx.tbl.version > before and idx.build_history()[-1]["documents"]["removed"] == 1
    from ragbench.core import QAItem
    from ragbench.gen.refresh import refresh_plan
    gold = ChunkIndex.open(db, embedder="hash").at_version(before).iter_chunks()
    item = QAItem(id="q1", method="triad", kind="single", question="How is a release marked?", answer="git tag -a",
                  gold_chunk_ids=[next(c.id for c in gold if c.doc_id == "tag")])
    plan = refresh_plan([item], idx, before)                                         # refresh sees the gold chunk gone
    assert plan["stale"]["q1"]["action"] == "drop" and "was removed" in str(plan["stale"]["q1"]["reasons"]), plan
    rc, out, err = run_cli(base + ["--prune"], capsys)                              # nothing left to prune: no --yes needed
    assert rc == 0 and "nothing to remove" in out and "stored documents not in" in out and ": 0" in out


def test_prune_is_refused_on_an_own_table_and_needs_prune_for_yes(tmp_path, capsys):
    db = tmp_path / "user_db"; _own_table(db)
    src = export(tmp_path / "new.jsonl", ["stash"])
    for extra in (["--prune", "--yes"], ["--prune", "--dry-run"]):
        rc, out, err = run_cli(["index", src, "--db", str(db), "--table", "kb", "--embedder", "hash:64", *extra], capsys)
        assert rc == 2 and "--prune is refused" in err and "not built by ragbench" in err, err
    assert len(ChunkIndex.open(db, table="kb", embedder=HashEmbedder(64),
                               columns={"id": "doc_chunk_id", "text": "content", "vector": "embedding"})) == 4
    rc, _, err = run_cli(["index", src, "--db", str(tmp_path / "db"), "--embedder", "hash", "--yes"], capsys)
    assert rc == 2 and "go with --prune" in err
    rc, _, err = run_cli(["index", src, "--db", str(tmp_path / "db"), "--embedder", "hash", "--prune", "--ray", "local"],
                         capsys)
    assert rc == 2 and "leave out --ray" in err and not (tmp_path / "db").exists()
