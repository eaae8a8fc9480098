"""The house plan, enforced: no import cycle, no reaching into another module's private names, test doubles
apart from production code, notebooks numbered so none imports a later one, and notebooks that open in
JupyterLab without asking for a kernel."""
import json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_arch import find_cycles, import_edges, module_trees  # noqa: E402

MODS = module_trees(ROOT / "ragbench")
EDGES, PRIVATE = import_edges(MODS)


def test_no_import_cycle():
    assert find_cycles(EDGES) == []


def test_no_private_imports_across_modules():
    assert PRIVATE == []


def test_production_never_imports_the_test_doubles():
    bad = [f"{m} -> {t}" for m, ts in EDGES.items() if not m.startswith("ragbench.testing")
           for t in ts if t.startswith("ragbench.testing")]
    assert bad == []


def _exporting_notebooks() -> dict:
    "Module name -> (notebook number, notebook path) for every notebook with a default_exp."
    out = {}
    for p in sorted((ROOT / "nbs").glob("*.ipynb")):
        m = re.match(r"(\d+)", p.name)
        for c in json.loads(p.read_text())["cells"]:
            e = re.search(r"^#\|\s*default_exp\s+(\S+)", "".join(c["source"]), re.M)
            if e and m:
                name = "ragbench." + e.group(1).removesuffix(".__init__")
                out[name] = (int(m.group(1)), p.name)
                break
    return out


def test_no_notebook_imports_a_later_one():
    owners = _exporting_notebooks()
    late = []
    for mod, (num, nb) in owners.items():
        src = "\n".join("".join(c["source"]) for c in json.loads((ROOT / "nbs" / nb).read_text())["cells"]
                        if c["cell_type"] == "code")
        for used in set(re.findall(r"(?:from|import)\s+(ragbench(?:\.\w+)*)", src)):
            while used not in owners and "." in used: used = used.rsplit(".", 1)[0]
            if used in owners and owners[used][0] > num: late.append(f"{nb} imports {used} ({owners[used][1]})")
    assert late == []


def test_notebooks_carry_a_kernelspec_and_no_editor_metadata():
    bad = []
    for p in sorted((ROOT / "nbs").rglob("*.ipynb")):
        meta = json.loads(p.read_text()).get("metadata", {})
        if meta.get("kernelspec", {}).get("name") != "python3" or "jupytext" in meta: bad.append(str(p.relative_to(ROOT)))
    assert bad == []
