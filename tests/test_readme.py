"""README.md is rendered from nbs/index.ipynb; this test keeps them in step.

Regenerate with: python tests/test_readme.py --write
"""
import json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render_readme(nb_path: Path = ROOT / "nbs" / "index.ipynb") -> str:
    "Markdown of index.ipynb: markdown cells as they are, code cells (minus #| directives) as python blocks."
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
    return "\n\n".join(parts) + "\n"


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
    assert "torch==2.13.0" in tests and "pytest" in tests and "nbdev_test" in tests
    assert main_job.count("\n") == 0 and tests.count("\n") == 0, "each must be one command"


if __name__ == "__main__" and "--write" in sys.argv:
    (ROOT / "README.md").write_text(render_readme())
    print("README.md written")
