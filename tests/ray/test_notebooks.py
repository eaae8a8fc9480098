"""The Ray cells (`#| ray`) of the 18_scale notebooks, run by nbdev_test on the suite's cluster (they join it through
RAGBENCH_RAY_ADDRESS instead of starting their own)."""
import os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_scale_notebooks_run_on_the_cluster(cluster):
    env = {**os.environ, "RAGBENCH_RAY_ADDRESS": cluster, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([str(Path(sys.executable).parent / "nbdev_test"), "--flags", "ray", "--n_workers", "1",
                        "--path", "nbs", "--file_re", r"18_scale.*\.ipynb"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
