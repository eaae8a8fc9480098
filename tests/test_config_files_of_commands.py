"""issue 18: `ragbench static`, `export-ragas`, `plan`, `qualify` and `refresh` take `--config FILE`.

Each reads its options model (StaticOptions, ExportRagasOptions, PlanOptions, QualifyOptions, RefreshOptions) from a
YAML file, by field name (dashed or not); a flag given beats the file; an unknown name in the file is named, exit 2.
Offline: hash embedder, the rule-based `template` LLM, the shared HotpotQA sample.

Run: pytest tests/test_config_files_of_commands.py -q   (about 20 seconds)
"""
import json, os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.cli import main
from ragbench.core import Dataset

HOTPOT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hotpotqa" / "hotpotqa_train100.json"


def run_cli(argv, capsys):
    "`ragbench ARGV` in-process: (exit status, stdout, stderr)."
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def static_db(tmp_path_factory):
    "Three HotpotQA questions and their paragraphs (hash embedder) in two tables, 'chunks' and 'other'."
    if not HOTPOT.exists(): pytest.fail(f"HotpotQA sample not found at {HOTPOT} (../shared/data beside the checkout)")
    tmp = tmp_path_factory.mktemp("static")
    for table in ("chunks", "other"):      # a flag at its default yields to the file: the tests give --table other
        argv = ["static", HOTPOT, "--format", "hotpotqa", "--db", tmp / "db", "--out", tmp / "ds.jsonl", "--limit", "3",
                "--embedder", "hash:64", "--quiet", "--table", table]
        assert main([str(a) for a in argv]) == 0
    return tmp


def test_static_takes_its_options_from_a_config_file(tmp_path, capsys):
    conf = tmp_path / "static.yaml"
    conf.write_text("limit: 5\ntable: from_file\nembedder: hash:32\nquiet: true\n")
    rc, out, err = run_cli(["static", HOTPOT, "--format", "hotpotqa", "--db", tmp_path / "db",
                            "--out", tmp_path / "ds.jsonl", "--config", conf, "--limit", "2"], capsys)
    assert rc == 0, err
    assert len(Dataset.read(tmp_path / "ds.jsonl")) == 2                    # --limit given beats the file's 5
    assert out.startswith(f"2 hotpotqa questions -> {tmp_path / 'ds.jsonl'}")
    assert "table 'from_file'" in out                                      # the file's table
    conf.write_text("limits: 5\n")
    rc, out, err = run_cli(["static", HOTPOT, "--format", "hotpotqa", "--db", tmp_path / "db2",
                            "--out", tmp_path / "x.jsonl", "--config", conf], capsys)
    assert rc == 2 and "static.yaml: unknown option 'limits'; options: fmt, db, out" in err
    assert not (tmp_path / "db2").exists()


def test_export_ragas_takes_its_options_from_a_config_file(static_db, tmp_path, capsys):
    conf = tmp_path / "export.yaml"
    conf.write_text("with-ids: true\ntable: no_such_table\n")
    rc, out, err = run_cli(["export-ragas", "--dataset", static_db / "ds.jsonl", "--db", static_db / "db",
                            "--out", tmp_path / "r.jsonl", "--config", conf, "--table", "other"], capsys)
    assert rc == 0, err
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and list(rows[0])[0] == "item_id"                  # the file's with_ids; the flag's table
    assert out == f"wrote {tmp_path / 'r.jsonl'}\n"
    conf.write_text("mode: bogus\n")
    rc, out, err = run_cli(["export-ragas", "--dataset", static_db / "ds.jsonl", "--db", static_db / "db",
                            "--out", tmp_path / "r2.jsonl", "--config", conf], capsys)
    assert rc == 2 and "export.yaml: field 'mode': Input should be" in err and not (tmp_path / "r2.jsonl").exists()


def test_plan_takes_its_options_from_a_config_file(tmp_path, capsys):
    conf = tmp_path / "plan.yaml"
    conf.write_text("metric: correct\np: 0.3\nalpha: 0.1\njson: no\n")
    argv = ["plan", "--d", "0.1", "--config", conf, "--alpha", "0.01", "--json", tmp_path / "plan.json"]
    rc, out, err = run_cli(argv, capsys)
    assert rc == 2 and "plan.yaml: unknown option 'json'; options: d, pilot" in err   # the file names fields: json_file
    conf.write_text("metric: correct\np: 0.3\nalpha: 0.1\njson_file: from_file.json\n")
    rc, out, err = run_cli(argv, capsys)
    assert rc == 0, err                                                       # the file's metric, the flag's alpha
    # issue 37: the plan simulates the test that runs
    assert out.startswith("to detect a difference of 0.1 in correct at 80% power (the paired test that runs, simulated; alpha = 0.01)")
    rows = json.loads((tmp_path / "plan.json").read_text())                   # --json given beats the file's json_file
    assert rows[0]["source"] == "worst case: 0/1 metric at p = 0.3, independent arms" and not Path("from_file.json").exists()


def test_qualify_takes_its_options_from_a_config_file(tmp_path, capsys):
    conf = tmp_path / "qualify.yaml"
    conf.write_text("n: 30\nconcurrency: 2\n")
    argv = ["qualify", "--judge-llm", "template", "--out", tmp_path / "q", "--config", conf, "--n", "6"]
    rc, out, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert len((tmp_path / "q" / "qualify.jsonl").read_text().splitlines()) == 6      # --n given beats the file's 30
    assert "6 cases (" in out and json.loads((tmp_path / "q" / "summary.json").read_text())["cases"] == 6
    conf.write_text("n: 6\njudge: template\n")
    rc, out, err = run_cli(["qualify", "--judge-llm", "template", "--out", tmp_path / "q2", "--config", conf], capsys)
    assert rc == 2 and "qualify.yaml: unknown option 'judge'; options: judge_llm, out, n, concurrency" in err
    assert not (tmp_path / "q2").exists()


def test_refresh_takes_its_options_from_a_config_file(static_db, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["triad", "--db", str(static_db / "db"), "--out", str(run), "--n", "2", "--llm", "template"]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in run.iterdir())
    conf = tmp_path / "refresh.yaml"
    conf.write_text("estimate: true\ntable: no_such_table\nmax-calls: 5\n")
    rc, out, err = run_cli(["refresh", run, "--db", static_db / "db", "--config", conf, "--table", "other"], capsys)
    assert rc == 0, err
    est = json.loads(out)                                     # the file's estimate: what is stale, nothing sent
    assert est["items"] == len((run / "dataset.jsonl").read_text().splitlines()) and "calls" in est
    assert sorted(p.name for p in run.iterdir()) == before    # the flag's table was opened; no refresh ran
    conf.write_text("estimat: true\n")
    rc, out, err = run_cli(["refresh", run, "--db", static_db / "db", "--config", conf], capsys)
    assert rc == 2 and "refresh.yaml: unknown option 'estimat'; options: db, table" in err
