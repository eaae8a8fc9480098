"""Notebooks that teach (issues 18 and 25): a stage notebook a teacher opens shows its saved figure and an example
item, without running anything. The outputs are saved by `python tests/tools/save_outputs.py` (headless, figures as
PNG); these tests read the committed notebooks."""
import json
from pathlib import Path

import pytest

NBS = Path(__file__).resolve().parents[1] / "nbs"


def outputs(name: str) -> list[dict]:
    "Every saved output of the notebook's code cells."
    nb = json.loads((NBS / name).read_text())
    return [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]


def shown_text(o: dict) -> str:
    "What a reader sees of one output as text."
    d = o.get("data", {})
    vs = [o.get("text", ""), d.get("text/plain", ""), d.get("text/markdown", ""), d.get("text/html", "")]
    return "\n".join("".join(v) if isinstance(v, list) else v for v in vs)


def assert_readable(name: str, outs: list[dict]) -> None:
    "No saved traceback, and no widget view (it renders as nothing without its kernel)."
    assert not [o for o in outs if o["output_type"] == "error"], f"nbs/{name} saved a traceback"
    assert not [o for o in outs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})], \
        f"nbs/{name} saved a widget view (it renders as nothing without its kernel)"


STAGES = ["10_corpus.ipynb", "11_index.ipynb", "17_gen.base.ipynb", "25_triad.run.ipynb", "30_dora.run.ipynb",
          "40_eval.run.ipynb", "41_eval.paired.ipynb", "50_report.figures.ipynb", "62_review_queue.ipynb",
          "tutorials/tour.ipynb", "index.ipynb"]


@pytest.mark.parametrize("name", STAGES)
def test_every_stage_notebook_shows_saved_output(name):
    outs = outputs(name)
    assert outs, f"nbs/{name} has no saved output: run python tests/tools/save_outputs.py nbs/{name}"
    assert_readable(name, outs)


def test_the_figures_notebook_shows_every_figure():
    pngs = [o for o in outputs("50_report.figures.ipynb") if "image/png" in o.get("data", {})]
    assert len(pngs) >= 9, f"{len(pngs)} saved figures in nbs/50_report.figures.ipynb"


@pytest.mark.parametrize("name,shows", [("25_triad.run.ipynb", "'question':"), ("30_dora.run.ipynb", "'question':"), ("17_gen.base.ipynb", "'stop_reason':"),
                                         ("tutorials/tour.ipynb", "?")])
def test_stage_notebooks_show_an_example(name, shows):
    assert any(shows in shown_text(o) for o in outputs(name)), f"nbs/{name} shows no example ({shows!r})"


# Every notebook in nbs/ shows a saved output (issue 18), except these, each for its reason:
NO_OUTPUT = {
    "steps/report.ipynb": "its dry run shows the report's figures on the demo data, the ones saved in "
                          "50_report.figures.ipynb: saved again they would add 650 KB of the same PNGs",
}
ALL_NOTEBOOKS = sorted(p.relative_to(NBS).as_posix() for p in NBS.rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in p.parts and not p.name.startswith("_"))


@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_every_notebook_shows_saved_output(name):
    outs = outputs(name)
    if name not in NO_OUTPUT:
        assert outs, f"nbs/{name} has no saved output: give it a short example and run python tests/tools/save_outputs.py nbs/{name}"
    assert_readable(name, outs)


def test_the_list_of_notebooks_without_output_is_current():
    for name in NO_OUTPUT:
        assert name in ALL_NOTEBOOKS, f"nbs/{name} is gone: take it off NO_OUTPUT"
        assert not outputs(name), f"nbs/{name} now shows a saved output: take it off NO_OUTPUT"
