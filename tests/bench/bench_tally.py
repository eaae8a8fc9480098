"""Benchmark of the generation runner's per-commit count (a script, not a test; no LLM involved).

    python tests/bench/bench_tally.py [--sizes 2000 8000 32000] [--in-flight 8]

Each commit of a generation run asks where the frontier is and how many items count so far (plan order,
quotas capped, repeated questions not counted). Before, each commit sorted and walked every result
(`frontier_and_total`): a run of N tasks cost O(N^2). `PlanOrderTally` rewinds only the steps after the
committed result, about the number of tasks in flight. For runs of N synthetic results committed out of
plan order (each about `--in-flight` positions late at most; a share `--errors` fails once and is retried after all
other tasks, as the runner's next round retries them: the worst case, each retry rewinds what follows it), it prints
the seconds per commit of both and their ratio, the tally's peak memory (tracemalloc), and checks that
both give the same frontier and total at the end. The full walk is timed on 200 commits at the run's midpoint
(its cost per commit grows with the results seen, so that is its mean); the tally over the whole run.
"""
import argparse, random, sys, time, tracemalloc
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ragbench.core import QAItem
from ragbench.gen.base import _PlanOrderTally, TaskResult, _frontier_and_total


def run_results(n: int, in_flight: int, errors: float, seed: int = 0) -> list:
    "N results as a run commits them: out of plan order, errors retried later, questions that sometimes repeat."
    rng = random.Random(seed)
    def result(p, outcome):
        items = [QAItem(id=f"r{p}", method="m", kind=rng.choice(["comparison", "composition"]), question=f"Question {rng.randrange(4 * n)}?",
                        answer="A", status="accepted")] if outcome == "accepted" else []
        return TaskResult(task_id=f"t{p}", position=p, outcome=outcome, items=items)
    done = [result(p, "error" if rng.random() < errors else "accepted") for p in sorted(range(n), key=lambda p: p + rng.uniform(0, in_flight))]
    return done + [result(r.position, "accepted") for r in done if r.outcome == "error"]


def tally_per_commit(results, target, quotas) -> tuple[float, tuple]:
    "The tally's mean seconds per commit over the whole run, and its last (frontier, total)."
    tally, t0 = _PlanOrderTally(quotas), time.perf_counter()
    for r in results: tally.add(r)
    return (time.perf_counter() - t0) / len(results), (tally.frontier(target), tally.total)


def walk_per_commit(results, target, quotas, sample: int = 200) -> float:
    "The full walk's seconds per commit at the run's midpoint (its cost grows with the results seen, so this is its mean)."
    mid = len(results) // 2
    seen = {r.task_id: r for r in results[:mid]}
    t0 = time.perf_counter()
    for r in results[mid:mid + sample]:
        seen[r.task_id] = r; _frontier_and_total(seen.values(), target, quotas)
    return (time.perf_counter() - t0) / sample


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000, 32000])
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--errors", type=float, nargs="+", default=[0.0, 0.01, 0.1], help="shares of tasks that fail once and are retried after every other task")
    a = ap.parse_args()
    print(f"{'errors':>6} {'tasks':>7} {'full walk ms/commit':>20} {'tally ms/commit':>16} {'ratio':>7} {'tally peak MB':>14}")
    for err, n in ((e, n) for e in a.errors for n in a.sizes):
        results, quotas = run_results(n, a.in_flight, err), {"comparison": n // 4, "composition": n // 4}
        full_s = walk_per_commit(results, n // 2, quotas)
        tracemalloc.start(); tally_s, got = tally_per_commit(results, n // 2, quotas); peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
        want = _frontier_and_total({r.task_id: r for r in results}.values(), n // 2, quotas)
        assert got == want, (got, want)
        print(f"{err:>6.0%} {n:>7} {full_s * 1e3:>20.3f} {tally_s * 1e3:>16.4f} {full_s / tally_s:>7.1f} {peak / 2**20:>14.1f}")

if __name__ == "__main__":
    main()
