"""The generated command line keeps every flag of the hand-written argparse parsers it replaced.

`cli_flags_before.json` was captured from the old parsers (one `_parser()` / `*_cli(argv)` per command): every
action (option strings, nargs, type, choices, required, default) and, per command, an argv giving every option a
non-default value with what the old parser made of it. The new parsers must accept the same flags, parse them to
the same values, and add none.
"""
import argparse, contextlib, io, json, subprocess, sys
from pathlib import Path

import pytest

from ragbench.cli import COMMANDS, command_names, main, _resolve_command
from ragbench.commands.options import command_parser, parse_command

BEFORE = json.loads((Path(__file__).parent / "cli_flags_before.json").read_text())

# flags removed on purpose after the snapshot, with the reason (taken out of the snapshot's actions and argv here)
REMOVED = {("evaluate", "--n-boot"): "issue 38: intervals are exact since issue 37 (no bootstrap); the flag changed nothing"}
for (_name, _flag) in REMOVED:
    _b = BEFORE[_name]
    _dest = next(a["dest"] for a in _b["actions"] if _flag in a["flags"])
    _b["actions"] = [a for a in _b["actions"] if _flag not in a["flags"]]
    _i = _b["argv"].index(_flag)
    _b["argv"] = _b["argv"][:_i] + _b["argv"][_i + 2:]
    _b["parsed"].pop(_dest, None)

# new parameter name -> (old argparse dest, whether the flag's sense is inverted: --no-x stores x=False)
RENAMED = {
    "search": {"as_json": ("json", False)},
    "dora": {"embed": ("no_embed", True), "progress": ("no_progress", True)},
    "evaluate": {"bertscore": ("no_bertscore", True)},
    "compare": {"json_file": ("json", False)},
    "run": {"listing": ("list", False), "progress": ("no_progress", True)},
    "pipeline": {"progress": ("no_progress", True)},
}


# flags added on purpose after the snapshot (new option string -> its keyword argument); each keeps the old flags intact
RAY = {"--ray": "ray"}   # issue 14: run on a Ray cluster (the optional extra)
ADDED = {
    "dora": {"--test-fraction": "test_fraction",    # issue 13: `--split train,test --test-fraction 0.2`, beside --test-docs
             "--column": "column", **RAY,           # issue 13: your own vector table (--column ROLE=NAME, as search has); issue 14: --ray
             "--llm-timeout": "llm_timeout",        # issue 40: the LLM request timeout (120 s) as a flag
             # issue 43: a sample of real questions in the writing prompt (DoraConfig fields)
             "--style-from": "style_from", "--style-examples": "style_examples"},
    "triad": {"--column": "column", "--embedder": "embedder", **RAY,    # issue 13: your own vector table (as search has them)
              "--n-from-plan": "n_from_plan",                           # issue 20: `ragbench plan --json`'s n per type as the target
              "--llm-timeout": "llm_timeout",                           # issue 40: the LLM request timeout (120 s) as a flag
              # issue 43: a sample of real questions in the writing prompt (TriadConfig fields)
              "--style-from": "style_from", "--style-examples": "style_examples",
              "--classify-llm": "classify_llm"},                        # issue 42: the classifier stages' model (a role)
    "evaluate": {"--max-calls": "max_calls",        # issue 12 #4: one call budget for the whole evaluation, across resumes
                 "--column": "column", **RAY,       # issue 13: your own vector table (--column ROLE=NAME, as search has)
                 "--table": "table",                # issue 25: the table of your own database
                 "--judge-repeats": "judge_repeats", "--judge-repeat-sample": "judge_repeat_sample",   # issue 37: judge
                 "--estimate": "estimate"},         # self-consistency; the calls an evaluation would send, re-asks apart
    "search": {"--queries": "queries",             # issue 25: many queries with one embedder load
               "--config": "config"},              # issue 18: every command takes --config FILE
    "run": {"--config": "config"},                 # issue 18
    "demo": {"--config": "config"},                # issue 18
    "export-ragas": {"--column": "column", "--embedder": "embedder"},   # issue 25: your own table, as the other commands take it
    "index": {**RAY, "--vector-index-min-rows": "vector_index_min_rows",  # issue 14: --ray; issue 23: the vector-index threshold
              "--write-rows": "write_rows",                               # issue 23: new chunks gathered per table write
              "--config": "config",                                       # issue 18: every command takes --config FILE
              # issue 41: the source is the whole corpus; the stored documents it lacks are listed, removed with --yes
              "--prune": "prune", "--yes": "yes", "--dry-run": "dry_run"},
    "pipeline": RAY,                               # issue 14: --ray local|auto|ADDRESS
    "refresh": {"--fail-if-stale": "fail_if_stale"},   # issue 41: exit 1 when any item was stale (a weekly CI job)
    # issue 20: the paired comparison of one evaluation's setups against a baseline, with a CI gate
    "report": {"--baseline": "baseline", "--config": "config"},   # issue 20: the setup the report's paired decision
                                                                  # compares the others with; issue 18: --config FILE
    "compare": {f: f[2:].replace("-", "_") for f in ("--baseline", "--metrics", "--by", "--all-pairs", "--alpha", "--power",
                                                     "--fail-if-worse", "--setups",
                                                     # issue 37: the confirmatory family, equivalence margins, the gate's
                                                     # uninformative rows, the difference an uninformative row sizes n for
                                                     "--primary", "--equivalence-margin", "--allow-uninformative", "--detect")}
               | {"--config": "config"},   # issue 18
    "fake-llm-server": {"--stage-faults": "stage_faults",   # issue 24: hostile replies for one stage (TEXT=FAULT;...)
                        "--retry-after": "retry_after"},    # issue 24: the wait a 'retry_after' fault (429) asks for
}
# positionals made optional on purpose after the snapshot: (command, dest) -> the new nargs, with the reason
CHANGED_NARGS = {
    ("compare", "dir_b"): "?",   # issue 20: `compare --baseline NAME EVAL_DIR` takes one folder; two still rank-compare
    ("search", "query"): "?",    # issue 25: `search --queries FILE` takes its queries from a file
}
# options no longer required on purpose: (command, dest), with the reason
CHANGED_REQUIRED = {
    ("triad", "n"),              # issue 20: `--n-from-plan PLAN.json` gives the target per type instead (one of the two is needed)
}
# issue 18: every field of a command's config model has a flag (unset unless given: its default is argparse.SUPPRESS;
# issue 38: generated by commands.options, the one flag generator), and every generating / evaluating command takes
# --config FILE; the flags of the snapshot keep their names and keywords
def _config_flags(name: str) -> dict:
    "Option string -> dest of the flags a command's config model adds (unset unless given)."
    acts = command_parser(_resolve_command(name))._actions
    return {f: a.dest for a in acts if a.default is argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
            for f in a.option_strings}

