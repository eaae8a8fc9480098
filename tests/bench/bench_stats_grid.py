"""Issue 37, before -> after in one run: coverage of the intervals ragbench printed before (percentile bootstrap of a
paired difference, ppi-python's PPI with a tuned lambda and a z quantile, a Wald share) and prints now
(ragbench.stats), at the sizes a team has. python tests/bench/bench_stats_grid.py [--reps 2000]"""
import argparse, json, math, time
from pathlib import Path
import numpy as np
from ragbench.stats import paired_test, ppi_mean_ci, proportion_ci
from ragbench.eval.ppi import simulate_judged

SCORES = Path(__file__).parents[1] / "data" / "demo_retrieval_scores.jsonl"


def percentile_bootstrap(d, rng, b=2000):
    "The landed code's paired interval: percentile bootstrap of the mean difference."
    m = d[rng.integers(0, len(d), (b, len(d)))].mean(axis=1)
    return np.quantile(m, [0.025, 0.975])


def demo_diffs():
    rows = [json.loads(l) for l in SCORES.read_text().splitlines()]
    base = {r["item_id"]: r["metrics"]["recall@k"] for r in rows if r["setup"] == "dense-top5"}
    return {s: np.array([r["metrics"]["recall@k"] - base[r["item_id"]] for r in rows if r["setup"] == s])
            for s in ("bm25-top5", "hybrid-top5", "dense-top2")}


def main(reps: int):
    rng, t0 = np.random.default_rng(0), time.time()
    print("paired recall@k difference, items resampled from the demo's 12 (truth: their mean)")
    for s, d in demo_diffs().items():
        for n in (12, 30, 100):
            before = after = 0
            for _ in range(reps):
                x = d[rng.integers(0, len(d), n)]
                lo, hi = percentile_bootstrap(x, rng)
                before += lo <= d.mean() <= hi
                t = paired_test(x, np.zeros(n))
                after += (t["lo"] is None or t["lo"] <= d.mean() + 1e-9) and (t["hi"] is None or d.mean() - 1e-9 <= t["hi"])
            print(f"  {s:<12} n={n:<4} bootstrap {before / reps:.3f} -> {after / reps:.3f}")
    print("PPI mean, biased judge (simulate_judged), 100 rows")
    from ppi_py import ppi_mean_ci as ppi_py_ci
    for labels in (8, 15, 30):
        before = after = 0
        for _ in range(reps):
            y, f = simulate_judged(rng, 100)
            lab = rng.permutation(100)
            L, U = lab[:labels], lab[labels:]
            try:
                lo, hi = (float(np.ravel(v)[0]) for v in ppi_py_ci(y[L], f[L], f[U]))
                before += lo <= 0.6 <= hi
            except Exception: pass
            e = ppi_mean_ci(y[L], f[L], f[U])
            after += e["lo"] <= 0.6 <= e["hi"]
        print(f"  {labels:>2} labels: ppi-python (tuned lambda, z) {before / reps:.3f} -> {after / reps:.3f}")
    print("validity share of a 98 %-valid dataset, 60 labels")
    k = rng.binomial(60, 0.98, reps)
    wald = [(p - 1.96 * math.sqrt(p * (1 - p) / 60), p + 1.96 * math.sqrt(p * (1 - p) / 60)) for p in k / 60]
    cp = [proportion_ci(int(x), 60) for x in k]
    print(f"  Wald {np.mean([lo <= 0.98 <= hi for lo, hi in wald]):.3f} (zero-width {np.mean([hi - lo == 0 for lo, hi in wald]):.2f})"
          f" -> Clopper-Pearson {np.mean([c['lo'] <= 0.98 <= c['hi'] for c in cp]):.3f} (zero-width 0)")
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2000)
    main(ap.parse_args().reps)
