"""The curator's whole loop in a real JupyterLab under headless Chromium (issue 25), on a `ragbench triad` CLI run and on a
run over the user's own LanceDB table (its own column names): open the queue from the run directory alone, tick seeds and
generate from them, inspect a bridge with a typed topic and see its item in the open queue, decide 10 items, restart the
kernel, and find every decision and item still there. Screenshots of the queues go to the test's temporary folder."""
import re
from pathlib import Path

import pytest

from test_curator_loop import OWN_COLUMNS, cli, own_table
from lab import browser, lab   # noqa: F401 (the shared fixtures)


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
    # every new seed's item is in the queue, unless it repeats a question already written (issue 25: duplicates.jsonl)
    repeated = {r["seed"] for r in jsonl(run / "seeds.jsonl") if r["outcome"] == "duplicate"}
    assert mine[0]["id"] in q.by_id and new - repeated <= {it.meta.get("seed_id") for it in q.items}
    assert repeated <= {i["meta"]["seed_id"] for i in jsonl(run / "duplicates.jsonl")} if repeated else True


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


def test_curator_loop_in_a_real_browser(browser, lab, loop_cli_run, loop_own_run, tmp_path):
    "Issue 25's loop on a CLI run and on the user's own table (own column names), each from its run directory alone."
    curate_in_lab(browser, lab, loop_cli_run, "loop_cli", tmp_path)
    curate_in_lab(browser, lab, loop_own_run, "loop_own", tmp_path)
