"""The fault suite (issue 12): kills, injected LLM errors, concurrent writers, bad input, planted keys.

Everything goes through the command line (`ragbench ...` subprocesses, as a user runs it) against the fake LLM
server (`ragbench fake-llm-server --port 0`, whose `/stats` counts requests, faults, repeats and requests in
flight); no ragbench module is imported, so the suite survives renames inside the package. The corpus is the
bundled Git docs sample indexed with the model-free `hash` embedder.

    python -m pytest -q tests/faults            (its own suite: a few minutes on 2 cores)

At the end pytest prints the table of cases with their outcome and figures (see `CASES`).
"""
import json, os, re, select, signal, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "ragbench" / "data" / "gitdocs_sample.jsonl"            # 20 Git manual pages -> 189 chunks
_SCRIPT = Path(sys.executable).with_name("ragbench")
RAGBENCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "ragbench.cli"]
ENV = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")}
ENV.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1",
           PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))

# owners of the code a failing case waits for (the lead removes the xfail mark once it is fixed)
TRIAD, DORA, EVAL = "TRIAD helper (20s)", "DoRA helper (30s)", "evaluation helper (40s)"

CASES: dict = {}          # case -> {"outcome": ..., **figures}: printed as a table at the end of the run
CURRENT = [""]            # the running test's name


def record(sub=None, **figures):
    "Note figures of the running test, or of one of its sub-cases (`sub`): shown in the table at the end."
    CASES.setdefault(CURRENT[0] if sub is None else f"{CURRENT[0]} / {sub}", {}).update(figures)


def pytest_runtest_setup(item):
    CURRENT[0] = item.nodeid.split("::", 1)[-1]


def ragbench(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
    "Run `ragbench ARGS...`; returns the finished process (text stdout/stderr)."
    return subprocess.run(RAGBENCH + [str(a) for a in args], env=env or ENV, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def start(*args, env=None) -> subprocess.Popen:
    "Start `ragbench ARGS...` in its own process group (so a kill reaches every child)."
    return subprocess.Popen(RAGBENCH + [str(a) for a in args], env=env or ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=ROOT)


def ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"exit {p.returncode}\nstdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-3000:]}"
    return p


def user_error(p: subprocess.CompletedProcess, *words) -> str:
    "Assert exit 2 with one `ragbench CMD: message` line on stderr (no traceback) containing `words`; returns it."
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and lines and lines[-1].startswith("ragbench") and "Traceback" not in p.stderr, \
        (p.returncode, p.stderr[-2000:])
    assert all(w in lines[-1] for w in words), (words, lines[-1])
    return lines[-1]


def read_lines(path) -> tuple[list, int]:
    "(records, torn lines) of a JSONL file."
    rows, torn = [], 0
    for line in Path(path).read_text().splitlines():
        if not line.strip(): continue
        try: rows.append(json.loads(line))
        except ValueError: torn += 1
    return rows, torn


def torn_lines(out: Path) -> dict:
    "Torn (unparsable) lines of every JSONL file under `out`, by file."
    return {str(p.relative_to(out)): n for p in out.rglob("*.jsonl") if (n := read_lines(p)[1])}


class Server:
    "`ragbench fake-llm-server --port 0 ...` as a child process; `.stats()` reads its counters."
    def __init__(self, *extra):
        self.proc = subprocess.Popen(RAGBENCH + ["fake-llm-server", "--port", "0", *map(str, extra)], env=ENV,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        banner = self.proc.stdout.readline() if ready else ""
        m = re.match(r"fake LLM server on (http://127\.0\.0\.1:(\d+))\b", banner)
        if not m:
            self.proc.kill(); raise AssertionError(f"fake-llm-server did not start: {banner!r}")
        self.url, self.port = m.group(1), int(m.group(2))
        self.spec = f"openai:{self.url}/v1@fake-model"

    def stats(self) -> dict:
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as r: return json.load(r)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try: self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired: os.killpg(self.proc.pid, signal.SIGKILL); self.proc.wait()

    def __enter__(self): return self
    def __exit__(self, *exc): self.stop()


@pytest.fixture(scope="session")
def server():
    srv = Server()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="session")
def hash_db(work) -> Path:
    "The bundled sample indexed with the model-free hash embedder."
    db = work / "db_hash"
    ok(ragbench("index", SAMPLE, "--db", db, "--embedder", "hash", "--quiet"))
    return db


@pytest.fixture(scope="session")
def small_dataset(server, hash_db, work) -> Path:
    "A 4-question TRIAD dataset (8 items with the unanswerable variants) to evaluate."
    out = work / "triad_small"
    ok(ragbench("triad", "--db", hash_db, "--out", out, "--n", 4, "--concurrency", 4, "--llm", server.spec))
    return out / "dataset.jsonl"


def setups_file(path: Path, spec: str, judge: str = None) -> Path:
    "Two setups (dense top 5, bm25 top 3) answering with `spec`, judged by `judge` (default: none)."
    path.write_text(f'defaults: {{llm: "{spec}"}}\nbaseline: {{name: dense5, top_k: 5}}\n'
                    f'variants:\n  - {{name: bm25-3, retrieval: bm25, top_k: 3}}\n'
                    + (f'judge_llm: "{judge}"\n' if judge else ""))
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    case = item.nodeid.split("::", 1)[-1]
    if rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed"):
        xf = getattr(rep, "wasxfail", None)
        outcome = ("xfail" if rep.skipped and xf is not None else "XPASS" if xf is not None else rep.outcome)
        CASES.setdefault(case, {})["outcome"] = outcome + (f" ({xf})" if xf else "")


def pytest_terminal_summary(terminalreporter):
    if not CASES: return
    tr = terminalreporter
    tr.section("fault suite: cases and outcomes")
    for case, f in CASES.items():
        figs = "; ".join(f"{k}={v}" for k, v in f.items() if k != "outcome").replace("\n", " / ").replace("|", "/")
        tr.write_line(f"| {case} | {f.get('outcome', '?')} | {figs} |")
