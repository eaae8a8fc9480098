"""The notebooks are the source: ragbench/*.py must be exactly what nbdev_export writes, and the
notebooks must be clean (what nbdev_clean leaves)."""
import shutil, subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _copy_project(dest: Path) -> Path:
    "Copy settings, notebooks and library into dest (no venv, no runs)."
    for name in ("settings.ini", "setup.py"):
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "nbs", dest / "nbs", ignore=shutil.ignore_patterns(".ipynb_checkpoints", "_*"))
    shutil.copytree(ROOT / "ragbench", dest / "ragbench", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _py_files(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_text() for p in (root / "ragbench").rglob("*.py")}


def test_library_matches_nbdev_export(tmp_path):
    proj = _copy_project(tmp_path)
    subprocess.run(["nbdev_export"], cwd=proj, check=True, capture_output=True)
    exported, committed = _py_files(proj), _py_files(ROOT)
    stale = sorted(k for k in exported if committed.get(k) != exported[k])
    assert not stale, f"ragbench/ differs from nbdev_export (edit the notebook, then run nbdev_export): {stale}"


def test_notebooks_are_clean(tmp_path):
    proj = _copy_project(tmp_path)
    subprocess.run(["nbdev_clean"], cwd=proj, check=True, capture_output=True)
    dirty = sorted(p.relative_to(proj).as_posix() for p in (proj / "nbs").rglob("*.ipynb")
                   if p.read_bytes() != (ROOT / p.relative_to(proj)).read_bytes())
    assert not dirty, f"notebooks not clean (run nbdev_clean): {dirty}"
