"""Issue 37: a seeded simulation grid over every interval ragbench prints, at the sizes a team has.

n in {12, 30, 100} items, labels per setup in {8, 15, 30}, 2,000 replicates a cell: coverage at least 0.93 wherever
an interval is printed, type-I error of every decision at most 0.06, and no row whose interval and decision disagree.
The landed code before this issue fails these cells: the percentile bootstrap at n = 12, PPI (ppi-python's tuned
lambda, z quantile) at 8 labels, the Wald validity interval at 98 % (tests/bench/bench_stats_grid.py prints both)."""
import json
from pathlib import Path
import numpy as np
import pytest
from ragbench.stats import decide, paired_test, ppi_mean_ci, ppi_paired_ci, proportion_ci, simulated_power
from ragbench.eval.ppi import simulate_judged

R = 2000
NS, _LABELS = (12, 30, 100), (8, 15, 30)
SCORES = Path(__file__).parent / "data" / "demo_retrieval_scores.jsonl"   # the demo's real per-item retrieval scores


def covered(t, truth):
    "Whether an interval holds the truth (an interval that is not printed counts as covering: it promises nothing)."
    return (t["lo"] is None or t["lo"] <= truth + 1e-9) and (t["hi"] is None or truth - 1e-9 <= t["hi"])


def agrees(t):
    "The decision read from the interval agrees with the test's p-value at the level."
    rejects = (t["lo"] is not None and t["lo"] > 0) or (t["hi"] is not None and t["hi"] < 0)
    return rejects == (t["p"] <= 0.05 + 1e-9) or abs(t["p"] - 0.05) < 1e-3


def continuous_pairs(rng, n, diff):
    "Paired scores on a shared difficulty, true mean difference `diff`."
    ease = rng.beta(2, 2, n)
    return ease + diff / 2 + rng.normal(0, 0.15, n), ease - diff / 2 + rng.normal(0, 0.15, n)


def binary_pairs(rng, n, diff, disc=0.15):
    "0/1 pairs with discordance `disc` per side, tilted by `diff`."
    u = rng.random(n)
    up, down = disc + diff / 2, disc - diff / 2
    base = (rng.random(n) < 0.6).astype(float)
    return np.where(u < up, 1.0, np.where(u < up + down, 0.0, base)), np.where(u < up, 0.0, np.where(u < up + down, 1.0, base))


def real_diffs():
    "The demo's per-item paired differences (recall@k, mrr, ndcg@k) of each setup against dense-top5."
    rows = [json.loads(l) for l in SCORES.read_text().splitlines()]
    out = []
    for m in ("recall@k", "mrr", "ndcg@k"):
        base = {r["item_id"]: r["metrics"][m] for r in rows if r["setup"] == "dense-top5"}
        for s in sorted({r["setup"] for r in rows} - {"dense-top5"}):
            mine = {r["item_id"]: r["metrics"][m] for r in rows if r["setup"] == s}
            out.append((f"{m} {s}", np.array([mine[i] - base[i] for i in mine if i in base])))
    return out


@pytest.mark.parametrize("n", NS)
def test_paired_difference_covers_and_keeps_its_level(n):
    rng, worst = np.random.default_rng(n), []
    cells = [("continuous", d, lambda r, d=d: continuous_pairs(r, n, d)) for d in (0.0, 0.1)]
    cells += [("binary", d, lambda r, d=d: binary_pairs(r, n, d)) for d in (0.0, 0.1, 0.2)]
    cells += [(name, float(d.mean()), lambda r, d=d: (d[r.integers(0, len(d), n)], np.zeros(n))) for name, d in real_diffs()[:5]]
    for name, truth, draw in cells:
        ts = [paired_test(*draw(rng), alpha=0.05) for _ in range(R)]
        cover = np.mean([covered(t, truth) for t in ts])
        worst.append((cover, name, truth))
        assert all(agrees(t) for t in ts), name
        if truth == 0:
            assert np.mean([decide(t["lo"], t["hi"]) in ("better", "worse") for t in ts]) <= 0.06, name
    assert min(worst)[0] >= 0.93, sorted(worst)[:3]


def test_equivalence_keeps_its_level():
    "Declaring 'equivalent within 0.10' when the true difference is 0.12: at most 6 % of datasets."
    rng = np.random.default_rng(1)
    for n in NS:
        ts = [paired_test(*continuous_pairs(rng, n, 0.12)) for _ in range(R)]
        assert np.mean([decide(t["lo"], t["hi"], margin=0.10) == "equivalent" for t in ts]) <= 0.06


@pytest.mark.parametrize("labels", _LABELS)
def test_ppi_mean_and_paired_difference_cover_with_few_labels(labels):
    rng = np.random.default_rng(labels)
    for n in NS:
        if labels > n: continue
        cover_mean, cover_diff = 0, 0
        for _ in range(R):
            ya, fa = simulate_judged(rng, n, p=0.6)
            yb, fb = simulate_judged(rng, n, p=0.5)
            idx = rng.permutation(n)
            lab, rest = idx[:labels], idx[labels:]
            cover_mean += covered(ppi_mean_ci(ya[lab], fa[lab], fa[rest]), 0.6)
            cover_diff += covered(ppi_paired_ci(ya[lab], yb[lab], fa[lab], fb[lab], fa[rest], fb[rest]), 0.1)
        assert cover_mean / R >= 0.93, (n, labels, cover_mean / R)
        assert cover_diff / R >= 0.93, (n, labels, cover_diff / R)


@pytest.mark.parametrize("p", (0.5, 0.8, 0.98))
def test_every_proportion_covers_and_is_never_zero_width(p):
    rng = np.random.default_rng(int(p * 100))
    for n in (*_LABELS, 60):
        k = rng.binomial(n, p, R)
        cis = [proportion_ci(int(x), n) for x in k]
        assert np.mean([c["lo"] <= p <= c["hi"] for c in cis]) >= 0.93, (n, p)
        assert min(c["hi"] - c["lo"] for c in cis) > 0


def test_promised_power_is_the_power_achieved_on_real_scores():
    """The planner's promise (simulated_power from the pilot's differences, its own effect model) within 5 points of
    the power achieved on the real per-item scores: items resampled from the demo's evaluation, whose true difference
    is the one they hold."""
    rng = np.random.default_rng(7)
    for name, d in real_diffs():
        if abs(d.mean()) < 0.04: continue
        kind = paired_test(d, np.zeros_like(d))["test"]
        for n in (30, 60):
            promised = simulated_power(d, float(d.mean()), n, kind=kind, reps=600, seed=3)
            hits = 0
            for _ in range(600):
                t = paired_test(d[rng.integers(0, len(d), n)], np.zeros(n))
                hits += (t["lo"] is not None and t["lo"] > 0) or (t["hi"] is not None and t["hi"] < 0)
            assert abs(promised - hits / 600) <= 0.05 + 0.03, (name, n, promised, hits / 600)   # 5 points + Monte Carlo error
