"""Names that become code or paths (issue 40): a notebook parameter's name is written into the notebook as
`NAME = VALUE`, a step, run or table name becomes a file name. Each is checked (an `Identifier`, a `PathComponent`)
before anything runs or is written, and the refusal names the value and the rule. Also two small defects of the
same issue: an empty table sidecar, and `triad --config` with `n:`."""
import json

import nbformat
import pytest

from conftest import SAMPLE, ok, ragbench, record, user_error

INJECTED = 'x=1;__import__("os").system("touch {flag}");y'
IDENTIFIER_RULE = "a parameter name must be a Python identifier that is not a keyword"
PATH_RULE = "a name must be one path component"


def case(p, *words) -> str:
    "Record and check a refusal: exit 2, one `ragbench CMD: message` line naming `words`, no traceback."
    record(None, rc=p.returncode, says=(p.stderr.strip().splitlines() or [""])[-1][:160])
    return user_error(p, *words)


@pytest.fixture
def toy(tmp_path):
    "A notebook with a parameters cell (`n = 2`) that writes `n` into its run directory."
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell("run_dir = '.'\nn = 2"); p.metadata["tags"] = ["parameters"]
    nb.cells = [p, nbformat.v4.new_code_cell("from pathlib import Path\nPath(run_dir, 'n.txt').write_text(str(n))")]
    nbformat.write(nb, str(tmp_path / "toy.ipynb"))
    return tmp_path / "toy.ipynb"


def written(root) -> list[str]:
    "Every file and folder under `root`, relative (what a refused command must not have added)."
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("flag", ["-p", "-r"])
def test_run_parameter_name_is_never_code(tmp_path, toy, flag):
    "S1: `ragbench run NB -p 'x=1;__import__(\"os\").system(...);y' 2` ran the injected code; now refused first."
    before, bad = written(tmp_path), INJECTED.format(flag=tmp_path / "F")
    line = case(ragbench("run", toy, "--out", tmp_path / "r", flag, bad, "2"), repr(bad), IDENTIFIER_RULE)
    assert "--param" in line or "--raw" in line
    assert not (tmp_path / "F").exists() and written(tmp_path) == before


def test_run_parameter_keyword_is_refused(tmp_path, toy):
    "S1: `-p class 1` wrote `class = 1` (a syntax error in the notebook); now refused, naming the rule."
    case(ragbench("run", toy, "--out", tmp_path / "r", "-p", "class", "1"), "'class'", IDENTIFIER_RULE)
    assert not (tmp_path / "r").exists()


def test_run_parameters_file_keys_are_checked(tmp_path, toy):
    "S1: a `-f params.yaml` key is a parameter name too: refused naming the file."
    f = tmp_path / "params.yaml"
    f.write_text(json.dumps({INJECTED.format(flag=tmp_path / "F"): 1}))
    case(ragbench("run", toy, "--out", tmp_path / "r", "-f", f), "params.yaml", IDENTIFIER_RULE)
    assert not (tmp_path / "F").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", ["../../X", "..", "a/b", "a\\b"])
def test_run_name_stays_in_the_run_directory(tmp_path, toy, name):
    "S2: `ragbench run NB --out W/r --name ../../X` wrote X.ipynb two folders above --out and said 'completed'."
    work = tmp_path / "a" / "b"; work.mkdir(parents=True)
    before = written(tmp_path)
    case(ragbench("run", toy, "--out", work / "r", "--name", name), f"--name: {name!r}", PATH_RULE)
    assert written(tmp_path) == before and not list(tmp_path.rglob("X.ipynb"))


def test_run_with_good_names_still_runs(tmp_path, toy):
    "The rules refuse only bad names: a parameter and a dotted step name run as before."
    ok(ragbench("run", toy, "--out", tmp_path / "r", "-p", "n", "5", "--name", "25_toy.run", "--no-progress"))
    assert (tmp_path / "r" / "n.txt").read_text() == "5" and (tmp_path / "r" / "notebooks" / "25_toy.run.ipynb").exists()


