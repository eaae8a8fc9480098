"""Ray is optional: production modules import no Ray, and `--ray` without the extra is a clear error (exit 2) that
names the install command, before anything is written. Runs without Ray installed (Ray is hidden here either way)."""
import os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HIDE_RAY = "import sys; sys.modules['ray'] = None\n"     # what Python sees when ray is not installed


def _py(code: str, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_no_module_imports_ray():
    r = _py("import sys, ragbench.scale, ragbench.index, ragbench.gen.base, ragbench.pipeline, ragbench.cli\n"
            "print('ray' in sys.modules)")
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def test_ray_option_without_the_extra_names_the_install(tmp_path):
    code = HIDE_RAY + (f"from ragbench.cli import main; from ragbench.corpus import sample_corpus_path\n"
                       f"sys.exit(main(['index', str(sample_corpus_path()), '--db', r'{tmp_path / 'db'}', '--embedder', 'hash', '--ray', 'local']))")
    r = _py(code)
    assert r.returncode == 2, r.stderr
    assert 'pip install -e ".[ray]"' in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "db").exists()                                   # nothing written


def test_the_environment_variable_selects_ray_too(tmp_path):
    code = HIDE_RAY + (f"from ragbench.cli import main; from ragbench.corpus import sample_corpus_path\n"
                       f"sys.exit(main(['index', str(sample_corpus_path()), '--db', r'{tmp_path / 'db'}', '--embedder', 'hash']))")
    r = _py(code, RAGBENCH_RAY_ADDRESS="auto")
    assert r.returncode == 2 and 'pip install -e ".[ray]"' in r.stderr, r.stderr