for _name in ("triad", "dora", "evaluate"):
    _gen = _config_flags(_name)
    ADDED[_name] = {**ADDED.get(_name, {}), **_gen, **({"--config": "config"} if _name != "dora" else {})}
ADDED["evaluate"].update({"--seed": "seed", "--ks": "ks", "--bertscore-model": "bertscore_model",   # issue 18: every option of
                                                                                                # evaluate() has a flag
                          # issue 42: one in-flight setting, LLM requests in flight (default 16, as generation); it
                          # replaces issue 18's --parallel-batches (batches in flight), which never raised the LLM's 8
                          "--concurrency": "concurrency"})
# issue 42: provider batch mode (OpenAI's and Gemini's batch APIs) for generation and judging runs that can wait
for _name in ("triad", "dora", "evaluate"):
    ADDED[_name].update({"--provider-batch": "provider_batch", "--batch-poll": "batch_poll"})
for _name in ("static", "export-ragas"):           # issue 18: StaticOptions, ExportRagasOptions, and --config FILE
    ADDED[_name] = {**ADDED.get(_name, {}), "--config": "config"}
# defaults changed on purpose after the snapshot: (command, dest) -> the new default, with the reason
CHANGED_DEFAULTS = {
    # issue 11: DoRA's 1-5 rubric judge runs by default; it applies only to items with a style, so a TRIAD
    # evaluation makes no more calls
    ("evaluate", "judges"): "correctness,faithfulness,keypoints,abstention,rubric",
    ("demo", "llm"): None,      # issue 13: offline, the main job scores retrieval only; the `local` model is an opt-in extra
    ("demo", "max_docs"): 6,    # issue 13: the first run finishes in about a minute
    # issue 20: no default in the signature, so --metric can name the metric to pair with --baseline; the ranking of
    # two folders still uses recall@5 when it is not given
    ("compare", "metric"): None,
    # issue 25: an answers file listing 3 ids is scored at k = 3, not 5 (the most ids one of its answers lists)
    ("evaluate", "answers_top_k"): None,
}


