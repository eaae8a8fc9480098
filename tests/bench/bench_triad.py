"""Benchmark of the TRIAD pipeline (a script, not a test).

    python tests/bench/bench_triad.py [--n 150] [--latency 0.2] [--concurrency 16] [--questions 60] [--embedder default]

1. Pre-check study on the HotpotQA sample: (a) recall of the deterministic name-overlap pre-check on the 100
   human-made supporting-paragraph pairs (pairs known to support a multi-hop question); (b) on random seeds of the
   index, entity calls spent and bridge configurations found with and without the pre-check, the entity call
   answered by a simulated extractor (the fake server's entity lists, with coreference by containment / last name).
2. Throughput: `run_triad` against `ragbench.testing.FakeLLMServer` (child process, fixed latency, field rules
   giving the paper's rates: 81% of attempts pass the judge, 9% of single chunks "sufficient") through the real
   OpenAI client (`openai:URL/v1@fake-model`) at concurrency C. Wall time vs the ideal
   requests x latency / C (goal <= 1.15) and LLM calls per accepted question (goal <= 13; reference code ~22).
"""
import argparse, asyncio, json, multiprocessing as mp, os, sys, tempfile, time, urllib.request
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.llm import arun, make_llm
from ragbench.prompts import parse_chunks
from ragbench.triad_generate import TriadConfig, afind_bridge, hotpot_chunks, precheck_recall
from ragbench.triad import arun_triad

HOTPOT = ROOT.parent / "shared" / "data" / "hotpotqa" / "hotpotqa_train100.json"


def serve(port_q, latency, judge_pass, sufficient_p):
    "Child process: the fake server with TRIAD field rules."
    from test_triad import fake_rules
    from ragbench.testing import FakeLLMServer
    with fake_rules(judge_pass=judge_pass, sufficient_p=sufficient_p), FakeLLMServer(latency=latency) as srv:
        port_q.put(srv.port)
        while True: time.sleep(3600)


def simulated_entities(req):
    "An entity extractor independent of the pre-check: fake-server entity lists, coreference by containment/last name."
    from ragbench.llm.template import text_entities as _entities
    cs = parse_chunks(req.prompt)
    per = [_entities(f"{t}. {x}") for _, t, x in cs]
    def same(a, b):
        a, b = a.lower(), b.lower()
        return a == b or (len(a) > 3 and a in b) or (len(b) > 3 and b in a) or (a.split()[-1] == b.split()[-1] and len(a.split()[-1]) > 3)
    shared = [e for e in per[0] if all(any(same(e, f) for f in fs) for fs in per[1:])]
    return {"entities_per_chunk": per, "shared": shared[:3], "bridge_topic": (shared or [""])[0], "why": ""}


async def precheck_study(index, n_seeds):
    seeds = index.sample_ids(n_seeds, seed=7)
    out = {}
    for on in (True, False):
        llm = make_llm("fake", responder=simulated_entities, max_concurrency=16)
        cfg = TriadConfig(precheck=on)
        found = await asyncio.gather(*(afind_bridge(s, index, llm, cfg) for s in seeds))
        out[on] = {s: f for s, f in zip(seeds, found)}
        out[f"calls_{on}"] = llm.usage.totals()["calls"]
    with_, without = out[True], out[False]
    return {"seeds": len(seeds),
            "entity_calls": {"precheck": out["calls_True"], "no_precheck": out["calls_False"]},
            "configs_found": {"precheck": sum(f is not None for f in with_.values()),
                              "no_precheck": sum(f is not None for f in without.values())},
            "found_via": {"precheck": _via(with_), "no_precheck": _via(without)},
            "lost": sum(without[s] is not None and with_[s] is None for s in seeds),
            "gained": sum(with_[s] is not None and without[s] is None for s in seeds)}


def _via(found):
    from collections import Counter
    return dict(Counter(f.via for f in found.values() if f is not None))


async def throughput(index, url, args, run_dir):
    llm = make_llm(f"openai:{url}/v1@fake-model", max_concurrency=args.concurrency, cache_dir=Path(run_dir) / "cache")
    cfg = TriadConfig(n=args.n, max_seeds=args.n * 10, concurrency=args.concurrency, seeds_in_flight=args.seeds_in_flight, seed=args.seed)
    t0, c0 = time.perf_counter(), time.process_time()
    summary = await arun_triad(index, llm, cfg, run_dir, progress=False, log=lambda m: None)
    wall = time.perf_counter() - t0
    summary["_cpu_s"] = time.process_time() - c0
    return summary, wall


def cfg_in_flight(args) -> int:
    return TriadConfig(concurrency=args.concurrency, seeds_in_flight=args.seeds_in_flight).in_flight


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
    args = ap.parse_args()
    from ragbench.index import ChunkIndex
    tmp = Path(tempfile.mkdtemp(prefix="bench_triad_"))
    t = time.perf_counter()
    index = ChunkIndex.build(tmp / "db", hotpot_chunks(HOTPOT, args.questions), args.embedder, progress=False)
    report = {"corpus_chunks": len(index), "embedder": args.embedder, "index_build_s": round(time.perf_counter() - t, 1)}
    if not args.skip_precheck:
        report["precheck_recall_hotpot_gold_pairs"] = precheck_recall(json.loads(HOTPOT.read_text()))
        report["precheck_on_random_seeds"] = arun(precheck_study(index, args.precheck_seeds))
        print(json.dumps(report, indent=1), flush=True)
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
    report["throughput"] = {
        "latency_s": args.latency, "concurrency": args.concurrency, "seeds_in_flight": cfg_in_flight(args), "n": args.n,
        "accepted": summary["accepted"], "seeds_tried": summary["seeds_tried"], "server_requests": stats["requests"],
        "wall_s": round(wall, 2), "ideal_s": round(ideal, 2), "ratio": round(wall / ideal, 3),
        "client_cpu_ms_per_request": round(1000 * summary["_cpu_s"] / max(stats["requests"], 1), 1),
        "calls_per_accepted": summary["llm"]["calls_per_accepted"], "attempts_per_question": summary["attempts_per_question"],
        "acceptance_rate_per_attempt": summary["acceptance_rate_per_attempt"], "acceptance_rate": summary["acceptance_rate"],
        "calls_by_stage_per_accepted": {s: round(r["calls"] / max(summary["accepted"], 1), 2) for s, r in summary["usage_by_stage"].items()},
        "seeds_by_outcome": summary["seeds_by_outcome"], "failed_checks": summary["failed_checks"],
    }
    print(json.dumps(report["throughput"], indent=1))
    return report


if __name__ == "__main__":
    main()
