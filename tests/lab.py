"""A real JupyterLab for browser tests: a server on 127.0.0.1 with fresh config, settings and workspaces, driven by
Debian's /usr/bin/chromium through Playwright (no browser is downloaded).

Used by tests/test_browser.py (the widgets) and tests/test_notebooks_in_lab.py (Run All on every notebook).
A missing Chromium or playwright package fails the test, never skips it."""
import json, os, secrets, signal, socket, subprocess, sys, time, urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("RAGBENCH_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
# settings a fresh user would not have, set so the tests do not depend on them: no news, no autosave (Run All must not
# write outputs into the source notebooks), every cell rendered (widgets below the fold are in the DOM)
SETTINGS = {"apputils-extension/notification": {"fetchNews": "false"},
            "docmanager-extension/plugin": {"autosave": False},
            "notebook-extension/tracker": {"windowingMode": "none"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def wait_for(cond, timeout, what, step=0.25):
    "Poll `cond` until it returns something truthy; fail naming `what` after `timeout` seconds."
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v: return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def need_browser():
    "The playwright module; fails (not skips) when Chromium or playwright is missing."
    assert Path(CHROMIUM).exists(), f"Chromium not found at {CHROMIUM}: install Debian's chromium (apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install playwright (no browser download is needed)")
    return sync_playwright


@contextmanager
def jupyterlab(tmp_path: Path, root: Path):
    "A JupyterLab server serving `root`; yields {url, token, root, log}. The repository's jupyter-config is on the path."
    token = secrets.token_hex(16); port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter-config"),
           "IPYTHONDIR": str(tmp_path / "ipython"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    env.pop("RAGBENCH_HEADLESS", None)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--IdentityProvider.token={token}", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}",
           "--ServerApp.open_browser=False", "--LabApp.expose_app_in_browser=True",
           f"--LabApp.user_settings_dir={tmp_path / 'settings'}", f"--LabApp.workspaces_dir={tmp_path / 'ws'}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.news_url=None",
           f"--FileCheckpoints.root_dir={tmp_path / 'checkpoints'}"]   # opening a notebook writes no checkpoint beside it
    if os.geteuid() == 0: cmd.append("--allow-root")
    for name, value in SETTINGS.items():
        ext, plugin = name.split("/")
        d = tmp_path / "settings" / "@jupyterlab" / ext; d.mkdir(parents=True, exist_ok=True)
        (d / f"{plugin}.jupyterlab-settings").write_text(json.dumps(value))
    log_path = tmp_path / "lab.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    def up():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try: return urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2).status == 200
        except OSError: return False
    try:
        wait_for(up, 120, "JupyterLab to start")
        yield {"url": url, "token": token, "root": root, "log": log_path}
    finally:
        proc.send_signal(signal.SIGTERM)
        try: proc.wait(30)
        except subprocess.TimeoutExpired: os.killpg(proc.pid, signal.SIGKILL); proc.wait()
        log.close()


def open_lab(page, lab, path: str = "", workspace: str = "default"):
    "Load JupyterLab in `page` (optionally opening `path`) and wait until the app is ready."
    tail = f"/tree/{path}" if path else ""
    page.goto(f"{lab['url']}/lab/workspaces/{workspace}{tail}?token={lab['token']}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started !== undefined", timeout=120_000)
    page.evaluate("() => window.jupyterapp.started")
    page.wait_for_function("() => window.jupyterapp.shell && window.jupyterapp.serviceManager.isReady", timeout=120_000)


# JavaScript: open a notebook, start its kernel, Run All, and report every cell's outcome; the kernel is shut down and the
# notebook closed without saving whatever happens.
RUN_NOTEBOOK_JS = """
async ([path, timeoutMs]) => {
  const app = window.jupyterapp;
  const t0 = performance.now();
  const panel = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  const report = {path, cells: [], timedOut: false};
  try {
    await panel.context.ready;
    await panel.sessionContext.ready;
    const deadline = new Promise(res => setTimeout(() => res('timeout'), timeoutMs));
    while (!panel.sessionContext.session || !panel.sessionContext.session.kernel) {
      if (performance.now() - t0 > timeoutMs) throw new Error('no kernel started for ' + path);
      await new Promise(r => setTimeout(r, 100));
    }
    app.shell.activateById(panel.id);
    const run = app.commands.execute('notebook:run-all-cells');
    report.timedOut = (await Promise.race([run, deadline])) === 'timeout';
    const cells = panel.content.model.cells;
    for (let i = 0; i < cells.length; i++) {
      const c = cells.get(i);
      if (c.type !== 'code') continue;
      const outs = c.outputs.toJSON();
      report.cells.push({index: i, source: c.sharedModel.getSource().slice(0, 200), count: c.executionCount,
        errors: outs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
        stderr: outs.filter(o => o.output_type === 'stream' && o.name === 'stderr').map(o => o.text).join('').slice(0, 2000)});
    }
  } finally {
    report.seconds = (performance.now() - t0) / 1000;
    try { await panel.sessionContext.shutdown(); } catch (e) {}
    panel.context.model.dirty = false;
    panel.dispose();
  }
  return report;
}
"""


def run_notebook(page, path: str, timeout_s: float) -> dict:
    "Run All on the notebook at `path` (relative to the server root) in an open Lab page; returns the report."
    return page.evaluate(RUN_NOTEBOOK_JS, [path, int(timeout_s * 1000)])


def problems(report: dict) -> list[str]:
    "What went wrong in a Run All report: error outputs, cells never run, a timeout."
    out = [f"cell {c['index']}: {e}" for c in report["cells"] for e in c["errors"]]
    if report["timedOut"]: out.append(f"did not finish within the time limit ({report['seconds']:.0f} s)")
    elif not out:
        skipped = [c["index"] for c in report["cells"] if c["count"] is None and c["source"].strip()]
        if skipped: out.append(f"cells never run: {skipped}")
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    "One JupyterLab for the test module, serving a fresh folder (import it into a browser test module to use it)."
    tmp = tmp_path_factory.mktemp("lab"); root = tmp / "root"; root.mkdir()
    with jupyterlab(tmp, root) as server: yield server


@pytest.fixture(scope="module")
def browser():
    "One headless Chromium for the test module."
    sync_playwright = need_browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()
