"""Kernels started by ragbench (papermill) and by JupyterLab with the shipped server config get CurveZMQ keys, so ipykernel's
"Kernel is running over TCP without encryption" warning is gone — fixed at its cause (the kernel transport), not by
hiding stderr. (The JupyterLab side is checked in tests/test_notebooks_in_lab.py, which reads the server log.)"""
import json, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARNING = "without encryption"


def test_ragbench_run_kernels_are_encrypted(tmp_path):
    script = Path(sys.executable).with_name("ragbench")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "ragbench.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT)] + sys.path)}
    p = subprocess.run(cli + ["run", "review_queue", "--out", str(tmp_path / "out"), "--no-progress"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert WARNING not in p.stderr + p.stdout, p.stderr[-2000:]


def test_the_shipped_jupyter_server_config(tmp_path):
    "The package enables its server extension, whose link hook sets KernelManager.transport_encryption before kernels start."
    cfg = json.loads((ROOT / "jupyter-config" / "jupyter_server_config.d" / "ragbench.json").read_text())
    assert cfg == {"ServerApp": {"jpserver_extensions": {"ragbench.jupyter": True}}}
    setup = (ROOT / "setup.py").read_text()
    assert "etc/jupyter/jupyter_server_config.d" in setup and "jupyter-config/jupyter_server_config.d/ragbench.json" in setup
    from jupyter_client.kernelspec import KernelSpecManager
    spec = KernelSpecManager().get_kernel_spec("python3")       # "auto" applies where the kernelspec declares curve
    assert "curve" in spec.metadata.get("supported_encryption", [])
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter-config"), "JUPYTER_CONFIG_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + sys.path)}
    p = subprocess.run([sys.executable, "-m", "jupyterlab", "--show-config"], capture_output=True, text=True, env=env, timeout=120)
    assert "ragbench.jupyter | extension was successfully linked" in p.stderr + p.stdout, p.stderr[-2000:]
    assert "transport_encryption = 'auto'" in p.stdout
