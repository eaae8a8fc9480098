"""Issue 18, "one run spine": figures before -> after, measured on a source tree (default: this checkout).

    python tests/bench/bench_spine.py [--root DIR]     # DIR holds a `ragbench` package (e.g. `git archive main ragbench`)

Prints JSON: lines of each `*_command` function (and `evaluate`), with and without its signature; the share of each
config model's fields a flag sets (and a flag or --config FILE); the places that build LLMs from specs (`make_llm(`
outside the LLM layer and the test doubles) and that choose an executor (`$RAGBENCH_RAY_ADDRESS` / `ray_address(` /
Ray adapters reached outside `ragbench.scale`); string imports of `ragbench.scale` (`import_module("ragbench.scale...")`).
"""
import argparse, ast, inspect, json, sys
from pathlib import Path


def _calls(tree, pred):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and pred(n)]


def _name(f):
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def static_counts(pkg: Path) -> dict:
    "Call sites in production modules (not ragbench/llm, ragbench/testing, ragbench/scale)."
    llm_sites, executor_sites, string_imports = [], [], []
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(pkg.parent).as_posix()
        if rel.endswith("_modidx.py"): continue
        tree = ast.parse(p.read_text())
        for c in _calls(tree, lambda n: _name(n.func) == "import_module"):
            if c.args and isinstance(c.args[0], ast.Constant) and str(c.args[0].value).startswith("ragbench.scale"):
                string_imports.append(f"{rel}:{c.lineno}")
        if rel.startswith(("ragbench/llm/", "ragbench/testing/", "ragbench/scale/")): continue
        llm_sites += [f"{rel}:{c.lineno}" for c in _calls(tree, lambda n: _name(n.func) == "make_llm")]
        env = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == "RAGBENCH_RAY_ADDRESS"]
        look = _calls(tree, lambda n: _name(n.func) == "ray_address")
        executor_sites += [f"{rel}:{n.lineno}" for n in env + look]
    return {"llm_building_sites": llm_sites, "executor_choosing_sites": sorted(set(executor_sites)),
            "string_imports_of_scale": string_imports}


def command_lines() -> dict:
    "Lines of each command function in COMMANDS, and of evaluate(): (all, body without the signature)."
    from ragbench.cli import COMMANDS, _resolve_command
    from ragbench.eval.run import evaluate
    out = {}
    for name in COMMANDS:
        f = _resolve_command(name)
        src = inspect.getsource(f)
        fn = ast.parse(src).body[0]
        body_start = fn.body[0].lineno
        out[name] = {"lines": len(src.rstrip().splitlines()), "body": fn.end_lineno - body_start + 1}
    src = inspect.getsource(evaluate); fn = ast.parse(src).body[0]
    out["evaluate()"] = {"lines": len(src.rstrip().splitlines()), "body": fn.end_lineno - fn.body[0].lineno + 1}
    return out


EVAL_OPTIONS = ("db", "modes", "judge_llm", "default_llm", "judges", "bertscore", "bertscore_model", "ks", "seed",
                "batch_size", "concurrency", "max_calls", "progress", "ray")   # evaluate()'s keyword settings
EVAL_FLAG = {"default_llm": "llm", "progress": "quiet"}                           # their flag's name where it differs


def settable() -> dict:
    "Per config: fields set by a flag, and by a flag or --config FILE, of all its fields."
    from ragbench.cli import _resolve_command
    from ragbench.commands.options import command_parser
    from ragbench.triad.config import TriadConfig
    from ragbench.dora.run import DoraConfig
    res = {}
    for cmd, model, via in (("triad", TriadConfig, {"seeds": "seeds_file"}), ("dora", DoraConfig, {}),
                            ("evaluate", None, EVAL_FLAG)):
        dests = {a.dest for a in command_parser(_resolve_command(cmd))._actions}
        fields = list(model.model_fields) if model else list(EVAL_OPTIONS)
        by_flag = [f for f in fields if via.get(f, f) in dests]
        has_file = "config" in dests
        res[cmd] = {"fields": len(fields), "by_flag": len(by_flag), "by_flag_or_file": len(fields) if has_file else len(by_flag),
                    "not_by_flag": [f for f in fields if f not in by_flag]}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    root = Path(ap.parse_args().root).resolve()
    sys.path.insert(0, str(root))
    import ragbench
    assert Path(ragbench.__file__).resolve().parent == root / "ragbench", ragbench.__file__
    print(json.dumps({"root": str(root), **static_counts(root / "ragbench"), "commands": command_lines(),
                      "settable": settable()}, indent=1))


if __name__ == "__main__":
    main()
