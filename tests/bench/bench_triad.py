"""Benchmark of the TRIAD pipeline (a script, not a test).

    python tests/bench/bench_triad.py [--n 150] [--latency 0.2] [--concurrency 16] [--questions 60] [--embedder default]

1. Pre-check study: (a) recall of the pre-check (a shared name or a shared opening word) on the human gold
   paragraph sets of the HotpotQA sample (bridge and comparison pairs) and of the MuSiQue sample (2-4 paragraphs,
   held out: never looked at while designing the check); (b) its pass rate on random pairs of paragraphs of
   different questions (pairs that share nothing: each pass is an entity call spent); (c) on random seeds of the
   index, entity calls spent and configurations found with and without the pre-check, the entity call answered
   by a simulated extractor (the template model's entity lists).
2. Throughput: `run_triad` against `ragbench.testing.FakeLLMServer` (child process, fixed latency, field rules
   giving the paper's rates: 81% of attempts pass the judge, 9% of groups "sufficient") through the real OpenAI
   client (`openai:URL/v1@fake-model`) at concurrency C. Figures: wall time vs the ideal requests x latency / C,
   the server's own request count vs the summary's, and real requests per accepted question (goal <= 8;
   reference code ~22). Peak memory (RSS) of this process is printed too.
"""
import argparse, asyncio, json, multiprocessing as mp, os, random, resource, sys, tempfile, time, urllib.request
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Chunk
from ragbench.corpus import hotpot_chunks
from ragbench.llm import arun, make_llm
from ragbench.triad import TriadConfig, arun_triad
from ragbench.triad.bridge import afind_bridge, precheck_passes

SHARED = ROOT.parent / "shared" / "data"
HOTPOT = SHARED / "hotpotqa" / "hotpotqa_train100.json"
MUSIQUE = SHARED / "musique" / "musique_train100.json"


def _chunks(pairs): return [Chunk(id=t, doc_id=t, text=x, meta={"title": t}) for t, x in pairs]


def gold_sets():
    "(type, [(title, text), ...]): HotpotQA's two supporting paragraphs per question, MuSiQue's 2-4 supporting ones."
    for q in json.loads(HOTPOT.read_text()):
        paras = {t: "".join(s) for t, s in q["context"]}
        gold = list(dict.fromkeys(t for t, _ in q["supporting_facts"]))[:2]
        if len(gold) == 2 and all(g in paras for g in gold): yield f"hotpotqa {q['type']}", [(g, paras[g]) for g in gold]
    for q in json.loads(MUSIQUE.read_text()):
        ps = [(p["title"], p["paragraph_text"]) for p in q["paragraphs"] if p["is_supporting"]]
        yield f"musique {len(ps)}-hop", ps


def precheck_recall() -> dict:
    "Share of human gold paragraph sets that pass the pre-check, by dataset and type."
    seen, ok = Counter(), Counter()
    for typ, pairs in gold_sets():
        seen[typ] += 1; ok[typ] += precheck_passes(_chunks(pairs))
    return {t: {"sets": seen[t], "passed": ok[t], "recall": round(ok[t] / seen[t], 3)} for t in sorted(seen)}


def random_pairs_pass_rate(pairs: int = 300, draws=(0, 1, 2, 3)) -> dict:
    "Pass rate of the pre-check on random pairs of paragraphs of two different questions (nothing shared by design)."
    sources = {"hotpotqa": [[(t, "".join(s)) for t, s in q["context"]] for q in json.loads(HOTPOT.read_text())],
               "musique": [[(p["title"], p["paragraph_text"]) for p in q["paragraphs"]] for q in json.loads(MUSIQUE.read_text())]}
    out = {}
    for name, rows in sources.items():
        rates = []
        for d in draws:
            rng, k = random.Random(d), 0
            for _ in range(pairs):
                i, j = rng.sample(range(len(rows)), 2)
                k += precheck_passes(_chunks([rng.choice(rows[i]), rng.choice(rows[j])]))
            rates.append(round(k / pairs, 3))
        out[name] = {"pairs": pairs, "pass_rate_by_draw": rates, "calls_saved": round(1 - sum(rates) / len(rates), 3)}
    return out


def serve(port_q, latency, judge_pass, sufficient_p):
    "Child process: the fake server with TRIAD field rules."
    from test_triad import fake_rules
    from ragbench.testing import FakeLLMServer
    with fake_rules(judge_pass=judge_pass, sufficient_p=sufficient_p), FakeLLMServer(latency=latency) as srv:
        port_q.put(srv.port)
        while True: time.sleep(3600)


