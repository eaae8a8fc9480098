"""Benchmark of the TRIAD pipeline (a script, not a test).

    python tests/bench/bench_triad.py [--n 150] [--latency 0.2] [--concurrency 16] [--questions 60] [--embedder default]

Throughput: `run_triad` against `ragbench.testing.FakeLLMServer` (child process, fixed latency, field rules giving
the paper's rates: 81% of attempts pass the judge, 9% of groups "sufficient") through the real OpenAI client
(`openai:URL/v1@fake-model`) at concurrency C. Figures: wall time vs the ideal requests x latency / C, the server's
own request count vs the summary's, and real requests per accepted question (goal <= 8; reference code ~22). Peak
memory (RSS) of this process is printed too.

(The pre-check study this script ran until issue 41 went with the pre-check: it passed every configuration a run
offered, so it saved no call; `bench_pairing.py` has the figures.)
"""
import argparse, json, multiprocessing as mp, os, resource, sys, tempfile, time, urllib.request
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.corpus import hotpot_chunks
from ragbench.llm import arun, make_llm
from ragbench.triad import TriadConfig, arun_triad

SHARED = ROOT.parent / "shared" / "data"
HOTPOT = SHARED / "hotpotqa" / "hotpotqa_train100.json"


def serve(port_q, latency, judge_pass, sufficient_p):
    "Child process: the fake server with TRIAD field rules."
    from test_triad import fake_rules
    from ragbench.testing import FakeLLMServer
    with fake_rules(judge_pass=judge_pass, sufficient_p=sufficient_p), FakeLLMServer(latency=latency) as srv:
        port_q.put(srv.port)
        while True: time.sleep(3600)


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
    ap.add_argument("--judge-pass", type=float, default=0.81)
    ap.add_argument("--sufficient-p", type=float, default=0.09)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds-in-flight", type=int, default=None, help="TriadConfig.seeds_in_flight (default 1.5 x --concurrency)")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    report = {}
    if args.skip_throughput: return report
    from ragbench.index import ChunkIndex
    tmp = Path(tempfile.mkdtemp(prefix="bench_triad_"))
    t = time.perf_counter()
    index = ChunkIndex.build(tmp / "db", hotpot_chunks(HOTPOT, args.questions), args.embedder, progress=False)
    report.update(corpus_chunks=len(index), embedder=args.embedder, index_build_s=round(time.perf_counter() - t, 1))
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
