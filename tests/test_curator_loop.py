"""The curator's loop around the widgets (issue 25): the review queue opens a CLI run, or a run over the user's own
LanceDB table, from its run directory alone, with chunk texts; a relative or wrong run_dir says what it is (the tour
keeps its run across a kernel restart and opens on an undecided item: its own test cell). The whole loop in a browser is
in tests/test_curator_loop_browser.py (real JupyterLab, headless Chromium)."""
import json, os, re, subprocess, sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
OWN_COLUMNS = ["--column", "id=doc_key", "--column", "text=content", "--column", "vector=embedding"]


def cli(*args, cwd=None):
    "Run the ragbench CLI in a child process; fail with its stderr."
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT)] + sys.path)}
    p = subprocess.run([sys.executable, "-m", "ragbench.cli", *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=300, cwd=cwd)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def own_table(db, n=40, dim=64):
    "A LanceDB table made by plain lancedb code with its own column names (doc_key, content, page, embedding)."
    import lancedb, pyarrow as pa
    from ragbench.embed import HashEmbedder
    paras = []
    for line in (ROOT / "ragbench" / "data" / "gitdocs_sample.jsonl").read_text().splitlines():
        doc = json.loads(line)
        paras += [(doc["title"], p.strip()) for p in doc["text"].split("\n\n") if 200 < len(p.strip()) < 1500]
    texts = [f"{t}: {p}" for t, p in paras[:n]]
    vecs = HashEmbedder(dim).encode(texts)
    lancedb.connect(str(db)).create_table("kb", data=pa.table({
        "doc_key": [f"row-{i}" for i in range(len(texts))], "content": texts, "page": [t for t, _ in paras[:n]],
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), dim)}))
    return texts


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    "A `ragbench triad` run whose index lives outside the run directory (as `--db runs/db --out runs/triad` makes it)."
    from ragbench.index import ChunkIndex
    from ragbench.testing.demo import demo_chunks
    tmp = tmp_path_factory.mktemp("cli")
    ChunkIndex.build(tmp / "db", demo_chunks(), embedder="hash:256", progress=False)
    cli("triad", "--db", "db", "--out", "runs/triad", "--llm", "fake", "--n", "2", "--seed", "1", cwd=tmp)
    return tmp / "runs" / "triad"


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    "A `ragbench triad` run over the user's own table, read through --column options."
    tmp = tmp_path_factory.mktemp("own")
    own_table(tmp / "own")
    cli("triad", "--db", tmp / "own", "--table", "kb", "--out", tmp / "run", "--llm", "fake", "--n", "2", "--seed", "1",
        "--embedder", "hash:64", *OWN_COLUMNS)
    return tmp / "run"


def test_queue_of_a_cli_run_shows_chunk_texts(cli_run):
    "Fix: the manifest did not record --db, so the queue of a normal CLI run showed no chunk text."
    from ragbench.review import ReviewQueue
    m = json.loads((cli_run / "manifest.json").read_text())
    assert Path(m["index"]["db"]) == (cli_run.parents[1] / "db").resolve() and m["index"]["table"] == "chunks"
    q = ReviewQueue(cli_run)
    assert q.items and all(ch is not None and ch.text for it in q.items for _, ch in q.contexts(it))


def test_queue_of_a_run_over_your_own_table(own_run):
    "Fix: on the user's own table (own column names) the queue raised IndexSchemaError; the manifest's mapping is used."
    from ragbench.review import ReviewQueue
    from ragbench.widgets.queue import _ReviewQueueView
    q = ReviewQueue(own_run)
    ctx = [ch for it in q.items for _, ch in q.contexts(it)]
    assert ctx and all(ch is not None and ch.id.startswith("row-") and ch.text for ch in ctx)
    assert "not found" not in _ReviewQueueView(q).body.value


