"""The curator's loop around the widgets (issue 25): the review queue opens a CLI run, or a run over the user's own
LanceDB table, from its run directory alone, with chunk texts; a relative or wrong run_dir says what it is; the tour keeps
its run across a kernel restart and opens on an undecided item. The browser version of the whole loop is
`test_curator_loop_in_a_real_browser` (real JupyterLab, headless Chromium)."""
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
    from ragbench.review import demo_chunks
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
    from ragbench.widgets import ReviewQueueView
    q = ReviewQueue(own_run)
    ctx = [ch for it in q.items for _, ch in q.contexts(it)]
    assert ctx and all(ch is not None and ch.id.startswith("row-") and ch.text for ch in ctx)
    assert "not found" not in ReviewQueueView(q).body.value


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


def test_tour_keeps_its_run_across_a_restart(tmp_path):
    "Fix: each Run All of the tour made a new temporary run (a restart lost the decisions) and opened on item 10 of 10."
    import papermill as pm
    env_tmp = tmp_path / "tmp"; env_tmp.mkdir()
    old = os.environ.get("TMPDIR"); os.environ["TMPDIR"] = str(env_tmp)    # the kernel inherits it
    try:
        for i in range(2):
            pm.execute_notebook(str(ROOT / "nbs" / "tutorials" / "tour.ipynb"), str(tmp_path / f"tour{i}.ipynb"),
                                progress_bar=False, kernel_name="python3", cwd=str(ROOT / "nbs" / "tutorials"))
            runs = [p for p in env_tmp.iterdir() if p.name.startswith("ragbench-tour-")]
            assert len(runs) == 1, runs
            if i == 0:
                from ragbench.review import ReviewQueue
                q = ReviewQueue(runs[0], reviewer="me"); first = len(q.reviews)
                q.reject(note="made by hand between the two runs")
    finally:
        if old is None: os.environ.pop("TMPDIR", None)
        else: os.environ["TMPDIR"] = old
    rows = [json.loads(l) for l in (runs[0] / "reviews.jsonl").read_text().splitlines()]
    assert len(rows) == first + 1 and rows[-1]["by"] == "me"          # the second run found and kept every decision


# --- the whole loop in a real JupyterLab (headless Chromium) -------------------------------------------------------
LOOP_CELLS = [
    "from ragbench.index import open_index\nfrom ragbench.llm import make_llm\n"
    "from ragbench.review import ReviewQueue, run_index_spec\n"
    "from ragbench.widgets import (SeedPicker, seed_picker_widget, BridgeInspector, bridge_widget, review_widget,\n"
    "                              run_triad_config)\n"
    "RUN = {run!r}\nspec = run_index_spec(RUN)                  # the run directory alone says where its index is\n"
    "index = open_index(spec['db'], spec['table'], embedder=spec['embedder'], columns=spec['columns'] or (), fts=False)\n"
    "llm = make_llm('fake')",
    "queue = ReviewQueue(RUN, reviewer='curator')\nreview_widget(queue, calibration=False)",
    "picker = SeedPicker(index, k=6, mode='dense', run_dir=RUN)\nseed_picker_widget(picker, llms=llm)",
    "seed = [r['seed'] for r in __import__('ragbench.widgets', fromlist=['x']).seed_records_of(RUN)][0]\n"
    "inspector = BridgeInspector(index, seed, k=4)\nbridge_widget(inspector, run_dir=RUN, llms=llm, cfg=run_triad_config(RUN))",
]


def queue_counts(page):
    "(decided, items) from the open queue's status line."
    t = page.inner_text(".rb-review-queue")
    m = re.search(r"(\d+)/(\d+) decided", t)
    return int(m[1]), int(m[2])


