"""Benchmark of the TRIAD pipeline (a script, not a test).

    python tests/bench/bench_triad.py [--n 150] [--latency 0.2] [--concurrency 16] [--questions 60] [--embedder default]
    python tests/bench/bench_triad.py --corpus gitdocs --embedder hash --n 40 --latency 0.05 --compare /tmp/before

`--corpus gitdocs`: the Git documentation (`/work/shared/data/gitdocs`, chunked as `ragbench index` does) instead of
HotpotQA paragraphs. `--under TREE`: run the code of another checkout (e.g. `git archive main | tar -x -C /tmp/before`),
with this checkout's `fake_rules` (tests/test_triad.py pins the hash of what decides the fake's replies, and it is the
same on main at dfbff06). `--compare TREE`: run that tree, then this one, each in its own process on the same corpus
and seed, and print requests and tokens per accepted question and per attempt, by stage, side by side, with the load
average beside each (issue 42's goal: at most 9 requests and 25k tokens per accepted question).

Throughput: `run_triad` against `ragbench.testing.FakeLLMServer` (child process, fixed latency, field rules giving
the paper's rates: 81% of attempts pass the judge, 9% of groups "sufficient") through the real OpenAI client
(`openai:URL/v1@fake-model`) at concurrency C. Figures: wall time vs the ideal requests x latency / C, the server's
own request count vs the summary's, and real requests and tokens per accepted question and per attempt, by stage.
Peak memory (RSS) of this process is printed too.

`--timeline` adds the requests the server received in each latency-long window (16 a window is every slot busy at 16
in flight; the windows after the last full one are the drain). `--entity-group G` and `--pace P` set
`TriadConfig.entity_group` and the seed pacer's pace, for studies of the requests against the drain.

(The pre-check study this script ran until issue 41 went with the pre-check: it passed every configuration a run
offered, so it saved no call; `bench_pairing.py` has the figures.)
"""
import argparse, json, multiprocessing as mp, os, resource, sys, tempfile, time, urllib.request
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
if "--under" in sys.argv: ROOT = Path(sys.argv[sys.argv.index("--under") + 1]).resolve()   # the code under test
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.corpus import hotpot_chunks
from ragbench.llm import arun, make_llm
from ragbench.triad import TriadConfig, arun_triad

SHARED = HERE.parents[3] / "shared" / "data"      # beside this checkout, whichever tree runs (`--under`)
HOTPOT = SHARED / "hotpotqa" / "hotpotqa_train100.json"
GITDOCS = HERE.parents[3] / "shared" / "data" / "gitdocs" / "git_docs.jsonl"


def serve(port_q, latency, judge_pass, sufficient_p):
    "Child process: the fake server with TRIAD field rules."
    sys.path.insert(0, str(HERE.parents[1]))   # this checkout's tests: its fake rules (their hash is pinned)
    from test_triad import fake_rules
    from ragbench.testing import FakeLLMServer
    with fake_rules(judge_pass=judge_pass, sufficient_p=sufficient_p), FakeLLMServer(latency=latency) as srv:
        port_q.put(srv.port)
        while True: time.sleep(3600)


async def throughput(index, url, args, run_dir):
    llm = make_llm(f"openai:{url}/v1@fake-model", max_concurrency=args.concurrency, cache_dir=Path(run_dir) / "cache")
    if args.pace is not None:        # a study of the pacer (requests vs the tail's idle slots), not a run setting
        from ragbench.triad import run as triad_run
        triad_run._SeedPacer.__init__.__defaults__ = (None, args.pace)
    cfg = TriadConfig(n=args.n, max_seeds=args.n * 10, concurrency=args.concurrency, seeds_in_flight=args.seeds_in_flight, seed=args.seed,
                     **({"entity_group": args.entity_group} if args.entity_group else {}))
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
    ap.add_argument("--pace", type=float, default=None, help="the seed pacer's pace (default: the code's, 0.6): seeds "
                    "running ahead may bring up to PACE x what is still needed")
    ap.add_argument("--entity-group", type=int, default=None, help="TriadConfig.entity_group (default: the code's)")
    ap.add_argument("--corpus", choices=("hotpotqa", "gitdocs"), default="hotpotqa")
    ap.add_argument("--under", default=None, help="a checkout whose ragbench runs (default: this one)")
    ap.add_argument("--compare", default=None, help="a checkout to run first as 'before', then this one as 'after'")
    ap.add_argument("--timeline", action="store_true", help="print the requests the server received per latency window "
                    "(16 per window at 16 in flight is a full slot)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line only")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    if args.compare: return compare(args)
    report = {}
    if args.skip_throughput: return report
    from ragbench.index import ChunkIndex
    tmp = Path(tempfile.mkdtemp(prefix="bench_triad_"))
    t = time.perf_counter()
    index = ChunkIndex.build(tmp / "db", corpus_chunks(args), args.embedder, progress=False)
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
        **cost_figures(summary), "corpus": args.corpus, "uptime": uptime(),
    }
    if args.timeline: report["throughput"]["requests_per_window"] = windows(stats["times"], args.latency)
    print(json.dumps(report["throughput"]) if args.json else json.dumps(report["throughput"], indent=1))
    return report


