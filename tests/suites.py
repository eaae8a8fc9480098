"""Run every test suite, each under its own time budget: the notebooks, the main pytest suite, then the
browser, faults and ray suites. README command 2 ends with this script, and CI runs README command 2.

    python tests/suites.py                 # all suites, in order
    python tests/suites.py main faults     # some of them
    python tests/suites.py --list

A suite that runs past its budget is stopped and counts as failed; a suite with no test yet (no file, or
pytest's exit status 5) is reported and passes. The exit status is 1 when any suite failed. Which suite a
test belongs to is its path: tests/faults/, tests/ray/, and the files named test_*browser*.py or
test_*_lab.py (a real Chromium) have suites of their own; every other file under tests/ is the main suite.
"""
import glob, os, re, signal, subprocess, sys, threading, time
from pathlib import Path

PY = sys.executable
ROOT = Path(__file__).resolve().parents[1]
# Each notebook runs once in CI (issue 38): those that show ipywidgets views run All in a real JupyterLab (the browser
# suite, tests/test_notebooks_in_lab.py), every other one under nbdev_test (the notebooks suite).
SHOWS_WIDGETS = re.compile(r"\bipywidgets\b|ragbench\.(widgets|label_view)\b|\b\w+_widget\(")


def all_notebooks() -> list:
    "Every notebook a user may open and Run All, relative to the checkout (checkpoints and hidden files aside)."
    found = sorted({p for g in ("nbs/*.ipynb", "nbs/tutorials/*.ipynb", "nbs/steps/*.ipynb") for p in ROOT.glob(g)})
    return [p.relative_to(ROOT) for p in found if not p.name.startswith((".", "_")) and ".ipynb_checkpoints" not in p.parts]


# The tour runs once, in the curator's loop (tests/test_curator_loop_browser.py, issue 39): Run All, generate from ticked
# seeds, decide with the keyboard and from a second kernel, Restart and Run All, so its Run All in
# tests/test_notebooks_in_lab.py would be a second run of the same cells.
CURATOR_LOOP_NOTEBOOKS = (Path("nbs/tutorials/tour.ipynb"),)


def lab_notebooks() -> list:
    "The notebooks whose code shows widgets, the curator loop's aside: they run All in JupyterLab, not under nbdev_test."
    import json
    code = lambda p: "\n".join("".join(c["source"]) for c in json.loads((ROOT / p).read_text())["cells"] if c["cell_type"] == "code")
    return [p for p in all_notebooks() if SHOWS_WIDGETS.search(code(p)) and p not in CURATOR_LOOP_NOTEBOOKS]


def nbdev_skip_re() -> str:
    "nbdev_test's --skip_file_re: the file names of the lab and curator-loop notebooks (unique across nbs/, tutorials/ and steps/)."
    return "^(" + "|".join(re.escape(p.stem) for p in [*lab_notebooks(), *CURATOR_LOOP_NOTEBOOKS]) + r")\.ipynb$"
# which tests a suite runs is decided by their path, so a new test file slots in by where it lives or its name
BROWSER = ("tests/*browser*.py", "tests/*_lab.py")        # real Chromium (JupyterLab, widgets, report)
FAULTS, RAY = "tests/faults", "tests/ray"                 # fault injection; a local Ray cluster (the `ray` extra)


def browser_files() -> list:
    "The browser test files, relative to the checkout."
    return sorted({f for g in BROWSER for f in glob.glob(g, root_dir=ROOT) if Path(f).name.startswith("test_")})


def pytest(*args) -> list:
    "A pytest command line (it ends by listing the 15 slowest steps, so a suite near its budget shows where the time went)."
    return [PY, "-m", "pytest", "-q", "--durations=15", *args]


