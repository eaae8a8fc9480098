"""The curator's whole loop in a real JupyterLab under headless Chromium (issue 25), on a `ragbench triad` CLI run and on a
run over the user's own LanceDB table (its own column names): open the queue from the run directory alone, tick seeds and
generate from them, inspect a bridge with a typed topic and see its item in the open queue, decide 10 items, restart the
kernel, and find every decision and item still there. Then the tour itself, curated end to end (issue 39; the tour's one
run in CI): generate, 12 decisions across a second kernel and a restart, 62_review_queue on its run. Screenshots of the
queues go to the test's temporary folder."""
import re
from pathlib import Path

import pytest

from test_curator_loop import OWN_COLUMNS, cli, own_table
from lab import browser, lab   # noqa: F401 (the shared fixtures)


LOOP_CELLS = [
    "from ragbench.index import open_index\nfrom ragbench.llm import make_llm\n"
    "from ragbench.review import ReviewQueue, run_index_spec\n"
    "from ragbench.widgets import SeedPicker, seed_picker_widget, BridgeInspector, bridge_widget, review_widget\n"
    "from ragbench.widgets.seeds import run_triad_config, seed_records_of\n"
    "RUN = {run!r}\nspec = run_index_spec(RUN)                  # the run directory alone says where its index is\n"
    "index = open_index(spec['db'], spec['table'], embedder=spec['embedder'], columns=spec['columns'] or (), fts=False)\n"
    "llm = make_llm('fake')",
    "queue = ReviewQueue(RUN, reviewer='curator')\nreview_widget(queue, calibration=False)",
    "picker = SeedPicker(index, k=6, mode='dense', run_dir=RUN)\nseed_picker_widget(picker, llms=llm)",
    "seed = [r['seed'] for r in seed_records_of(RUN)][0]\n"
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


# ---- issue 39: the tour itself, used as a curator uses it (the tour's one run in CI: suites.CURATOR_LOOP_NOTEBOOKS) ----
TOUR = "nbs/tutorials/tour.ipynb"

# JavaScript: Run All in the open notebook at `path` (after restarting its kernel when asked) and wait for the end; every
# code cell's outcome, as in lab.RUN_NOTEBOOK_JS, but the kernel and the widgets stay up
RUN_ALL_OPEN_JS = """
async ([path, restart, timeoutMs]) => {
  const app = window.jupyterapp, t0 = performance.now();
  const panel = [...app.shell.widgets('main')].find(w => w.context && w.context.path === path);
  if (!panel) throw new Error('not open: ' + path);
  await panel.context.ready; await panel.sessionContext.ready;
  const kernel = () => panel.sessionContext.session && panel.sessionContext.session.kernel;
  while (!kernel()) { await new Promise(r => setTimeout(r, 100)); if (performance.now() - t0 > timeoutMs) throw new Error('no kernel'); }
  if (restart) await kernel().restart();
  while (kernel().status !== 'idle') { await new Promise(r => setTimeout(r, 100)); if (performance.now() - t0 > timeoutMs) throw new Error('kernel not idle'); }
  app.shell.activateById(panel.id);
  const deadline = new Promise(res => setTimeout(() => res('timeout'), timeoutMs));
  const report = {path, cells: []};
  report.timedOut = (await Promise.race([app.commands.execute('notebook:run-all-cells'), deadline])) === 'timeout';
  const cells = panel.content.model.cells;
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    const outs = c.outputs.toJSON();
    report.cells.push({index: i, source: c.sharedModel.getSource().slice(0, 200), count: c.executionCount,
      errors: outs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
      stdout: outs.filter(o => o.output_type === 'stream' && o.name === 'stdout').map(o => o.text).join('')});
  }
  report.seconds = (performance.now() - t0) / 1000;
  return report;
}
"""


def open_notebook(browser, lab, name: str, workspace: str):
    "Open notebook `name` in a fresh Lab tab and wait for its kernel; returns the page."
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.set_default_timeout(90_000)
    page.goto(f"{lab['url']}/lab/workspaces/{workspace}/tree/{name}?token={lab['token']}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    return page


def run_all_open(page, name: str, restart: bool = False, timeout_s: float = 300) -> dict:
    "Run All in the open notebook `name` (after a kernel restart); its report, failing on any error or cell not run."
    from lab import problems
    r = page.evaluate(RUN_ALL_OPEN_JS, [name, restart, int(timeout_s * 1000)])
    assert not problems(r), f"{name}{' after a restart' if restart else ''}: " + "; ".join(problems(r))
    return r


def prepared(lab, src: str, name: str, **parameters) -> str:
    "Notebook `src` of the checkout, copied into the Lab's folder as `name` with `parameters` injected as papermill does."
    import json, papermill as pm
    from test_browser import KERNELSPEC
    from lab import ROOT
    nb = lab["root"] / name
    pm.execute_notebook(str(ROOT / src), str(nb), parameters=parameters, prepare_only=True, kernel_name="python3",
                        language="python", progress_bar=False)
    meta = json.loads(nb.read_text()); meta["metadata"]["kernelspec"] = KERNELSPEC; nb.write_text(json.dumps(meta))
    return name


def press_key(page, run: Path, key: str):
    "A decision with the keyboard in the open queue (its shortcut box): its reviews.jsonl row, once the queue shows it."
    from lab import wait_for
    from test_browser import jsonl
    before, decided = len(jsonl(run / "reviews.jsonl")), queue_counts(page)[0]
    page.click(".rb-review-queue .rb-keys input"); page.keyboard.press(key)
    row = wait_for(lambda: len(jsonl(run / "reviews.jsonl")) > before and jsonl(run / "reviews.jsonl")[-1], 30,
                   f"the '{key}' decision in reviews.jsonl")
    wait_for(lambda: queue_counts(page)[0] > decided, 30, f"the '{key}' decision in the queue")   # its writes done
    return row


def reviewed_ids(run: Path) -> tuple[dict, dict]:
    "({id: item} of dataset.reviewed.jsonl, {id: item} of rejected.reviewed.jsonl), as the files are now."
    from ragbench.core import Dataset
    return tuple({i.id: i for i in Dataset.read(run / n)} if (run / n).exists() else {}
                 for n in ("dataset.reviewed.jsonl", "rejected.reviewed.jsonl"))


def check_reviewed(run: Path, G: set, decisions: dict, when: str):
    "Every generated item is in the reviewed datasets and every decision is applied there (its review trail included)."
    from ragbench.core import Dataset
    kept, dropped = reviewed_ids(run)
    missing = G - set(kept) - set(dropped)
    assert not missing, f"{when}: {len(missing)} of the {len(G)} generated items missing from the reviewed datasets"
    for iid, (decision, by) in decisions.items():
        it = kept.get(iid) if decision != "reject" else dropped.get(iid)
        assert it is not None and (iid in kept) == (decision != "reject"), f"{when}: decision {decision} on {iid} not applied"
        assert (it.review[-1].decision, it.review[-1].by) == (decision, by), (when, iid, it.review)
    undecided_ok = {i.id for n in ("dataset.jsonl", "seeded.jsonl") if (run / n).exists() for i in Dataset.read(run / n)}
    assert (G & undecided_ok) - set(decisions) <= set(kept), f"{when}: undecided generated items left out of the reviewed dataset"


@pytest.mark.timeout(900)
def test_tour_curated_end_to_end(browser, lab, tmp_path):
    """Issue 39's 'Done when', in the tour itself on a fresh run folder: Run All; tick seeds and Generate (G items); decide
    10 items with the keyboard, some generated; meanwhile decide one from a second kernel (a ReviewQueue in this process);
    Restart and Run All (evaluate, plots and report run again, on the new reviewed dataset); decide one more; open
    62_review_queue on the run. Every G item and all 12 decisions are in the queue, in dataset.reviewed.jsonl (checked
    as the tour's own kernel wrote it, before anything else regenerates it) and in 62_review_queue's output."""
    import time
    from lab import wait_for
    from test_browser import failing, jsonl
    from ragbench.core import Dataset
    from ragbench.review import ReviewQueue, load_items
    t0, run = time.time(), tmp_path / "tour-run"
    name = prepared(lab, TOUR, "tour.ipynb", out_dir=str(run))
    page = open_notebook(browser, lab, name, "tour")
    timings = {}
    try:
        # 1. Run All on a fresh folder
        first = run_all_open(page, name)
        timings["run all"] = first["seconds"]
        code_rows = jsonl(run / "reviews.jsonl")                     # the tour's own decisions in code (a fresh run)
        assert code_rows and all(r["by"] == "tour" for r in code_rows)
        items0 = {i.id for i in load_items(run)}
        # 2. tick two more seeds in the seed picker with the Generate button, and generate
        picker = page.locator(".rb-seed-picker", has=page.locator("button.rb-seed-generate"))
        from ragbench.widgets import SeedPicker
        tried, ticks0 = {r["seed"] for r in jsonl(run / "seeds.jsonl")}, set(SeedPicker.load_ids(run))
        picker.locator(".rb-seed-query input").fill("show the history of a file and its log"); picker.locator("button.rb-seed-search").click()
        page.wait_for_function("() => [...document.querySelectorAll('.rb-seed-picker')].some(p => p.querySelector('.rb-seed-generate') "
                               "&& p.querySelectorAll('.rb-seed-tick input[type=checkbox]').length >= 4)")
        boxes, ticked = picker.locator(".rb-seed-tick input[type=checkbox]"), 0
        for i in range(boxes.count()):
            if ticked < 2 and not boxes.nth(i).is_checked(): boxes.nth(i).check(); ticked += 1
        assert ticked == 2
        mine = wait_for(lambda: len(set(SeedPicker.load_ids(run)) - ticks0) == 2 and set(SeedPicker.load_ids(run)) - ticks0,
                        30, "the two ticks in RUN/seeds.txt")
        t = time.time()
        picker.locator("button.rb-seed-generate").click()
        page.wait_for_function("() => /new seed\\(s\\) run|Error/.test(document.querySelector('.rb-seed-result').innerText)",
                               timeout=300_000)
        timings["generate"] = time.time() - t
        said = page.inner_text(".rb-seed-result")
        assert "new seed(s) run" in said, said
        new = {r["seed"] for r in jsonl(run / "seeds.jsonl")} - tried
        assert mine <= new, (said, mine - new)                       # the seeds ticked in the widget were run
        G = {i.id for n in ("dataset.jsonl", "overflow.jsonl") for i in Dataset.read(run / n) if i.meta.get("seed_id") in new}
        G |= {i.id for i in load_items(run)} - items0                 # and whatever else joined the run's items
        assert len(G) >= 6, (len(G), said)
        n_items = len(load_items(run))
        wait_for(lambda: queue_counts(page)[1] == n_items, 30, f"the {n_items} items in the open queue")
        # 3. decide 10 with the keyboard; 4. after the 7th, one from a second kernel while the widget stays open
        decisions = {}                                                # item id -> (decision, by): the 12 decisions
        for k in range(10):
            if k == 7:
                other = ReviewQueue(run, reviewer="second-kernel")   # another kernel (or the CLI) on the same run
                current = page.inner_text(".rb-review-queue .rb-q")
                pick = [i for i in reversed(other.items) if other.decision(i.id) is None and i.question not in current
                        and i.id in G][0]
                other.accept(item=pick.id, note="from a second kernel")
                decisions[pick.id] = ("accept", "second-kernel")
            row = press_key(page, run, "a" if k % 3 else "r")
            decisions[row["item_id"]] = (row["decision"], row["by"])
        assert len(decisions) == 11 and len(set(decisions) & G) >= 3, (len(decisions), len(set(decisions) & G))
        assert len(set(decisions) & G - {pick.id}) >= 2                 # the keyboard decided generated items too
        check_reviewed(run, G, decisions, "after the 11th decision (in the open tour)")
        # 5. Restart the kernel and Run All: the tour goes through to its report again, on the new reviewed dataset
        second = run_all_open(page, name, restart=True)
        timings["restart + run all"] = second["seconds"]
        for what in ("from ragbench.eval import Setup", "from ragbench.report import load_eval", "html_path = build_report("):
            cell = [c for c in second["cells"] if c["source"].startswith(what)]     # evaluate, plots, report
            assert len(cell) == 1 and cell[0]["count"] and not cell[0]["errors"], (what, cell)
        # 6. one more decision in the re-opened queue
        n_all = len(load_items(run))
        wait_for(lambda: page.locator(".rb-review-queue").count() and queue_counts(page)[1] == n_all, 60, "the queue after the restart")
        row = press_key(page, run, "a")
        assert row["item_id"] not in decisions, "the re-opened queue offered an item already decided"
        decisions[row["item_id"]] = (row["decision"], row["by"])
        check_reviewed(run, G, decisions, "after the 12th decision (the tour after a restart)")
        rows = jsonl(run / "reviews.jsonl")
        assert rows[:len(code_rows)] == code_rows and len(rows) == len(code_rows) + 12   # append-only: nothing rewritten
        page.locator(".rb-review-queue").screenshot(path=str(tmp_path / "tour_queue.png"))
    except Exception:
        failing(page, tmp_path, lab); raise
    finally:
        page.close()
    # 7. 62_review_queue on the same run
    q62 = prepared(lab, "nbs/62_review_queue.ipynb", "review_tour.ipynb", run_dir=str(run), reviewer="queue-62")
    page = open_notebook(browser, lab, q62, "review62")
    try:
        report = run_all_open(page, q62, timeout_s=180)
        timings["62_review_queue"] = report["seconds"]
        page.wait_for_selector(".rb-review-queue .rb-item-table select option", timeout=60_000)
        status, options = page.inner_text(".rb-review-queue"), page.locator(".rb-item-table select option").all_inner_texts()
    except Exception:
        failing(page, tmp_path, lab); raise
    finally:
        page.close()
    # 8. every G item and all 12 decisions: in a queue opened afresh, in dataset.reviewed.jsonl, in 62_review_queue
    q = ReviewQueue(run, sync=False)
    assert G <= set(q.by_id), f"{len(G - set(q.by_id))} generated items missing from the queue"
    assert {i: (q.decision(i), q.latest[i]["by"]) for i in decisions} == decisions
    check_reviewed(run, G, decisions, "after 62_review_queue")
    decided = q.progress()["decided"]
    out = "".join(c["stdout"] for c in report["cells"])
    assert f"{len(q.items)} items; {decided} already decided" in out, out
    assert f"{decided}/{len(q.items)} decided" in status, status
    lines = [o.replace("\u00a0", " ") for o in options]
    assert len(lines) == len(q.items)
    col = sum(w + 1 for _, w in __import__("ragbench.widgets.render", fromlist=["x"]).TABLE_COLUMNS[:4])
    for n, iid in enumerate(q.order):
        want = decisions.get(iid, (q.decision(iid) or "", None))[0]
        assert lines[n][col:col + 9].strip() == want, (iid, lines[n])
    print(f"tour curated end to end in {time.time() - t0:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
          + f"); {len(G)} generated items, 12 decisions; screenshot {tmp_path / 'tour_queue.png'}")