def parser_of(name: str) -> argparse.ArgumentParser:
    return command_parser(_resolve_command(name), f"ragbench {name}")


def as_old(name: str, kwargs: dict) -> dict:
    "New keyword arguments under the old parser's dest names and senses (pairs as lists, as argparse gave them)."
    out, added = {}, set(ADDED.get(name, {}).values())
    for k, v in kwargs.items():
        if k in added: continue
        dest, inverted = RENAMED.get(name, {}).get(k, (k, False))
        if inverted: v = not v
        if isinstance(v, list): v = [list(x) if isinstance(x, tuple) else x for x in v]
        out[dest] = v
    return out


NEW_COMMANDS = {"qualify",            # added after the snapshot (issue 10: judge qualification)
                "refresh", "check",   # issue 22: refresh a run against a changed corpus; whole-corpus checks
                "plan",               # issue 20: questions needed for a paired comparison
                "validity",           # issue 20: human verdicts on a sample of accepted items -> the truly-valid share
                "doctor",             # issue 40: LLM keys and servers, storage credentials, the table and its sidecar
                "realism"}            # issue 43: a generated dataset against real questions (--fail-if-easier gate;
                                      # --reweight OUT: the dataset with meta.weight toward the real distribution)

def test_every_command_is_in_the_snapshot():
    assert set(command_names()) == set(BEFORE) | NEW_COMMANDS   # fake-llm-server: a plugin of ragbench.testing (issue 18)


@pytest.mark.parametrize("name", list(BEFORE))
def test_same_flags_as_before(name):
    "Same option strings (none added, none lost) with the same nargs, type, choices and required-ness."
    new = [a for a in parser_of(name)._actions if not isinstance(a, argparse._HelpAction)
           and not set(a.option_strings) & set(ADDED.get(name, {}))]
    old = BEFORE[name]["actions"]
    assert sorted(f for a in new for f in a.option_strings) == sorted(f for a in old for f in a["flags"])
    assert [a.nargs for a in new if not a.option_strings] == [CHANGED_NARGS.get((name, a["dest"]), a["nargs"])
                                                              for a in old if not a["flags"]]   # positionals
    by_flag = {tuple(a.option_strings): a for a in new if a.option_strings}
    for o in [a for a in old if a["flags"]]:
        a = by_flag[tuple(o["flags"])]
        flag_kind = {"_StoreTrueAction": "flag", "_StoreFalseAction": "flag"}
        assert flag_kind.get(type(a).__name__, type(a).__name__) == flag_kind.get(o["kind"], o["kind"]), o["flags"]
        assert (a.nargs, getattr(a.type, "__name__", None), list(a.choices) if a.choices else None, a.required) == \
               (o["nargs"], o["type"], o["choices"], o["required"] and (name, o["dest"]) not in CHANGED_REQUIRED), o["flags"]


@pytest.mark.parametrize("name", list(BEFORE))
def test_defaults_as_before(name):
    "Parsing only the required arguments gives the old defaults."
    old = BEFORE[name]
    required = [x for a in old["actions"] if a["required"] for x in (a["flags"] + [old["parsed"][a["dest"]]] if a["flags"]
                                                                      else [old["parsed"][a["dest"]]])]
    got = as_old(name, parse_command(_resolve_command(name), [str(x) for x in required]))
    for a in old["actions"]:
        if a["required"]: continue
        want = CHANGED_DEFAULTS.get((name, a["dest"]), a["default"])
        if a["kind"] == "_AppendAction" and want is None: want = []     # repeatable options now default to []
        assert got[a["dest"]] == want, (name, a["dest"])


@pytest.mark.parametrize("name", list(BEFORE))
def test_every_old_flag_parses_to_the_same_value(name):
    "An argv using every option with a non-default value parses to exactly what the old parser made of it."
    got = as_old(name, parse_command(_resolve_command(name), BEFORE[name]["argv"]))
    assert got == BEFORE[name]["parsed"]