async def precheck_study(index, n_seeds):
    "Entity calls and configurations found on random seeds, with and without the pre-check (template extractor)."
    seeds = index.sample_ids(n_seeds, seed=7)
    out = {}
    for on in (True, False):
        llm = make_llm("template", max_concurrency=16)
        found = await asyncio.gather(*(afind_bridge(s, index, llm, TriadConfig(precheck=on)) for s in seeds))
        out[on] = dict(zip(seeds, found)); out[f"calls_{on}"] = llm.usage.totals()["calls"]
    with_, without = out[True], out[False]
    via = lambda found: dict(Counter(f.via for f in found.values() if f is not None))
    return {"seeds": len(seeds), "entity_calls": {"precheck": out["calls_True"], "no_precheck": out["calls_False"]},
            "configs_found": {"precheck": sum(f is not None for f in with_.values()), "no_precheck": sum(f is not None for f in without.values())},
            "found_via": {"precheck": via(with_), "no_precheck": via(without)},
            "lost": sum(without[s] is not None and with_[s] is None for s in seeds)}


async def throughput(index, url, args, run_dir):
    llm = make_llm(f"openai:{url}/v1@fake-model", max_concurrency=args.concurrency, cache_dir=Path(run_dir) / "cache")
    cfg = TriadConfig(n=args.n, max_seeds=args.n * 10, concurrency=args.concurrency, seeds_in_flight=args.seeds_in_flight, seed=args.seed)
    t0, c0 = time.perf_counter(), time.process_time()
    summary = await arun_triad(index, llm, cfg, run_dir, progress=False, log=lambda m: None)
    summary["_cpu_s"] = time.process_time() - c0
    return summary, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--questions", type=int, default=60, help="HotpotQA questions whose paragraphs form the corpus")
    ap.add_argument("--embedder", default="default")
    ap.add_argument("--precheck-seeds", type=int, default=150)
    ap.add_argument("--judge-pass", type=float, default=0.81)
    ap.add_argument("--sufficient-p", type=float, default=0.09)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds-in-flight", type=int, default=None, help="TriadConfig.seeds_in_flight (default 1.5 x --concurrency)")
    ap.add_argument("--skip-precheck", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    report = {}
    if not args.skip_precheck:
        report["precheck_recall_gold_sets"] = precheck_recall()
        report["precheck_random_pairs"] = random_pairs_pass_rate()
        print(json.dumps(report, indent=1), flush=True)
    if args.skip_throughput: return report
    from ragbench.index import ChunkIndex
    tmp = Path(tempfile.mkdtemp(prefix="bench_triad_"))
    t = time.perf_counter()
    index = ChunkIndex.build(tmp / "db", hotpot_chunks(HOTPOT, args.questions), args.embedder, progress=False)
    report.update(corpus_chunks=len(index), embedder=args.embedder, index_build_s=round(time.perf_counter() - t, 1))
    if not args.skip_precheck:
        report["precheck_on_random_seeds"] = arun(precheck_study(index, args.precheck_seeds))
        print(json.dumps(report["precheck_on_random_seeds"], indent=1), flush=True)
    ctx = mp.get_context("spawn")  # not fork: LanceDB's runtime does not survive a fork
    q = ctx.Queue()
    p = ctx.Process(target=serve, args=(q, args.latency, args.judge_pass, args.sufficient_p), daemon=True)
    p.start()
    try:
        url = f"http://127.0.0.1:{q.get(timeout=60)}"
        summary, wall = arun(throughput(index, url, args, tmp / "run"))
        with urllib.request.urlopen(url + "/stats") as r: stats = json.loads(r.read())
    finally:
        p.terminate()
    ideal = stats["requests"] * args.latency / args.concurrency
    acc = max(summary["accepted"], 1)
    report["throughput"] = {
        "latency_s": args.latency, "concurrency": args.concurrency, "n": args.n, "accepted": summary["accepted"],
        "seeds_tried": summary["seeds_tried"], "server_requests": stats["requests"], "summary_calls": summary["llm"]["calls"],
        "wall_s": round(wall, 2), "ideal_s": round(ideal, 2), "wall_over_ideal": round(wall / ideal, 3) if ideal else None,
        "client_cpu_ms_per_request": round(1000 * summary["_cpu_s"] / max(stats["requests"], 1), 1),
        "server_requests_per_accepted": round(stats["requests"] / acc, 2),
        "attempts_per_question": summary["attempts_per_question"], "acceptance_rate": summary["acceptance_rate"],
        "calls_by_stage_per_accepted": {s: round(r["calls"] / acc, 2) for s, r in summary["usage_by_stage"].items()},
        "seeds_by_outcome": summary["seeds_by_outcome"], "failed_checks": summary["failed_checks"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(report["throughput"], indent=1))
    return report


if __name__ == "__main__":
    main()
