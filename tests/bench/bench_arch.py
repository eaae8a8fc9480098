"""Architecture figures for the house plan: modules, import cycles, private imports, exported cell sizes.

Run: python tests/bench/bench_arch.py [--house | --thin]   (prints figures; asserts nothing; --house adds the issue-18
table, --thin prints issue 38's done-when figures alone)
"""
import ast, json, re, statistics, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

def module_trees(pkg: Path = ROOT / "ragbench") -> dict:
    "Parsed modules of the package by dotted name (without _modidx)."
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        if p.name == "_modidx.py": continue
        parts = p.relative_to(pkg.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(p.read_text())
    return out

def import_edges(mods: dict) -> tuple[dict, list]:
    "Internal import edges (any depth, functions included) and imports of another module's _private names."
    edges, private = {m: set() for m in mods}, []
    for m, tree in mods.items():
        pkg_parts = m.split(".") if m in mods and any(k.startswith(m + ".") for k in mods) else m.split(".")[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.name != m: edges[m].add(a.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg_parts[: len(pkg_parts) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else: target = node.module or ""
                for cand in [target] + [f"{target}.{a.name}" for a in node.names]:
                    if cand in mods and cand != m: edges[m].add(cand)
                if target in mods and target != m:
                    private += [f"{m} imports {target}.{a.name}" for a in node.names
                                if a.name.startswith("_") and not a.name.startswith("__")]
    return edges, private

_REGISTRY_STRING = re.compile(r"^(ragbench(?:\.\w+)*):\w+$")

def _string_target(node, mods: dict):
    "The module a string import names: `import_module('m')` / `importlib.import_module('m')`, or a `'m:attr'` string."
    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
        arg = node.args[0] if node.args else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str): return arg.value
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := _REGISTRY_STRING.match(node.value)):
        return m.group(1)
    return None

def _listed_modules(node, mods: dict) -> list[str]:
    "Module names written as elements of a list / tuple / set literal (a plugin list such as `['ragbench.triad', ...]`)."
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set)): return []
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str) and "." in e.value and e.value in mods]

def string_edges(mods: dict) -> dict:
    "Imports hidden in strings: `import_module(...)` calls, `'module:attr'` registry strings, listed module names."
    edges = {m: set() for m in mods}
    for m, tree in mods.items():
        for node in ast.walk(tree):
            for t in [_string_target(node, mods), *_listed_modules(node, mods)]:
                while t and t not in mods and "." in t: t = t.rsplit(".", 1)[0]
                if t in mods and t != m: edges[m].add(t)
    return edges

def all_edges(mods: dict) -> dict:
    "Import edges counting string imports too."
    static, strings = import_edges(mods)[0], string_edges(mods)
    return {m: static[m] | strings[m] for m in mods}

def production_testing_edges(edges: dict) -> list[str]:
    "Production modules that import (or name) the test doubles."
    return sorted(f"{m} -> {t}" for m, ts in edges.items() if not m.startswith("ragbench.testing")
                  for t in ts if t.startswith("ragbench.testing"))

def find_cycles(edges: dict) -> list:
    "Strongly connected components with more than one module (Tarjan)."
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index: visit(v)
    return out

def exported_cell_sizes(nbs: Path = ROOT / "nbs") -> list[int]:
    "Non-blank line counts of every exported cell (#| export / #| exporti / #| exports) in the notebooks."
    sizes = []
    for p in sorted(nbs.rglob("*.ipynb")):
        for c in json.loads(p.read_text())["cells"]:
            if c["cell_type"] != "code": continue
            src = "".join(c["source"]).splitlines()
            if not any(l.strip().startswith(("#| export", "#|export")) for l in src): continue
            sizes.append(sum(1 for l in src if l.strip() and not l.strip().startswith("#|")))
    return sizes

def figures() -> dict:
    mods = module_trees()
    edges, private = import_edges(mods)
    sizes = sorted(exported_cell_sizes())
    p90 = sizes[int(0.9 * (len(sizes) - 1))] if sizes else 0
    strings, every = string_edges(mods), all_edges(mods)
    return {"modules": len(mods), "cycles": find_cycles(edges), "cycles_counting_string_imports": find_cycles(every),
            "string_imports": sorted(f"{m} -> {t}" for m, ts in strings.items() for t in ts),
            "production_to_testing": production_testing_edges(every), "private_imports": private,
            "exported_cells": len(sizes), "median_cell_lines": statistics.median(sizes) if sizes else 0,
            "p90_cell_lines": p90, "cells_over_50": sum(s > 50 for s in sizes)}

