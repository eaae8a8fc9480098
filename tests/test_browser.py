"""One real-browser test: JupyterLab on 127.0.0.1 with a fresh config, the review-queue notebook opened in
headless Chromium (Debian's /usr/bin/chromium driven by Playwright), cells run, one item accepted, one edited
and one rejected by keyboard shortcut; the decisions must be in the run directory.

Chromium is not downloaded: the test fails (not skips) when /usr/bin/chromium or playwright is missing.
Set RAGBENCH_BROWSER_SHOT=path.png to keep the screenshot."""
import json, os, shutil, signal, socket, subprocess, sys, time, secrets, urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("RAGBENCH_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def wait_for(cond, timeout, what, step=0.25):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v: return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def review_rows(run):
    p = run / "reviews.jsonl"
    return [json.loads(l) for l in p.read_text().splitlines()] if p.exists() else []


@pytest.fixture
def lab(tmp_path):
    "A JupyterLab server with fresh config/runtime/settings dirs, serving tmp_path/root."
    root = tmp_path / "root"; root.mkdir()
    token = secrets.token_hex(16); port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "IPYTHONDIR": str(tmp_path / "ipython"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    env.pop("RAGBENCH_HEADLESS", None)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--IdentityProvider.token={token}", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}",
           "--ServerApp.open_browser=False", "--LabApp.expose_app_in_browser=True",
           f"--LabApp.user_settings_dir={tmp_path / 'settings'}", f"--LabApp.workspaces_dir={tmp_path / 'ws'}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.news_url=None"]
    if os.geteuid() == 0: cmd.append("--allow-root")
    news = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"; news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    def up():
        assert proc.poll() is None, (tmp_path / "lab.log").read_text()[-3000:]
        try: return urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2).status == 200
        except OSError: return False
    try:
        wait_for(up, 120, "JupyterLab to start")
        yield {"url": url, "token": token, "root": root, "log": tmp_path / "lab.log"}
    finally:
        proc.send_signal(signal.SIGTERM)
        try: proc.wait(30)
        except subprocess.TimeoutExpired: os.killpg(proc.pid, signal.SIGKILL); proc.wait()
        log.close()


def test_review_queue_in_a_real_browser(lab, tmp_path):
    assert Path(CHROMIUM).exists(), f"Chromium not found at {CHROMIUM}: install Debian's chromium (apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install playwright (no browser download is needed)")
    import papermill as pm
    from ragbench.widgets import demo_run_dir
    run = demo_run_dir(tmp_path / "run")
    nb = lab["root"] / "review.ipynb"
    # the user-facing notebook with the run directory and reviewer filled in, as papermill would inject them
    pm.execute_notebook(str(ROOT / "nbs" / "61_review_queue.ipynb"), str(nb), parameters={"run_dir": str(run),
                        "reviewer": "browser-test"}, prepare_only=True, kernel_name="python3", language="python",
                        progress_bar=False)
    meta = json.loads(nb.read_text())   # name the kernel so JupyterLab starts it without asking
    meta["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.write_text(json.dumps(meta))
    shot = tmp_path / "review.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            page.set_default_timeout(90_000)
            page.goto(f"{lab['url']}/lab/tree/review.ipynb?token={lab['token']}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            if page.query_selector(".jp-Dialog button.jp-mod-accept"): page.click(".jp-Dialog button.jp-mod-accept")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext.session "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext.session.kernel", timeout=120_000)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            accept = page.wait_for_selector("button.rb-accept", timeout=120_000)
            page.wait_for_selector(".rb-item .rb-q")
            first_q = page.inner_text(".rb-review-queue .rb-q")
            accept.click()
            rows = wait_for(lambda: review_rows(run), 60, "the accept decision in reviews.jsonl")
            assert rows[0]["decision"] == "accept" and rows[0]["by"] == "browser-test"
            # the view moved on: edit the next item's answer, then "Edit & accept"
            page.wait_for_function("q => document.querySelector('.rb-review-queue .rb-q').innerText !== q", arg=first_q)
            page.fill(".rb-edit-answer input", "edited in the browser")
            page.click("button.rb-edit")
            rows = wait_for(lambda: len(review_rows(run)) >= 2 and review_rows(run), 60, "the edit in reviews.jsonl")
            assert rows[1]["decision"] == "edit" and rows[1]["answer"] == "edited in the browser"
            assert rows[1]["item_id"] != rows[0]["item_id"]
            # keyboard path: focus the shortcut box and press r
            page.click(".rb-keys input")
            page.keyboard.press("r")
            rows = wait_for(lambda: len(review_rows(run)) >= 3 and review_rows(run), 60, "the shortcut reject")
            assert rows[2]["decision"] == "reject"
            page.wait_for_function("() => document.querySelector('.rb-review-queue').innerText.includes('3/6 decided')")
            page.locator(".rb-review-queue").screenshot(path=str(shot))
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            if os.environ.get("RAGBENCH_BROWSER_SHOT"): shutil.copy(tmp_path / "failure.png", os.environ["RAGBENCH_BROWSER_SHOT"])
            print("JupyterLab log:\n" + lab["log"].read_text()[-3000:])
            raise
        finally:
            browser.close()
    if os.environ.get("RAGBENCH_BROWSER_SHOT"): shutil.copy(shot, os.environ["RAGBENCH_BROWSER_SHOT"])
    # the decisions are in the run directory, and the reviewed dataset reflects them
    from ragbench.core import Dataset
    ds = {it.id: it for it in Dataset.read(run / "dataset.reviewed.jsonl")}
    assert ds[rows[1]["item_id"]].answer == "edited in the browser"
    assert rows[2]["item_id"] not in ds