def corpus_chunks(args):
    "The benchmark's chunks: HotpotQA paragraphs, or the Git docs chunked like `ragbench index` does."
    if args.corpus == "hotpotqa": return hotpot_chunks(HOTPOT, args.questions)
    from ragbench.corpus import chunk_documents, load_documents
    return list(chunk_documents(load_documents(GITDOCS)))


def cost_figures(summary: dict) -> dict:
    "Requests and tokens per accepted question and per attempt, in all and by stage (from the run's own meter)."
    acc, att = max(summary["accepted"], 1), max(summary.get("attempts") or 0, 1)
    stages = summary["usage_by_stage"]
    tok = lambda r: r["input_tokens"] + r["output_tokens"]
    total = {"calls": summary["llm"]["calls"], "tokens": summary["llm"]["input_tokens"] + summary["llm"]["output_tokens"]}
    return {"attempts": summary.get("attempts"), "requests_per_accepted": round(total["calls"] / acc, 2),
            "tokens_per_accepted": round(total["tokens"] / acc), "requests_per_attempt": round(total["calls"] / att, 2),
            "tokens_per_attempt": round(total["tokens"] / att),
            "by_stage": {s: {"calls": r["calls"], "calls_per_accepted": round(r["calls"] / acc, 2),
                             "tokens_per_accepted": round(tok(r) / acc),
                             "input_tokens_per_call": round(r["input_tokens"] / max(r["calls"], 1))}
                         for s, r in stages.items()}}


def windows(times: list, width: float) -> list:
    "How many requests arrived in each `width`-second window from the first (at C in flight: C a window when full)."
    t0, out = min(times), []
    for t in times:
        i = int((t - t0) // width)
        out += [0] * (i + 1 - len(out))
        out[i] += 1
    return out


def uptime() -> str:
    "The load average, beside every timing."
    with open("/proc/loadavg") as f: return " ".join(f.read().split()[:3])


def compare(args):
    "Run `--compare TREE` (before) and this checkout (after) in turn, same arguments; print both side by side."
    import subprocess
    base = [a for a in sys.argv[1:]]
    i = base.index("--compare"); del base[i:i + 2]
    runs = {}
    for name, tree in (("before", args.compare), ("after", str(ROOT))):
        out = subprocess.run([sys.executable, str(HERE), *base, "--json", "--under", tree], capture_output=True,
                             text=True, check=True).stdout
        runs[name] = json.loads(out.strip().splitlines()[-1])
    b, a = runs["before"], runs["after"]
    print(f"corpus {args.corpus}, n {args.n}, seed {args.seed}, latency {args.latency}, concurrency {args.concurrency}")
    print(f"| | before | after | after / before |\n|---|---|---|---|")
    for k in ("accepted", "seeds_tried", "attempts", "server_requests", "summary_calls", "requests_per_accepted",
              "tokens_per_accepted", "requests_per_attempt", "tokens_per_attempt", "wall_s", "wall_over_ideal", "uptime"):
        r = round(a[k] / b[k], 2) if isinstance(a[k], (int, float)) and b[k] else ""
        print(f"| {k} | {b[k]} | {a[k]} | {r} |")
    print("\n| stage | calls/accepted before | after | tokens/accepted before | after | input tokens/call before | after |")
    print("|---|---|---|---|---|---|---|")
    for s in dict.fromkeys([*b["by_stage"], *a["by_stage"]]):
        x, y = b["by_stage"].get(s, {}), a["by_stage"].get(s, {})
        row = [x.get("calls_per_accepted", 0), y.get("calls_per_accepted", 0), x.get("tokens_per_accepted", 0),
               y.get("tokens_per_accepted", 0), x.get("input_tokens_per_call", 0), y.get("input_tokens_per_call", 0)]
        print(f"| {s} | " + " | ".join(map(str, row)) + " |")
    print(json.dumps(runs))
    return runs


if __name__ == "__main__":
    main()