def command_lines() -> dict:
    "Lines of each CLI command's function: {command: (whole function, body without signature and docstring)}."
    from ragbench.cli import COMMANDS
    out = {}
    for name, cmd in COMMANDS.items():
        mod, fn = cmd.target.split(":")
        path = ROOT / (mod.replace(".", "/") + ".py")
        node = next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef) and n.name == fn)
        body = node.body[1:] if ast.get_docstring(node) else node.body
        out[name] = (node.end_lineno - node.lineno + 1, node.end_lineno - body[0].lineno + 1)
    return out

CONFIGS = {"triad": "ragbench.triad.config:TriadConfig", "dora": "ragbench.dora.run:DoraConfig",
           "check": "ragbench.triad.checks:CheckConfig",
           # options models (issue 18), in ragbench.commands since issue 38 (the old home after `|`, for an older tree)
           "index": "ragbench.commands.index:IndexOptions|ragbench.spine", "search": "ragbench.commands.index:SearchOptions|ragbench.spine",
           "evaluate": "ragbench.commands.evaluate:EvaluateOptions|ragbench.eval.run",
           "compare": "ragbench.commands.compare:CompareOptions|ragbench.eval.paired",
           "plan": "ragbench.commands.compare:PlanOptions|ragbench.eval.paired",
           "run": "ragbench.commands.run:RunNotebookOptions|ragbench.papermill", "demo": "ragbench.commands.demo:DemoOptions|ragbench.demo",
           "report": "ragbench.commands.report:ReportOptions|ragbench.report.html",
           "static": "ragbench.commands.static:StaticOptions|ragbench.benchmarks",
           "refresh": "ragbench.commands.refresh:RefreshOptions|ragbench.dora.refresh",
           "qualify": "ragbench.commands.triad:QualifyOptions|ragbench.triad.qualify",
           "export-ragas": "ragbench.commands.export:ExportRagasOptions|ragbench.eval.export",
           "validity": "ragbench.commands.validity:ValidityOptions|ragbench.eval.validity"}

def _command_parser():
    "The flag generator: `ragbench.commands.options` (issue 38), `ragbench.cli` in an older tree."
    try: from ragbench.commands.options import command_parser
    except ImportError: from ragbench.cli import command_parser
    return command_parser

def _model(target: str):
    "The class a CONFIGS target names (`module:Class|older_module`: the first module that has it)."
    import importlib
    mods, cls = target.split(":")[0], target.split(":")[1].split("|")[0]
    for mod in [mods] + target.split("|")[1:]:
        try: return getattr(importlib.import_module(mod), cls)
        except (ImportError, AttributeError): continue
    raise AttributeError(cls)

def cli_settable() -> dict:
    "Per command with a config model: (fields with a flag of their own, all fields, whether it takes --config FILE)."
    from ragbench.cli import _resolve_command
    command_parser, out = _command_parser(), {}
    for cmd, target in CONFIGS.items():
        try: fields, acts = set(_model(target).model_fields), command_parser(_resolve_command(cmd))._actions
        except (ImportError, AttributeError, KeyError): continue     # (an older tree, run with --house on its checkout)
        dests, flags = {a.dest for a in acts}, {f for a in acts for f in a.option_strings}
        out[cmd] = (len(fields & dests), len(fields), "--config" in flags)
    return out

def commands_with_config() -> list[str]:
    "The subcommands that take `--config FILE` (their options, or their method's config, from a YAML/JSON file)."
    from ragbench.cli import COMMANDS, _resolve_command
    command_parser = _command_parser()
    return [c for c in COMMANDS if "--config" in {f for a in command_parser(_resolve_command(c))._actions for f in a.option_strings}
            or c == "pipeline"]                                   # pipeline's positional is its config file

def executors_and_runners(mods: dict) -> dict:
    "Executors (classes with an `async def run(self, tasks, work, commit, wanted)`), runners (a function or class that takes a run's lock and drives its tasks) and the functions that open the runner `TaskRun`."
    execs, own, users = [], [], []
    def executor_of(fn, cls=None):
        "The class an `async run(self, tasks, work, commit, wanted)` belongs to (its class, or `self: C` under fastcore's @patch)."
        if not (isinstance(fn, ast.AsyncFunctionDef) and fn.name == "run"): return None
        if [a.arg for a in fn.args.args[1:5]] != ["tasks", "work", "commit", "wanted"]: return None
        ann = fn.args.args[0].annotation
        return cls or (ann.id if isinstance(ann, ast.Name) else None)
    def called(node) -> set:
        "The names a node calls."
        return {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "") for n in ast.walk(node) if isinstance(n, ast.Call)}
    for m, tree in mods.items():
        in_runner = set()
        for node in ast.walk(tree):
            for fn, cls in ([(b, node.name) for b in node.body] if isinstance(node, ast.ClassDef) else [(node, None)]):
                if (c := executor_of(fn, cls)): execs.append(f"{m}.{c}")
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or node in in_runner: continue
            names = called(node)
            if names & {"RunLock", "table_lock"} and names & {"TaskJournal", "run", "score_plan", "add", "sync", "_write_pending"}:
                own.append(f"{m}.{node.name}"); in_runner.update(ast.walk(node))
            elif "TaskRun" in names and not isinstance(node, ast.ClassDef): users.append(f"{m}.{node.name}")
    return {"executors": sorted(set(execs) - set(own)), "runners": sorted(set(own)), "runner_users": sorted(set(users))}