def curate_in_lab(browser, lab, run: Path, name: str, tmp_path):
    "Open the queue, tick seeds and generate, inspect a bridge with a typed topic, decide 10 items, restart, check."
    from lab import wait_for
    from test_browser import failing, jsonl, run_in_lab, write_notebook
    write_notebook(lab["root"] / f"{name}.ipynb", [c.replace("{run!r}", repr(str(run))) for c in LOOP_CELLS])
    page = run_in_lab(browser, lab, f"{name}.ipynb", name)
    try:
        page.wait_for_selector("button.rb-accept", timeout=120_000)
        page.wait_for_selector(".rb-bridge-generate", timeout=120_000)
        gold = page.inner_text(".rb-review-queue .rb-gold")
        assert gold.strip() and "not available" not in gold and "not found" not in gold, gold   # chunk texts shown
        _, n0 = queue_counts(page)
        # tick two seeds the run has not tried, generate from them: they are run, and their items join the open queue
        tried = {r["seed"] for r in jsonl(run / "seeds.jsonl")}
        page.fill(".rb-seed-query input", "merge a branch and resolve conflicts"); page.click("button.rb-seed-search")
        page.wait_for_function("() => document.querySelectorAll('.rb-seed-tick input[type=checkbox]').length >= 4")
        texts = page.locator(".rb-seed-tick").all_inner_texts()
        boxes, ticked = page.locator(".rb-seed-tick input[type=checkbox]"), 0
        for i in range(boxes.count()):
            if ticked == 2: break
            boxes.nth(i).check(); ticked += 1
        page.wait_for_function("() => document.querySelector('.rb-seeds').innerText.includes('Seeds (2)')")
        page.click("button.rb-seed-generate")
        page.wait_for_function("() => document.querySelector('.rb-seed-result').innerText.includes('new seed(s) run')",
                               timeout=180_000)
        new = {r["seed"] for r in jsonl(run / "seeds.jsonl")} - tried
        from ragbench.widgets import SeedPicker
        ticks = set(SeedPicker.load_ids(run))
        assert new == ticks - tried and new, (texts, page.inner_text(".rb-seed-result"))   # exactly the untried ticks ran
        from ragbench.review import load_items
        n1 = len(load_items(run))
        assert n1 > n0
        wait_for(lambda: queue_counts(page)[1] == n1, 30, "the new items in the open queue")
        # the bridge inspector: a typed topic, Generate into the run, the item in the open queue
        page.fill(".rb-bridge-topic input", "curated topic"); page.keyboard.press("Tab")
        page.click("button.rb-bridge-generate")
        page.wait_for_function("() => document.querySelector('.rb-bridge-result').innerText.includes('added to')",
                               timeout=120_000)
        wait_for(lambda: queue_counts(page)[1] > n1, 30, "the inspected item in the open queue")
        mine = [i for i in jsonl(run / "inspected.jsonl") if i["answerable"]]
        assert [i["bridge_topic"] for i in mine] == ["curated topic"], mine
        # decide 10 items with the keyboard, each saved at once
        before = len(jsonl(run / "reviews.jsonl"))
        for k in range(10):
            page.click(".rb-keys input"); page.keyboard.press("a" if k % 3 else "r")
            wait_for(lambda: len(jsonl(run / "reviews.jsonl")) >= before + k + 1, 30, f"decision {k + 1}")
        decided, items = wait_for(lambda: queue_counts(page)[0] >= 10 and queue_counts(page), 30, "10 decided")
        # restart the kernel and run everything again: every decision and item is still there
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
        page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
                               timeout=120_000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        wait_for(lambda: page.locator(".rb-review-queue").count() and queue_counts(page) == (decided, items), 120,
                 f"the queue after the restart with {decided}/{items} decided")
        page.locator(".rb-review-queue").screenshot(path=str(tmp_path / f"{name}_queue.png"))
    except Exception:
        failing(page, tmp_path, lab); raise
    finally:
        page.close()
    from ragbench.review import ReviewQueue
    q = ReviewQueue(run)
    assert len(q.items) == items and q.progress()["decided"] == decided >= 10
    assert mine[0]["id"] in q.by_id and new <= {it.meta.get("seed_id") for it in q.items}


@pytest.fixture(scope="module")
def loop_cli_run(tmp_path_factory):
    "`ragbench triad` on the packaged Git docs sample, its index outside the run (as `--db runs/db --out runs/triad`)."
    from ragbench.corpus import chunk_documents, load_documents, sample_corpus_path
    from ragbench.index import ChunkIndex
    tmp = tmp_path_factory.mktemp("loopcli")
    ChunkIndex.build(tmp / "db", chunk_documents(load_documents(sample_corpus_path())), embedder="hash:256", progress=False)
    cli("triad", "--db", "db", "--out", "runs/triad", "--llm", "fake", "--n", "4", "--seed", "1", cwd=tmp)
    return tmp / "runs" / "triad"


@pytest.fixture(scope="module")
def loop_own_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loopown")
    own_table(tmp / "own")
    cli("triad", "--db", tmp / "own", "--table", "kb", "--out", tmp / "run", "--llm", "fake", "--n", "4", "--seed", "1",
        "--embedder", "hash:64", *OWN_COLUMNS)
    return tmp / "run"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from lab import jupyterlab
    tmp = tmp_path_factory.mktemp("lab"); root = tmp / "root"; root.mkdir()
    with jupyterlab(tmp, root) as server: yield server


@pytest.fixture(scope="module")
def browser():
    from lab import ARGS, CHROMIUM, need_browser
    with need_browser()() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def test_curator_loop_in_a_real_browser(browser, lab, loop_cli_run, loop_own_run, tmp_path):
    "Issue 25's loop on a CLI run and on the user's own table (own column names), each from its run directory alone."
    curate_in_lab(browser, lab, loop_cli_run, "loop_cli", tmp_path)
    curate_in_lab(browser, lab, loop_own_run, "loop_own", tmp_path)
