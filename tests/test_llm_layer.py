"""The LLM layer's import rules: production code never imports the test doubles (imports inside functions
count), and the parts of `ragbench.llm` import each other directly, never through the package."""
import ast, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "ragbench"


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    "(line, absolute module name) of every import in `path`, at any depth (functions included)."
    mod = _module_of(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names: yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            yield node.lineno, base
            for a in node.names: yield node.lineno, f"{base}.{a.name}"


def _production_files():
    return [p for p in PKG.rglob("*.py") if "testing" not in p.relative_to(PKG).parts and p.name != "_modidx.py"]


def test_production_code_never_imports_the_test_doubles():
    bad = [f"{p.relative_to(ROOT)}:{line} imports {name}" for p in _production_files()
           for line, name in _imports(p) if name == "ragbench.testing" or name.startswith("ragbench.testing.")]
    assert not bad, bad


def test_llm_parts_import_siblings_not_the_package():
    bad = [f"{p.relative_to(ROOT)}:{line} imports {name}" for p in (PKG / "llm").glob("*.py") if p.name != "__init__.py"
           for line, name in _imports(p) if name in ("ragbench.llm", "ragbench.llm.__init__")]
    assert not bad, bad


def test_importing_every_production_module_loads_no_test_double():
    mods = sorted(_module_of(p) for p in _production_files())
    code = ("import sys, importlib\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "loaded = [m for m in sys.modules if m.startswith('ragbench.testing')]\n"
            "assert not loaded, loaded\n"
            "from ragbench.llm import make_llm\n"
            "make_llm('fake', responder=['ok']).complete('x')\n"          # the registry reaches the fake by name, at run time
            "assert 'ragbench.testing.fake' in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]


def test_the_fake_server_command_is_still_shipped(capsys):
    from ragbench.cli import main
    assert main(["fake-llm-server", "--port", "0", "--duration", "0.05"]) == 0
    assert "fake LLM server on http://127.0.0.1:" in capsys.readouterr().out


def test_the_stand_in_reply_and_cache_key_do_not_depend_on_imported_stages():
    "A prompt outside TRIAD gets the same stand-in reply and cache key whether or not TRIAD's modules are imported."
    code = ("import json, sys\n"
            "if sys.argv[1] == 'triad': import ragbench.triad\n"
            "from ragbench.llm.template import TemplateBackend, template_reply\n"
            "from ragbench.prompts import PromptTemplate, format_chunks, register_prompt, render_prompt\n"
            "register_prompt(PromptTemplate('mine', None, 'Label each passage for {question}.\\n{chunks}'))\n"
            "ch = [('a', 'Paris', 'Paris is in France.'), ('b', 'Seine', 'The Seine flows.'), ('c', 'Loire', 'The Loire.')]\n"
            "schema = {'type': 'object', 'properties': {'question': {'type': 'string'}, 'labels': {'type': 'array', "
            "'items': {'type': 'object', 'properties': {'chunk_id': {'type': 'string'}, 'relevant': {'type': 'boolean'}}}}}}\n"
            "text = render_prompt('mine', question='rivers', chunks=format_chunks(ch))[1]\n"
            "print(json.dumps([TemplateBackend().cache_id, json.loads(template_reply(text, schema=schema))]))\n")
    run = lambda arg: subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, check=True).stdout
    assert run("none") == run("triad")