# command lines as users type them (README, tests, issue reports) -> some of the keyword arguments they give
TABLE = [
    ("search", ["--db", "runs/db", "how do I undo a commit", "-k", "5", "--mode", "hybrid", "--json"],
     dict(query="how do I undo a commit", db="runs/db", k=5, mode="hybrid", as_json=True)),
    ("search", ["--db", "d", "q", "--column", "id=doc_key", "--column", "text=content"], dict(column=["id=doc_key", "text=content"])),
    ("index", ["docs", "--db", "runs/db", "--format", "jsonl", "--mode", "paragraph", "--max-doc-mb", "2"],
     dict(source="docs", fmt="jsonl", mode="paragraph", max_doc_mb=2.0, quiet=False)),
    ("triad", ["--db", "runs/db", "--out", "runs/triad", "--n", "50", "--llm", "gemini:gemini-2.5-flash", "--max-calls", "2000"],
     dict(n=50, llm="gemini:gemini-2.5-flash", max_calls=2000, max_seeds=None, judge_llm=None, estimate=False)),
    ("triad", ["--db", "d", "--out", "o", "--n", "3", "--max-seeds", "9", "--estimate"], dict(max_seeds=9, estimate=True)),
    ("triad", ["--db", "d", "--out", "o", "--n", "3", "--role", "a tax lawyer", "--config", "t.yaml", "--max-rounds", "3",
               "--no-unanswerable", "--search-mode", "hybrid"],                    # issue 18: every TriadConfig field, --config
     dict(role="a tax lawyer", config="t.yaml", max_rounds=3, unanswerable=False, search_mode="hybrid")),
    ("dora", ["--db", "d", "--out", "o", "--per-style", "2", "--temperature", "0.3", "--max-per-doc", "2"],
     dict(temperature=0.3, max_per_doc=2)),
    ("evaluate", ["--dataset", "ds", "--out", "e", "--setups", "s.yaml", "--config", "ev.yaml", "--ks", "1,5", "--seed", "4"],
     dict(config="ev.yaml", ks="1,5", seed=4)),
    ("dora", ["--db", "d", "--out", "o", "--per-style", "20", "--no-embed", "--no-progress"], dict(per_style=20, embed=False, progress=False)),
    ("dora", ["--db", "d", "--out", "o", "--per-style", "5", "--split", "train,test", "--test-fraction", "0.2"],
     dict(split="train,test", test_fraction=0.2, test_docs=None)),
    ("static", ["--format", "hotpotqa", "questions.json", "--db", "d", "--out", "o.jsonl"], dict(file="questions.json", fmt="hotpotqa")),
    ("evaluate", ["--dataset", "ds.jsonl", "--db", "d", "--answers", "mine=a.jsonl", "--answers", "b.jsonl", "--out", "e",
                  "--no-bertscore"], dict(answers=["mine=a.jsonl", "b.jsonl"], bertscore=False, max_calls=None,
                                          judges="correctness,faithfulness,keypoints,abstention,rubric")),   # rubric: see CHANGED_DEFAULTS
    ("evaluate", ["--dataset", "ds.jsonl", "--out", "e", "--setups", "s.yaml", "--max-calls", "500"], dict(max_calls=500)),
    ("compare", ["runs/eval", "runs/eval-hotpot", "--metric", "recall@5", "--json", "c.json"],
     dict(dir_a="runs/eval", dir_b="runs/eval-hotpot", metric="recall@5", json_file="c.json")),
    ("export-ragas", ["--dataset", "ds", "--db", "d", "--out", "r.parquet", "--with-ids", "--mode", "oracle"], dict(with_ids=True, mode="oracle")),
    ("report", ["runs/eval", "--generation", "runs/triad", "--png-dir", "runs/png"], dict(eval_dir="runs/eval", generation="runs/triad", png_dir="runs/png", out=None)),
    ("run", ["triad", "-p", "n", "5", "-p", "llm", "fake", "-r", "seed_text", "007", "-f", "p.yaml", "--out", "runs/nb"],
     dict(notebook="triad", param=[("n", "5"), ("llm", "fake")], raw=[("seed_text", "007")], parameters_file="p.yaml", out="runs/nb")),
    ("run", ["--list"], dict(notebook=None, listing=True, param=[], progress=True)),
    ("pipeline", ["pipeline.yaml", "--out", "runs/pipe", "--no-progress"], dict(config="pipeline.yaml", out="runs/pipe", progress=False)),
    ("pipeline", ["--example"], dict(config=None, example=True)),
    ("fake-llm-server", ["--port", "0", "--faults", "429,timeout", "--error-rate", "0.1"], dict(port=0, faults="429,timeout", error_rate=0.1)),
    ("demo", ["--out", "runs/demo", "--gen-llm", "local", "--n", "3"], dict(out="runs/demo", gen_llm="local", n=3, llm=None)),
]