# name: (command, budget in seconds). The budgets add up to 40 minutes (issue 38); .ci/run also stops the whole run,
# README command 1 included, at 45 minutes. Measured by `bash .ci/run` on a clean clone of this 2-core machine, quiet
# (2026-12-06, the whole CI 1,198 s): notebooks 60 s, main 358 s (521 tests, 2 pytest-xdist workers, one file per
# worker: --dist loadfile builds a file's module fixtures once), browser 140 s (the widget notebooks' Run All and the
# curator's loop with the tour's one run), faults 289 s (4 workers: its cases mostly wait on servers, kills and
# resumes), ray 211 s (200-420 s on other days). Earlier stops measured up to 1.6x these on a slower day; each budget
# keeps about that margin or more. A machine loaded by other work can run past them: CI runs on a quiet one.
SUITES = {
    "notebooks": (lambda: ["nbdev_test", "--n_workers", "2", "--skip_file_re", nbdev_skip_re()], 180),
    "main": (lambda: pytest("-n", "2", "--dist", "loadfile", "tests", f"--ignore={FAULTS}", f"--ignore={RAY}",
                            *[f"--ignore={f}" for f in browser_files()]), 720),
    "browser": (lambda: pytest(*browser_files()) if browser_files() else [], 360),
    "faults": (lambda: pytest("-n", "4", FAULTS) if (ROOT / FAULTS).is_dir() else [], 600),
    "ray": (lambda: pytest(RAY) if (ROOT / RAY).is_dir() else [], 540),
}
NO_TESTS = 5   # pytest: no test collected


def pytest_counts(line: str) -> dict:
    "{passed, failed, ...} from pytest's closing line ('3 passed, 1 skipped in 2.1s'), else {}."
    if not re.search(r"\bin [\d.]+s\b", line): return {}
    return {k.rstrip("s") if k.startswith("error") else k: int(n)
            for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)", line)}


def run_suite(name: str, cmd: list, budget: int) -> tuple[str, float, dict]:
    "Run one suite under its budget, its output streamed; (outcome, seconds, pytest counts)."
    if not cmd: print(f"== suite {name}: no tests yet"); return "no tests yet", 0.0, {}
    print(f"== suite {name}: {' '.join(cmd)}  (budget {budget // 60} min)", flush=True)
    t0, counts, late = time.time(), {}, []
    p = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    def stop():
        late.append(True)
        try: os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError: pass
    timer = threading.Timer(budget, stop); timer.start()
    for line in p.stdout:
        sys.stdout.write(line); sys.stdout.flush()
        counts = pytest_counts(line) or counts
    rc = p.wait(); timer.cancel(); secs = time.time() - t0
    if late: print(f"\n== suite {name}: stopped, over its budget of {budget} s", flush=True); return f"failed: over its budget of {budget} s", secs, counts
    if rc == 0: return "passed", secs, counts
    if rc == NO_TESTS and name != "main": return "no tests yet", secs, counts
    return f"failed (exit {rc})", secs, counts


def main(argv: list) -> int:
    if "--list" in argv:
        for n, (cmd, b) in SUITES.items(): print(f"{n:<10} {b:>5} s  {' '.join(cmd()) or '(no tests yet)'}")
        return 0
    names = [a for a in argv if not a.startswith("-")] or list(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown: print(f"unknown suite {unknown[0]!r}; suites: {', '.join(SUITES)}", file=sys.stderr); return 2
    results = {n: run_suite(n, SUITES[n][0](), SUITES[n][1]) for n in names}
    print("\n== suites")
    for n, (outcome, secs, c) in results.items():
        print(f"{n:<10} {secs:7.0f} s  {outcome}" + (f"  ({', '.join(f'{v} {k}' for k, v in c.items())})" if c else ""))
    failed = [n for n, (o, _, _) in results.items() if o.startswith("failed")]
    total = {k: sum(c.get(k, 0) for _, _, c in results.values()) for k in ("passed", "failed", "error", "skipped")}
    print(f"{len(names) - len(failed)} of {len(names)} suites passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    print(f"tests: {total['passed']} passed, {total['failed'] + total['error']} failed, {total['skipped']} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
