"""`ragbench report`: a self-contained HTML report, and PNG export of every figure through kaleido + Chromium."""
import json, re, struct
from pathlib import Path

import pytest

from ragbench.report import ChromeNotFound, build_report, export_png, load_eval
from ragbench.report.png import find_chrome
from ragbench.report.figures import _metric_by_type
from ragbench.testing.demo import demo_eval_dir, demo_generation_dir
from ragbench.cli import main


def report_cli(argv):
    "`ragbench report ARGV` in-process: its exit status."
    return main(["report", *argv])

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    return demo_eval_dir(root / "eval", n_items=24), demo_generation_dir(root / "gen")


def require_chrome() -> str:
    "The Chromium path; a missing browser FAILS the test (PNG export is a feature, not an optional extra)."
    try:
        return find_chrome()
    except ChromeNotFound as e:
        pytest.fail(f"PNG export cannot be tested: {e}. Install Debian's chromium (`apt-get install chromium`).")


def png_size(data: bytes) -> tuple[int, int]:
    "Width and height from a PNG's IHDR chunk."
    assert data[:8] == PNG_SIGNATURE, "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_cli_writes_self_contained_html(run_dirs, tmp_path, capsys):
    eval_dir, gen_dir = run_dirs
    out = tmp_path / "report.html"
    assert report_cli([str(eval_dir), "--out", str(out), "--generation", str(gen_dir), "--title", "Demo run"]) == 0
    assert str(out) in capsys.readouterr().out
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    # plotly.js is inline exactly once, and nothing is loaded from the network
    assert len(re.findall(r"\* plotly\.js v\d", text)) == 1
    assert not re.findall(r"<script[^>]*\bsrc\s*=", text, re.I), "a script is loaded from elsewhere"
    assert not re.search(r"<link[^>]*href\s*=\s*['\"]?https?:", text, re.I)
    # header, every figure with a caption, the means table
    assert "<h1>Demo run</h1>" in text and "comparison 8" in text and "baseline · top3 · other-llm" in text
    for name in ("generation_funnel", "setup_comparison", "correct_by_type", "correct_by_difficulty",
                 "retrieval_hit_split", "precision_ceiling", "abstention"):
        assert f"<figure id='{name}'>" in text, name
    assert text.count("<figure") == text.count("<figcaption>")
    assert "Means per setup" in text and "unanswerable mode" in text
    assert out.stat().st_size > 3_000_000                 # the library itself is in the file