@pytest.mark.parametrize("name,argv,expected", TABLE)
def test_command_lines_parse_to_keyword_arguments(name, argv, expected):
    got = parse_command(_resolve_command(name), argv)
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_works(name, capsys):
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ragbench {name}") and _resolve_command(name).__doc__.split()[0] in out


def test_usage_error_exits_2(capsys):
    assert main(["triad", "--db", "d"]) == 2
    assert "the following arguments are required: --out" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["search", "--db", "{tmp}/nope", "q"], "ragbench search: no LanceDB database at {tmp}/nope"),
    (["index", "{tmp}/missing", "--db", "{tmp}/db", "--embedder", "hash"], "ragbench index: {tmp}/missing: no such file or folder"),
    (["triad", "--db", "{tmp}/db", "--out", "{tmp}/o", "--n", "2", "--n-chunks", "9"], "ragbench triad: --n-chunks: "),
    (["dora", "--db", "{tmp}/db", "--out", "{tmp}/o", "--per-style", "1", "--split", "train,test"], "ragbench dora: --split train,test needs --test-docs FILE"),
    (["evaluate", "--dataset", "{tmp}/ds.jsonl", "--out", "{tmp}/e"], "ragbench evaluate: give --setups FILE and/or --answers FILE"),
    (["compare", "{tmp}/a", "{tmp}/b"], "ragbench compare: "),
    (["static", "--format", "musique", "{tmp}/none.json", "--db", "{tmp}/db", "--out", "{tmp}/m.jsonl"], "ragbench static: question file not found"),
    (["export-ragas", "--dataset", "d", "--db", "{tmp}/db", "--out", "x.jsonl", "--setup", "s"], "ragbench export-ragas: --scores and --setup go together"),
    (["report", "{tmp}/nope"], "ragbench report: "),
    (["run"], "ragbench run: a notebook is required"),
    (["run", "no-such-notebook"], "ragbench run: no notebook named 'no-such-notebook'"),
    (["pipeline", "{tmp}/missing.yaml"], "ragbench pipeline: {tmp}/missing.yaml: config file not found"),
    (["fake-llm-server", "--error-rate", "1.5"], "ragbench fake-llm-server: error_rate must be in [0, 1]"),
])
def test_user_error_prints_one_line_and_exits_2(argv, message, tmp_path, capsys):
    "A UserError from any command: `ragbench NAME: message` on stderr, exit status 2, no traceback."
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message.replace("{tmp}", str(tmp_path))) and "Traceback" not in err, err


def test_as_a_program(tmp_path):
    "`python -m ragbench.cli` (what the `ragbench` script runs): the exit status and one message on stderr."
    r = subprocess.run([sys.executable, "-m", "ragbench.cli", "search", "--db", str(tmp_path / "nope"), "q"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("ragbench search: ") and r.stderr.count("\n") == 1, r.stderr


def test_top_level_help_imports_no_stage_module():
    code = ("import sys; from ragbench.cli import main; main(['--help']); "
            "print(sorted(m for m in sys.modules if m.startswith(('ragbench', 'pydantic', 'lancedb', 'torch', 'pandas', 'numpy'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.splitlines()[-1] == "['ragbench', 'ragbench.cli']"
    assert "subcommands:" in out and all(name in out for name in COMMANDS)


def test_demo_takes_its_options_from_a_config_file(tmp_path, monkeypatch, capsys):
    "issue 18: `ragbench demo --config FILE` reads its options from the file; a flag given wins (the job is stubbed)."
    import ragbench.commands.demo
    seen = {}
    def run_demo(out, **kw):
        seen.update(out=out, **kw)
        return {"dataset": f"{out}/triad/dataset.jsonl", "report": f"{out}/report.html"}
    monkeypatch.setattr(ragbench.commands.demo, "run_demo", run_demo)
    conf = tmp_path / "demo.yaml"
    conf.write_text("out: runs/from-file\nn: 3\nmax-docs: 4\ngen_llm: template\n")
    assert main(["demo", "--config", str(conf), "--n", "1"]) == 0
    assert {k: seen[k] for k in ("out", "n_questions", "max_docs", "max_seeds", "gen_spec", "llm_spec")} == \
        dict(out="runs/from-file", n_questions=1, max_docs=4, max_seeds=12, gen_spec="template", llm_spec=None)
    assert capsys.readouterr().out.splitlines()[-2:] == ["dataset: runs/from-file/triad/dataset.jsonl",
                                                          "report: runs/from-file/report.html"]
