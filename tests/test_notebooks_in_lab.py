"""Run All in a real JupyterLab on every notebook that shows widgets (`suites.lab_notebooks`: the others run once, under
nbdev_test, in the notebooks suite; the tour runs in the curator's loop, tests/test_curator_loop_browser.py), opened in one JupyterLab server, two at a time (two browser tabs), each with a time limit. A notebook passes when
no cell shows an error and every code cell ran. This is what a user gets with Run All, where `is_headless()` is false and
the `#| eval: false` / slow cells that `nbdev_test` skips run too.

Set RAGBENCH_LAB_NOTEBOOKS to a glob (e.g. "nbs/6*.ipynb") to run some of them; RAGBENCH_LAB_WORKERS for the tabs."""
import asyncio, os, time
from pathlib import Path

import pytest

from lab import ROOT, ARGS, CHROMIUM, RUN_NOTEBOOK_JS, jupyterlab, need_browser, problems
from suites import CURATOR_LOOP_NOTEBOOKS, SHOWS_WIDGETS, all_notebooks, lab_notebooks, nbdev_skip_re

PER_NOTEBOOK_S = float(os.environ.get("RAGBENCH_LAB_TIMEOUT", 240))
WORKERS = int(os.environ.get("RAGBENCH_LAB_WORKERS", 2))


def notebooks() -> list[Path]:
    "The notebooks to Run All here: those that show widgets, or those matching RAGBENCH_LAB_NOTEBOOKS."
    globs = os.environ.get("RAGBENCH_LAB_NOTEBOOKS", "").split()
    if not globs: return lab_notebooks()
    found = sorted({p for g in globs for p in ROOT.glob(g)})
    return [p.relative_to(ROOT) for p in found if not p.name.startswith((".", "_")) and ".ipynb_checkpoints" not in p.parts]


def test_each_notebook_runs_once():
    """The widget notebooks run here, the tour in the curator's loop (tests/test_curator_loop_browser.py), every other
    notebook under nbdev_test: none in two places and none in none."""
    import re
    import test_curator_loop_browser as loop
    lab, skip = {str(p) for p in lab_notebooks()}, re.compile(nbdev_skip_re())
    curated = {str(p) for p in CURATOR_LOOP_NOTEBOOKS}
    assert {"nbs/61_widgets.ipynb", "nbs/63_label_view.ipynb"} <= lab and not lab & curated
    assert curated == {loop.TOUR} and callable(loop.test_tour_curated_end_to_end)     # the tour runs All there, twice
    assert all(SHOWS_WIDGETS.search((ROOT / p).read_text()) for p in curated)        # else it would belong to nbdev_test
    for p in all_notebooks():
        assert (str(p) in lab | curated) == bool(skip.match(p.name)), p   # nbdev_test skips exactly the lab and loop ones
    assert len([p for p in all_notebooks() if str(p) not in lab | curated]) > 40


async def run_all(lab, paths: list[Path], workers: int) -> list[dict]:
    "Run every notebook, `workers` at a time (one Lab tab each), and return their reports in order of `paths`."
    from playwright.async_api import async_playwright
    todo, reports = list(enumerate(paths)), {}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        async def worker(n):
            page = await browser.new_page(viewport={"width": 1300, "height": 1000})
            await page.goto(f"{lab['url']}/lab/workspaces/runall{n}?token={lab['token']}")
            await page.wait_for_function("() => window.jupyterapp && window.jupyterapp.serviceManager "
                                         "&& window.jupyterapp.serviceManager.isReady", timeout=120_000)
            await page.evaluate("() => window.jupyterapp.started")
            while todo:
                i, path = todo.pop(0)
                t0 = time.time()
                try:
                    r = await asyncio.wait_for(page.evaluate(RUN_NOTEBOOK_JS, [path.as_posix(), int(PER_NOTEBOOK_S * 1000)]),
                                               PER_NOTEBOOK_S + 60)
                except Exception as e:   # the page itself failed: report it and carry on in a fresh tab
                    r = {"path": path.as_posix(), "cells": [{"index": -1, "source": "", "count": 0, "stderr": "",
                                                              "errors": [f"{type(e).__name__}: {e}"[:500]]}],
                         "timedOut": False, "seconds": time.time() - t0}
                    await page.close()
                    page = await browser.new_page(viewport={"width": 1300, "height": 1000})
                    await page.goto(f"{lab['url']}/lab/workspaces/runall{n}?token={lab['token']}")
                    await page.wait_for_function("() => window.jupyterapp && window.jupyterapp.serviceManager "
                                                 "&& window.jupyterapp.serviceManager.isReady", timeout=120_000)
                print(f"{r['seconds']:6.1f} s  {path}  {'; '.join(problems(r)) or 'ok'}", flush=True)
                reports[i] = r
            await page.close()
        try: await asyncio.gather(*(worker(n) for n in range(workers)))
        finally: await browser.close()
    return [reports[i] for i in range(len(paths))]


@pytest.mark.timeout(1800)
def test_every_notebook_runs_all_in_jupyterlab(tmp_path):
    need_browser()
    paths = notebooks()
    assert paths, "no notebooks found"
    t0 = time.time()
    with jupyterlab(tmp_path, ROOT) as lab:
        reports = asyncio.run(run_all(lab, paths, WORKERS))
        log = lab["log"].read_text()
    failed = {r["path"]: problems(r) for r in reports if problems(r)}
    slowest = sorted(reports, key=lambda r: -r["seconds"])[:5]
    print(f"{len(paths)} notebooks in {time.time() - t0:.0f} s; slowest: " +
          ", ".join(f"{r['path']} {r['seconds']:.0f} s" for r in slowest))
    assert not failed, "Run All failed in JupyterLab:\n" + "\n".join(f"{p}: {'; '.join(v)}" for p, v in failed.items())
    # the kernels' own warnings land in the server log: no plain-TCP warning (kernels get CurveZMQ keys)
    assert "without encryption" not in log, log[log.index("without encryption") - 300:][:600]


def test_suite_budgets_add_up_to_at_most_40_minutes():
    "Issue 38: the suites' budgets fit inside CI's 45-minute cap with room for README command 1."
    from suites import SUITES
    assert sum(budget for _, budget in SUITES.values()) <= 40 * 60
