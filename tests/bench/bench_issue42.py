"""Issue 42's "Done when" in one run: every figure beside its anchor, `uptime` beside every timing, before re-measured.

    python tests/bench/bench_issue42.py --before TREE [--only triad,eval,warm] [--index-memory]

`--before TREE`: the code before (a folder holding its `ragbench/`: for issue 42, `git archive e700769 ragbench | tar
-x -C TREE`, the code before the issue's work; or a checkout of a later commit); it is re-measured in this run. Each
part calls the existing script in a child process and prints its output as it comes:

  triad   requests and tokens per accepted question and per attempt, by stage, and generation wall / ideal at 2 s and
          16 in flight, on HotpotQA paragraphs and on the Git manual (`bench_triad.py --compare`; goal: at most 9
          requests and 25k tokens a question, wall / ideal at most 1.10)
  eval    the torch-free commands' import times; evaluation wall / ideal at 2 s and 16 in flight (goal 1.25) and CPU
          per scored row before -> after, with the largest score difference (`bench_eval.py --speed`)
  warm    the CPU of a first and a second `search` in one process, and model loads (`bench_warm_search.py`; goal:
          the second under 1 s)
  index   with `--index-memory` only (about 20 minutes at load 1): `ragbench index` peak memory from 100k to 1M
          one-chunk documents, before and after (`bench_index_memory.py --cli`; goal: at most 1.2x)
"""
import argparse, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def uptime() -> str:
    "The load averages, as `uptime` prints them."
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.split("load average:")[-1].strip()


def part(title: str, argv: list) -> None:
    "Run one bench script, its output streamed, between two `uptime` lines."
    print(f"\n=== {title}\n$ {' '.join(map(str, argv))}\nload at the start: {uptime()}", flush=True)
    t = time.perf_counter()
    rc = subprocess.run([sys.executable, *map(str, argv)]).returncode
    print(f"--- {title}: {time.perf_counter() - t:.0f} s, exit {rc}; load at the end: {uptime()}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a folder holding the code before's ragbench/, re-measured here")
    ap.add_argument("--only", default="triad,eval,warm", help="the parts to run, of triad, eval, warm")
    ap.add_argument("--index-memory", action="store_true", help="also the CLI index memory, 100k and 1M documents")
    a = ap.parse_args()
    parts, before = a.only.split(","), Path(a.before).resolve()
    if "triad" in parts:
        for corpus in ("hotpotqa", "gitdocs"):
            part(f"TRIAD cost per accepted question, {corpus}", [HERE / "bench_triad.py", "--corpus", corpus,
                 "--embedder", "hash", "--n", 40, "--latency", 2.0, "--compare", before])
    if "eval" in parts:
        part("evaluation: imports, wall / ideal, CPU per scored row", [HERE / "bench_eval.py", "--speed",
             "--before-src", before])
    if "warm" in parts:
        for label, tree in (("before", before), ("after", HERE.parents[1])):
            part(f"warm within a process ({label})", [HERE / "bench_warm_search.py", "--src", tree])
    if a.index_memory:
        for label, tree in (("before", before), ("after", HERE.parents[1])):
            part(f"CLI index memory ({label})", [HERE / "bench_index_memory.py", "--cli", "--src", tree, "--keep",
                                                 Path(tempfile.gettempdir()) / "ragbench-bench-corpora"])


if __name__ == "__main__":
    main()
