"""The two labelling views of issue 20 in a real JupyterLab under headless Chromium: the evaluation-row labeller
(correct / faithful, for the prediction-powered scores) and the validity view (four verdicts per sampled accepted item).
Keys typed into the shortcut field and button clicks must land in labels.jsonl / validity.jsonl as they are made (a new
session resuming where the labeller stopped is tested headless in nbs/43_eval.validity and nbs/42_eval.ppi)."""
import json
from pathlib import Path

import pytest

from lab import browser, lab, wait_for   # noqa: F401 (browser, lab: the shared fixtures)
from test_browser import failing, jsonl, run_in_lab, write_notebook


def eval_dir(d: Path) -> Path:
    "An evaluation folder: 2 setups x 5 HotpotQA-like rows."
    from ragbench.core import RunDir
    RunDir(d).append("scores.jsonl", *[{"item_id": f"q{i}", "setup": s, "mode": "retrieved", "kind": "comparison",
        "question": f"Which came first, film {i} or book {i}?", "reference": f"film {i}", "answer": f"film {i}",
        "context_chunk_ids": [], "metrics": {"correct": 1.0}} for s in ("dense", "hybrid") for i in range(5)])
    return d


def run_dir(d: Path) -> Path:
    "A run directory with 6 accepted items."
    from ragbench.core import Attempt, Dataset, QAItem
    Dataset([QAItem(id=f"it{i}", method="triad", kind="comparison", question=f"Which is older, A{i} or B{i}?", answer=f"A{i}",
                    status="accepted", attempts=[Attempt(question="q", answer="a", accepted=True)]) for i in range(6)]
            ).write(d / "dataset.jsonl")
    return d


def press(page, keys: str):
    "Type shortcut keys into the (only) shortcut field, one at a time."
    page.click(".rb-keys input")
    for k in keys: page.keyboard.press(k)


def test_label_and_validity_views_in_a_real_browser(browser, lab, tmp_path):
    ev, run = eval_dir(tmp_path / "ev"), run_dir(tmp_path / "run")
    write_notebook(lab["root"] / "labels.ipynb", [
        f"from ragbench.eval.ppi import LabelQueue\nfrom ragbench.label_view import label_widget\n"
        f"label_widget(LabelQueue({str(ev)!r}, 'browser', n=4), headless=False)"])
    write_notebook(lab["root"] / "validity.ipynb", [
        f"from ragbench.label_view import validity_widget\nvalidity_widget({str(run)!r}, 'browser', n=4, headless=False)"])
    page = run_in_lab(browser, lab, "labels.ipynb", "labels")
    try:
        page.wait_for_selector(".rb-label-row .rb-q", timeout=120_000)
        press(page, "cf")                                   # correct, faithful on row 1
        wait_for(lambda: len(jsonl(ev / "labels.jsonl")) >= 2, 60, "two labels in labels.jsonl")
        page.click("button.rb-label-x")                     # "incorrect" on the row the view moved to
        rows = wait_for(lambda: len(jsonl(ev / "labels.jsonl")) >= 3 and jsonl(ev / "labels.jsonl"), 60, "the button label")
        assert [r.get("correct", r.get("faithful")) for r in rows] == [True, True, False], rows
        assert all(r["by"] == "browser" for r in rows)
        page.wait_for_function("() => document.querySelector('.rb-label-row').innerText.includes('labelled')")
    except Exception:
        failing(page, tmp_path, lab); raise
    finally:
        page.close()
    page = run_in_lab(browser, lab, "validity.ipynb", "validity")
    try:
        page.wait_for_selector(".rb-validity-row .rb-q", timeout=120_000)
        first = page.inner_text(".rb-validity-row .rb-q")
        press(page, "12342s")                               # every criterion valid, then correct -> invalid; save
        rows = wait_for(lambda: jsonl(run / "validity.jsonl"), 60, "the first verdicts in validity.jsonl")
        assert {k: rows[0][k] for k in ("answerable", "correct", "multi_hop", "unambiguous")} == \
            {"answerable": True, "correct": False, "multi_hop": True, "unambiguous": True}, rows
        page.wait_for_function("q => document.querySelector('.rb-validity-row .rb-q').innerText !== q", arg=first)
        page.click("button.rb-validity-v")                  # all valid, saved
        wait_for(lambda: len(jsonl(run / "validity.jsonl")) >= 2, 60, "the all-valid click")
        page.wait_for_function("() => document.querySelector('.rb-validity-row').innerText.includes('2 validated')")
    except Exception:
        failing(page, tmp_path, lab); raise
    finally:
        page.close()
    from ragbench.eval.validity import validity_estimates
    t = validity_estimates(run).set_index("criterion")
    assert t.loc["correct", "n_labelled"] == 2 and t.loc["correct", "human"] == 0.5