@pytest.mark.parametrize("step, words", [
    ('{name: "../../X", notebook: toy.ipynb}', ["steps[0]: field 'name': '../../X'", PATH_RULE]),
    ('{name: t, notebook: toy.ipynb, parameters: {"x=1;y": 2}}', ["steps[0]: field 'parameters': 'x=1;y'", IDENTIFIER_RULE]),
    ('{name: t, notebook: toy.ipynb, parameters: {class: 2}}', ["'class'", IDENTIFIER_RULE]),
])
def test_pipeline_step_names_and_parameters(tmp_path, toy, step, words):
    "S1/S2: a pipeline's first step named '../../X' gave a FileNotFoundError traceback; its parameters' keys were code."
    cfg = tmp_path / "p.yaml"; cfg.write_text(f"steps:\n  - {step}\n")
    case(ragbench("pipeline", cfg, "--out", tmp_path / "run", "--no-progress"), "p.yaml", *words)
    assert not (tmp_path / "run").exists() and not list(tmp_path.parent.rglob("X.ipynb"))


def test_pipeline_shared_parameter_names(tmp_path, toy):
    "S1: the shared `parameters:` of a pipeline are parameter names too."
    cfg = tmp_path / "p.yaml"; cfg.write_text('parameters: {"n; import os": 1}\nsteps: [toy.ipynb]\n')
    case(ragbench("pipeline", cfg, "--out", tmp_path / "run"), "field 'parameters': 'n; import os'", IDENTIFIER_RULE)
    assert not (tmp_path / "run").exists()


@pytest.fixture
def one_jsonl(tmp_path):
    "Three documents of the bundled sample."
    f = tmp_path / "one.jsonl"
    f.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:3]))
    return f


def test_index_table_name_checked_before_anything_is_written(tmp_path, one_jsonl):
    "S3: `index --table ../../X` was refused only after X.ragbench.json was written above --db and --db was made."
    work = tmp_path / "W"; work.mkdir()
    p = ragbench("index", one_jsonl, "--db", work / "db" / "S3", "--table", "../../X", "--embedder", "hash", "--quiet")
    case(p, "--table: '../../X'", PATH_RULE)
    assert not (work / "db").exists() and not list(tmp_path.rglob("X.ragbench.*"))


def test_search_table_name_checked(tmp_path):
    "S3: search's --table is the same kind of name."
    case(ragbench("search", "--db", tmp_path / "db", "--table", "..", "q"), "--table: '..'", PATH_RULE)


def test_empty_sidecar_names_the_file_and_the_way_out(tmp_path, one_jsonl):
    "D3: an empty chunks.ragbench.json gave `Expecting value: line 1 column 1 (char 0)`, naming no file."
    db = tmp_path / "db"
    ok(ragbench("index", one_jsonl, "--db", db, "--embedder", "hash", "--quiet"))
    (db / "chunks.ragbench.json").write_text("")
    line = case(ragbench("search", "--db", db, "q"), "chunks.ragbench.json", "is empty", "re-index", "ragbench index")
    assert "Expecting value" not in line
    (db / "chunks.ragbench.json").write_text('{"format": ')                   # cut short: says where
    case(ragbench("search", "--db", db, "q"), "chunks.ragbench.json", "is not JSON", "re-index")


def test_triad_config_n_counts_and_unknown_key_named_first(tmp_path, hash_db, server):
    "D5: `triad --config F` with `n: 2` was refused 'give --n N', before a misspelt key beside it was named."
    cfg = tmp_path / "triad.yaml"
    cfg.write_text("n: 2\nmax_round: 3\n")
    run = ["triad", "--db", hash_db, "--out", tmp_path / "run", "--llm", server.spec, "--config", cfg]
    line = case(ragbench(*run), "unknown option 'max_round'")
    assert "give --n" not in line
    cfg.write_text("n: 2\n")
    p = ok(ragbench(*run, "--estimate"))                                    # no LLM call: the estimate for n = 2
    assert "estimate for 2 accepted questions" in p.stderr, p.stderr[-500:]
    assert not (tmp_path / "run").exists()