def test_cli_default_out_and_missing_generation_keys(run_dirs, tmp_path):
    eval_dir, _ = run_dirs
    gen = tmp_path / "gen"; gen.mkdir()
    (gen / "summary.json").write_text(json.dumps({"usage": {"calls": 3}}))   # none of the funnel's counts
    out = tmp_path / "r.html"
    assert report_cli([str(eval_dir), "--out", str(out), "--generation", str(gen)]) == 0
    text = out.read_text()
    assert "generation_funnel: skipped" in text and "acceptance_by_type: skipped" in text
    assert "<figure id='setup_comparison'>" in text


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing", "evaluation directory not found"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "summary.json"),
    (lambda d: ((d / "bad").mkdir(), (d / "bad" / "summary.json").write_text("{not json"))[0] or d / "bad", "not valid JSON"),
])
def test_cli_clear_errors(tmp_path, capsys, make, message):
    eval_dir = make(tmp_path)
    out = tmp_path / "out.html"
    assert report_cli([str(eval_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragbench report: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_cli_missing_generation_dir(run_dirs, tmp_path, capsys):
    eval_dir, _ = run_dirs
    assert report_cli([str(eval_dir), "--out", str(tmp_path / "x.html"), "--generation", str(tmp_path / "nope")]) == 2
    assert "generation directory not found" in capsys.readouterr().err


def test_no_chrome_is_a_clear_error_and_writes_nothing(run_dirs, tmp_path, capsys, monkeypatch):
    eval_dir, _ = run_dirs
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chrome"))
    out = tmp_path / "r.html"
    assert report_cli([str(eval_dir), "--out", str(out), "--png-dir", str(tmp_path / "png")]) == 2
    err = capsys.readouterr().err
    assert "apt-get install chromium" in err
    assert not out.exists() and not (tmp_path / "png").exists()


def test_png_export_of_one_figure(run_dirs, tmp_path):
    require_chrome()
    eval_dir, _ = run_dirs
    summary, scores = load_eval(eval_dir)
    p = export_png(_metric_by_type(summary, "correct", scores), tmp_path / "correct_by_type.png", width=900, height=500)
    data = p.read_bytes()
    assert png_size(data) == (900, 500)
    assert len(data) > 20_000                              # a drawn chart, not an empty canvas


def test_cli_png_dir_exports_every_figure(run_dirs, tmp_path):
    require_chrome()
    eval_dir, gen_dir = run_dirs
    out, png_dir = tmp_path / "r.html", tmp_path / "png"
    assert report_cli([str(eval_dir), "--out", str(out), "--generation", str(gen_dir), "--png-dir", str(png_dir),
                       "--width", "1000"]) == 0
    figures = re.findall(r"<figure id='([^']+)'>", out.read_text())
    pngs = sorted(p.stem for p in png_dir.glob("*.png"))
    assert pngs == sorted(figures) and "correct_by_type" in pngs
    for p in png_dir.glob("*.png"):
        w, h = png_size(p.read_bytes())
        assert w == 1000 and 200 <= h <= 1000, (p.name, w, h)


def test_report_from_eval_run_summary(tmp_path):
    "When the evaluation harness is present, the report draws its real summary.json layout."
    from ragbench.eval import run as eval_run
    from ragbench.testing.demo import _demo_rows
    rows = _demo_rows(12, ("baseline", "top3"), seed=1)
    d = tmp_path / "eval"; d.mkdir()
    (d / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text(json.dumps(eval_run.summarize(rows)))
    text = build_report(d, tmp_path / "r.html").read_text()
    for name in ("setup_comparison", "correct_by_type", "precision_ceiling", "abstention", "retrieval_hit_split"):
        assert f"<figure id='{name}'>" in text, name


# ---------------------------------------------------------------------------------------------------------
# Issue 11 / 13: what a TRIAD and a DoRA report show (each failed before these changes)

def test_triad_report_abstention_per_kind_and_acceptance_by_type(run_dirs, tmp_path):
    "Before: abstention mixed every unanswerable item into one bar (variants answered through retrieval), and the "
    "acceptance-by-type figure was always skipped for TRIAD runs (it read fields TRIAD's summary.json does not write)."
    eval_dir, gen_dir = run_dirs
    gen = json.loads((gen_dir / "summary.json").read_text())
    assert set(gen["by_type"]["comparison"]) == {"seeds", "accepted", "rejected", "acceptance_rate"}    # TRIAD's shape
    out = tmp_path / "r.html"
    assert report_cli([str(eval_dir), "--out", str(out), "--generation", str(gen_dir)]) == 0
    text = out.read_text()
    assert "<figure id='acceptance_by_type'>" in text and "acceptance_by_type: skipped" not in text
    for group in ("context-unanswerable items (own contexts)", "answerable items, relevant contexts withheld",
                  "corpus-unanswerable items (retrieved)", "answerable items (should answer)"):
        assert group in text, group
    assert "gemini:gemini-2.5-flash-lite" in text                          # each setup labelled with its answering model


def test_per_item_table_and_stand_in_banner(tmp_path):
    "Before: no per-item table in the report, and nothing said that the numbers came from stand-in models."
    from ragbench.testing.demo import demo_eval_dir
    eval_dir = demo_eval_dir(tmp_path / "eval", n_items=8)
    summary = json.loads((eval_dir / "summary.json").read_text())
    summary["models"] = {"answer": {s: "local" for s in summary["setups"]}, "judge": "local"}
    (eval_dir / "summary.json").write_text(json.dumps(summary))
    run = tmp_path / "triad"; run.mkdir()
    from ragbench.core import Dataset, QAItem
    Dataset([QAItem(id="tq-0000", method="triad", kind="comparison", question="q", answer="a", models={"generate": "template"})]).write(run / "dataset.jsonl")
    text = build_report(eval_dir, tmp_path / "r.html", generation_dir=run).read_text()
    banner = text.index("Stand-in models made these numbers")
    assert banner < text.index("<h2>Dataset and setups</h2>")                 # on the first screen
    assert "the template writer (rule-based stand-in" in text and "local (the bundled SmolLM2" in text
    assert "<h2>Per item</h2>" in text and "Synthetic question 3?" in text and "synthetic verdict" in text
    plain = build_report(demo_eval_dir(tmp_path / "eval2", n_items=8), tmp_path / "r2.html").read_text()
    assert "Stand-in models" not in plain


def test_charts_with_nothing_to_show_are_hidden(run_dirs, tmp_path):
    "Before: generation counts of zero were drawn as an empty funnel and zero bars."
    eval_dir, _ = run_dirs
    gen = tmp_path / "gen"; gen.mkdir()
    (gen / "summary.json").write_text(json.dumps({"seeds_tried": 0, "attempts": 0, "accepted": 0,
                                                  "by_type": {"comparison": {"seeds": 0, "accepted": 0, "rejected": 0}}}))
    text = build_report(eval_dir, tmp_path / "r.html", generation_dir=gen).read_text()
    assert "<figure id='generation_funnel'>" not in text and "generation_funnel: skipped (nothing to show: only zeros)" in text
    assert "<figure id='acceptance_by_type'>" not in text


def test_acceptance_by_type_from_a_real_triad_run(tmp_path):
    "Issue 13: the figure reads the by_type that TRIAD's own summary.json writes (a real run with the template writer),"
    " not only the hand-made demo summary."
    from ragbench.corpus import chunk_documents, load_documents, sample_corpus_path
    from ragbench.index import ChunkIndex
    from ragbench.report import acceptance_by_type
    from ragbench.report.figures import _shows_something
    db = tmp_path / "db"
    ChunkIndex.build(db, chunk_documents(load_documents(sample_corpus_path())), "hash", progress=False)
    gen = tmp_path / "gen"
    assert main(["triad", "--db", str(db), "--out", str(gen), "--llm", "template", "--n", "4", "--seed", "1"]) == 0
    s = json.loads((gen / "summary.json").read_text())
    decided = {t: v for t, v in s["by_type"].items() if v["accepted"] + v["rejected"]}
    assert decided and {"seeds", "no_bridge", "accepted", "rejected", "attempts", "acceptance_rate"} <= set(next(iter(decided.values())))
    fig = acceptance_by_type(s)
    assert list(fig.data[0].x) == [t for t in fig.data[0].x if t in decided] and set(fig.data[0].x) == set(decided)
    assert list(fig.data[0].text) == [f"{decided[t]['accepted']:g}/{decided[t]['accepted'] + decided[t]['rejected']:g}"
                                      for t in fig.data[0].x]
    assert _shows_something(fig)


def test_report_takes_its_options_from_a_config_file(run_dirs, tmp_path, capsys):
    "issue 18: `ragbench report --config FILE` reads out and title from the file; a flag given wins."
    eval_dir, _ = run_dirs
    conf = tmp_path / "report.yaml"
    conf.write_text(f"out: {tmp_path / 'from-file.html'}\ntitle: From the file\n")
    assert report_cli([str(eval_dir), "--config", str(conf), "--out", str(tmp_path / "given.html")]) == 0
    assert str(tmp_path / "given.html") in capsys.readouterr().out      # --out beats the file's out
    assert "<h1>From the file</h1>" in (tmp_path / "given.html").read_text()      # the file's title
    assert not (tmp_path / "from-file.html").exists()