def registries(mods: dict) -> list[str]:
    "Module-level `Registry(...)` instances."
    return sorted(f"{m}.{t.id}" for m, tree in mods.items() for node in tree.body if isinstance(node, ast.Assign)
                  and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "Registry"
                  for t in node.targets if isinstance(t, ast.Name))

def line_figures(src: str) -> tuple[int, int, int]:
    "(lines, lines over 120 characters, statements chained with `;`) of Python source (`;` not counted when it does not tokenize)."
    import io, tokenize
    ls = src.splitlines()
    try: semis = sum(t.type == tokenize.OP and t.string == ";" for t in tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError): semis = 0
    return len(ls), sum(len(l) > 120 for l in ls), semis

def library_lines(pkg: Path = ROOT / "ragbench") -> dict:
    "Lines of the exported library over 120 characters, and statements chained with `;`."
    lines, long, chained = map(sum, zip(*(line_figures(p.read_text()) for p in sorted(pkg.rglob("*.py")) if p.name != "_modidx.py")))
    return {"library_lines": lines, "library_over_120": long, "library_share_over_120": round(long / lines, 4), "library_semicolons": chained}

def notebook_figures(nbs: Path = ROOT / "nbs") -> dict:
    "Saved outputs (code cells with one, notebooks with none) and code lines over 120 characters or chaining statements with `;`."
    cells = with_out = lines = long = chained = 0; none = []
    for p in sorted(nbs.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in p.parts: continue
        code = [c for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code"]
        n_out = sum(bool(c.get("outputs")) for c in code); cells += len(code); with_out += n_out
        if code and not n_out: none.append(str(p.relative_to(nbs)))
        for c in code:
            n, over, semis = line_figures("".join(c["source"])); lines += n; long += over; chained += semis
    return {"code_cells": cells, "with_output": with_out, "output_share": round(with_out / cells, 3), "notebooks_without_output": none,
            "code_lines": lines, "lines_over_120": long, "share_over_120": round(long / lines, 4), "semicolons": chained}

def house_figures() -> dict:
    "The issue-18 table: cycles counting string imports, command lengths, CLI-settable config fields, runners, registries, notebooks."
    mods = module_trees()
    return {"cycles_counting_string_imports": len(find_cycles(all_edges(mods))),
            "production_to_testing": len(production_testing_edges(all_edges(mods))),
            "command_lines": command_lines(), "cli_settable": cli_settable(),
            "commands_with_config": commands_with_config(), **executors_and_runners(mods),
            "registries": registries(mods), **library_lines(), **notebook_figures()}

def thin_figures() -> dict:
    "Issue 38's done-when, counted: the ratchet's figures, later imports by file name, runs opened by hand, notebook cells."
    sys.path.insert(0, str(ROOT / "tests"))
    import test_architecture as arch, test_teaching as teach
    trees = {str(p.relative_to(ROOT / "ragbench")): ast.parse(p.read_text())
             for p in sorted((ROOT / "ragbench").rglob("*.py")) if p.name != "_modidx.py"}
    return {**arch.house_figures(), "library_lines": library_lines()["library_lines"],
            "later_imports_by_file_name": len(arch.later_imports(arch._exporting_notebooks(), arch.ALL_EDGES)),
            "opened_outside_the_spine": len(arch.spine_calls(trees)), **teach.notebook_cell_figures()}

if __name__ == "__main__":
    if "--thin" in sys.argv: print(json.dumps(thin_figures(), indent=1)); sys.exit(0)
    f = figures()
    print(json.dumps({**f, "private_imports": len(f["private_imports"])}, indent=1))
    for p in f["private_imports"]: print("  private:", p)
    if "--house" in sys.argv: print(json.dumps(house_figures(), indent=1))
