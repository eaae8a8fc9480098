"""Warm within a process (issue 42): CPU of a first and a second `ragbench search` in one interpreter, and model loads.

    python tests/bench/bench_warm_search.py [--db DB] [--src TREE]

The bundled Git sample is indexed once with the bundled all-MiniLM-L6-v2 model (into `--db`, kept for later runs), then
one fresh interpreter (`--src TREE`: that source tree's ragbench) runs `ragbench search` three times per mode through
the CLI's dispatcher, as a notebook or script would call it, and prints each call's CPU (time.process_time) and wall
seconds, and how many times the model was loaded. Goal: the second search under 1 s of CPU, the model loaded once.
"""
import argparse, json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import contextlib, io, json, sys, time
t0 = time.process_time()
from ragbench.cli import main
import ragbench.embed as E
rows = [{"step": "import ragbench.cli", "cpu_s": time.process_time() - t0, "wall_s": None}]
for mode in ("dense", "hybrid", "bm25"):
    for i in range(3):
        t, w = time.process_time(), time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(["search", "--db", sys.argv[1], "--mode", mode, f"how do I undo the last commit {i}"])
        assert rc == 0, rc
        rows.append({"step": f"{mode} search {i + 1}", "cpu_s": time.process_time() - t, "wall_s": time.perf_counter() - w,
                     "loads": sum(getattr(E, "_MODEL_LOADS", {}).values()) or len(E._MODELS)})
print(json.dumps(rows))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=str(Path(tempfile.gettempdir()) / "ragbench-bench-warm-db"))
    ap.add_argument("--src", default=str(ROOT), help="the ragbench source tree to run")
    a = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": a.src}
    if not (Path(a.db) / "chunks.ragbench.json").exists():
        sample = subprocess.run([sys.executable, "-c", "from ragbench.corpus import sample_corpus_path as p; print(p())"],
                                capture_output=True, text=True, env=env, check=True).stdout.strip()
        subprocess.run([sys.executable, "-m", "ragbench.cli", "index", sample, "--db", a.db, "--quiet"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
    uptime = lambda: open("/proc/loadavg").read().split()[0]
    load0 = uptime()
    r = subprocess.run([sys.executable, "-c", CHILD, a.db], capture_output=True, text=True, env=env)
    if r.returncode: raise SystemExit(r.stderr[-3000:])
    print(f"{'step':<22} {'CPU s':>7} {'wall s':>7} {'model loads':>11}")
    for s in json.loads(r.stdout.strip().splitlines()[-1]):
        wall = f"{s['wall_s']:>7.2f}" if s["wall_s"] is not None else f"{'':>7}"
        print(f"{s['step']:<22} {s['cpu_s']:>7.2f} {wall} {s.get('loads', ''):>11}")
    print(f"tree {a.src}; load {load0} -> {uptime()}; goal: a second search under 1 s of CPU, the model loaded once")


if __name__ == "__main__":
    main()
