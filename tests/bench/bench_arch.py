"""Architecture figures for the house plan: modules, import cycles, private imports, exported cell sizes.

Run: python tests/bench/bench_arch.py   (prints figures; asserts nothing)
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

if __name__ == "__main__":
    f = figures()
    print(json.dumps({**f, "private_imports": len(f["private_imports"])}, indent=1))
    for p in f["private_imports"]: print("  private:", p)