def test_review_notebook_takes_a_columns_mapping(own_run, tmp_path):
    "62_review_queue with db/table/columns given (the run's manifest aside): chunk texts, no IndexSchemaError."
    import papermill as pm
    m = json.loads((own_run / "manifest.json").read_text()); idx = m["index"]
    (own_run / "manifest.json").rename(tmp_path / "manifest.json")          # the parameters alone must do
    try:
        pm.execute_notebook(str(ROOT / "nbs" / "62_review_queue.ipynb"), str(tmp_path / "out.ipynb"), progress_bar=False,
                            parameters={"run_dir": str(own_run), "db": idx["db"], "table": "kb", "embedder": "hash:64",
                                        "columns": {"id": "doc_key", "text": "content", "vector": "embedding"}},
                            kernel_name="python3", cwd=str(ROOT / "nbs"))
    finally:
        (tmp_path / "manifest.json").rename(own_run / "manifest.json")
    outs = [o for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"] for o in c.get("outputs", [])]
    text = "".join("".join(o.get("text", "")) for o in outs if o["output_type"] == "stream")
    assert not [o for o in outs if o["output_type"] == "error"]
    found = re.search(r"contexts: (\d+) of (\d+)", text)
    assert found and found[1] == found[2] != "0", text


def test_relative_run_dir_and_empty_queue(cli_run, tmp_path, monkeypatch):
    "Fix: `runs/triad` was resolved from nbs/, the queue said 'check the filters' and wrote empty files into nbs/runs/."
    from ragbench.review import ReviewQueue
    repo = cli_run.parents[1]; (repo / "nbs").mkdir(exist_ok=True)
    monkeypatch.chdir(repo / "nbs")                                    # where a notebook's kernel starts
    q = ReviewQueue("runs/triad")
    assert q.run.path == cli_run.resolve() and q.items
    with pytest.raises(FileNotFoundError, match="no run directory 'runs/nope'"): ReviewQueue("runs/nope")
    assert not (repo / "nbs" / "runs").exists()
    empty = tmp_path / "empty"; empty.mkdir()
    q = ReviewQueue(empty)
    assert "has no items" in q.empty_reason and q.current is None
    with pytest.raises(IndexError, match="has no items"): q.accept()
    assert list(empty.iterdir()) == []                                # no empty reviewed files written


def test_no_decision_is_lost_across_kernels_and_cli(tmp_path):
    """Issue 39 (N2): items generated from ticked seeds landed where a later run rewrote them away (overflow.jsonl), and a
    queue's decision rewrote dataset.reviewed.jsonl from its own subset. Now: generate from ticked seeds, decide with one
    queue, let the CLI resume the run (its first target again), decide with a second queue (another kernel) and the stale
    first one; a re-opened queue and dataset.reviewed.jsonl hold every generated item and every decision, and a later
    decision supersedes an earlier one with both kept in reviews.jsonl (the undo)."""
    from ragbench.core import Dataset
    from ragbench.corpus import chunk_documents, load_documents, sample_corpus_path
    from ragbench.index import ChunkIndex
    from ragbench.llm import make_llm
    from ragbench.review import ReviewQueue, write_reviewed
    from ragbench.widgets import SeedPicker, generate_from_seeds
    from ragbench.widgets.seeds import seed_records_of, _seeds_result_html
    index = ChunkIndex.build(tmp_path / "db", chunk_documents(load_documents(sample_corpus_path())), embedder="hash:256",
                             progress=False)
    triad = ("triad", "--db", "db", "--out", "runs/triad", "--llm", "fake", "--n", "4", "--seed", "1")
    cli(*triad, cwd=tmp_path)
    run = tmp_path / "runs" / "triad"
    first = [i.id for i in Dataset.read(run / "dataset.jsonl")]
    tried = {r["seed"] for r in seed_records_of(run)}
    picker = SeedPicker(index, k=12, mode="dense", run_dir=run)
    for h in picker.search("merge a branch and resolve conflicts"):
        if h.chunk_id not in tried and len(picker.seed_ids) < 6: picker.tick(h.chunk_id)
    res = generate_from_seeds(picker, make_llm("fake"))
    new = set(res.summary["new_seeds"])
    made = [i for n in ("dataset.jsonl", "overflow.jsonl") for i in Dataset.read(run / n) if i.meta.get("seed_id") in new]
    G = [i.id for i in made]
    assert len(G) >= 4, G
    said = re.search(r"items? in <code>([^<]+)</code>", _seeds_result_html(res))[1]   # where the widget says they are
    assert set(G) <= {i.id for i in Dataset.read(Path(said))}, said

    q1 = ReviewQueue(run, reviewer="ana")                                            # the first kernel
    assert set(G) <= set(q1.by_id)
    q1.accept(item=G[0], note="good"); q1.reject(item=G[1], note="vague"); q1.accept(item=first[0])
    cli(*triad, cwd=tmp_path)                                  # the CLI resumes the run: its views rewritten for --n 4
    q2 = ReviewQueue(run, reviewer="bo")                                             # a second kernel, or a restart
    assert set(G) <= set(q2.by_id), "items generated from ticked seeds dropped from the queue"
    q2.accept(item=G[2]); q2.reject(item=G[0], note="second look")                  # a later decision supersedes
    q1.reject(item=first[1])                                                         # the first kernel, still open
    def reviewed():
        kept = {i.id: i for i in Dataset.read(run / "dataset.reviewed.jsonl")}
        return kept, {i.id: i for i in Dataset.read(run / "rejected.reviewed.jsonl")}
    kept, dropped = reviewed()                                  # its decision rewrote the reviewed dataset: bo's stay
    assert G[2] in kept and G[0] in dropped and first[1] in dropped, "a stale queue wrote decisions away"
    write_reviewed(run)                                         # what `ragbench run review_queue` does headless

    q3 = ReviewQueue(run)                                                            # re-open
    assert set(G) | set(first) <= set(q3.by_id)
    want = {G[0]: "reject", G[1]: "reject", G[2]: "accept", first[0]: "accept", first[1]: "reject"}
    assert {i: q3.decision(i) for i in want} == want
    rows = [json.loads(l) for l in (run / "reviews.jsonl").read_text().splitlines()]
    assert [(r["decision"], r["by"]) for r in rows if r["item_id"] == G[0]] == [("accept", "ana"), ("reject", "bo")]
    kept, dropped = reviewed()
    assert set(G) - {G[0], G[1]} <= set(kept) and {G[0], G[1], first[1]} <= set(dropped) and first[0] in kept
    assert [r.by for r in dropped[G[0]].review] == ["ana", "bo"]                     # the whole trail, the latest wins
