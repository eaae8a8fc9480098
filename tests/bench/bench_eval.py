"""Benchmark of evaluation scoring throughput with LLM judges on the fake server (a script, not a test).

    python tests/bench/bench_eval.py [--n 100] [--latency 0.05] [--concurrency 16] [--batch-size 16] [--embedder hash:256]

Dataset: the first N shared HotpotQA questions (`ragbench.benchmarks`), their paragraphs indexed once with
`--embedder` (default the model-free `hash:256`, so the figures are about scoring, not embedding; pass
`default` for all-MiniLM-L6-v2). Judges (correctness, faithfulness, keypoints = 2 calls) run through
`make_llm("openai:URL/v1@fake")` against `FakeLLMServer` in a child process with `--latency` seconds per reply.
Scenarios, each in a fresh evaluation folder:
  answers          the user's own answers file (no retrieval, no answering LLM): judges + text metrics only
  answers+bert     the same plus BERTScore recall (encoder loaded before timing)
  rag              built-in RAG: dense retrieval + answering LLM on the fake server + judges
  rag-resume       `rag` again on the same folder after deleting scores.jsonl: every call from the judge cache
A 5-item untimed warm-up run pays the one-off imports and HTTP client start-up first.
Figures: items/s, judge+answer LLM requests/s, CPU ms per item, the ideal items/s when only LLM latency
limited it (concurrency / (latency * sequential LLM rounds per item)), process peak RSS and tracemalloc peak.

Issue 42, evaluation at the speed of the LLM (`--speed`, one run, `uptime` beside every timing):

    python tests/bench/bench_eval.py --speed --before-src DIR [--n 40] [--latency 2] [--concurrency 16]

  imports   wall seconds of `ragbench --help`, `report --help`, `compare --help`, `validity --help` in a fresh
            interpreter each, and whether any loaded torch / sentence-transformers / transformers
  speed     the issue's evaluation: N HotpotQA items x a dense and a hybrid setup on one MiniLM index, answering LLM
            and judges on the fake server at `--latency` s, BERTScore and answer similarity on; each code version in
            its own interpreter (a 4-item untimed warm-up first) against one server in a third process, so the CPU
            counted is the evaluation's own. wall / ideal, where ideal = requests x latency / concurrency;
            CPU ms per scored row. `--before-src DIR` re-measures the old code in the same run (DIR holds its
            `ragbench/`, e.g. `git archive main ragbench | tar -x -C DIR`; repeatable); it gets the same 16 requests
            in flight through its LLM factory (its command line had 8). Then the largest difference of each old
            version's scores from this one's, row by row.
"""
import argparse, json, multiprocessing as mp, os, resource, shutil, subprocess, sys, tempfile, time, tracemalloc
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
SRC = Path(os.environ.get("RAGBENCH_BENCH_SRC") or ROOT)   # the code measured (--before-src runs a child on the old)
sys.path.insert(0, str(SRC))
from ragbench.core import Dataset
from ragbench.eval import Setup
from ragbench.eval import evaluate
from ragbench.testing import FakeLLMServer
from ragbench.llm import make_llm
from ragbench.benchmarks import load_static, index_static

HOTPOT = ROOT.parent / "shared" / "data" / "hotpotqa" / "hotpotqa_train100.json"


def serve(port_q, latency):
    "Child process: run the fake server and report its port."
    with FakeLLMServer(latency=latency) as srv:
        port_q.put(srv.port)
        while True: time.sleep(3600)


def requests_served(url):
    import urllib.request
    with urllib.request.urlopen(url + "/stats") as r: return json.loads(r.read())["requests"]


def run(name, ds, setups, out, url, a, *, bertscore=False, keep=False):
    "One timed evaluate(); returns a dict of figures."
    if not keep and out.exists(): shutil.rmtree(out)
    factory = lambda spec: make_llm(spec, cache_dir=out / "cache", max_concurrency=a.concurrency)
    judge = f"openai:{url}/v1@fake"
    r0, t0, c0 = requests_served(url), time.perf_counter(), time.process_time()
    summ = evaluate(ds, setups, out, llm_factory=factory, judge_llm=judge, bertscore=bertscore,
                    batch_size=a.batch_size, concurrency=a.concurrency)
    wall, cpu, reqs = time.perf_counter() - t0, time.process_time() - c0, requests_served(url) - r0
    n = summ["new_rows"]
    fails = sum(sum(v.values()) for v in summ["judge_failures"].values())
    return {"scenario": name, "rows": n, "wall_s": round(wall, 2), "items_per_s": round(n / wall, 1),
            "llm_requests": reqs, "requests_per_s": round(reqs / wall, 1), "cpu_ms_per_item": round(1000 * cpu / max(n, 1), 1),
            "judge_failures": fails}


def load() -> str:
    "The machine's load averages, as `uptime` prints them."
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


HEAVY = ("torch", "sentence_transformers", "transformers")

def import_times(sources: list) -> None:
    "Wall seconds of the torch-free commands' start in a fresh interpreter each, and the heavy modules they loaded."
    print(f"\nimports of the commands that never embed (a fresh interpreter each; load {load()}):")
    code = "import sys; from ragbench.cli import main\ntry: main({argv!r})\nexcept SystemExit: pass\n" \
           "print([m for m in {heavy!r} if m in sys.modules])"
    for label, src in sources:
        env = {**os.environ, "PYTHONPATH": src}
        for argv in (["--help"], ["report", "--help"], ["compare", "--help"], ["validity", "--help"]):
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code.format(argv=argv, heavy=HEAVY)], capture_output=True,
                                 text=True, env=env).stdout.strip().splitlines()[-1]
            print(f"  {label:<7} ragbench {' '.join(argv):<16} {time.perf_counter() - t:6.2f} s   heavy modules loaded: "
                  f"{out}   (load {load()})")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, sentence_transformers"], check=True)
    print(f"  for scale, `import torch, sentence_transformers` alone: {time.perf_counter() - t:.2f} s   "
          f"(load {load()})")


def speed_child(a) -> None:
    "One code version's evaluation (run in its own interpreter): prints a JSON line of its figures."
    import ragbench.eval.run as R
    ds = load_static(HOTPOT, "hotpotqa", limit=a.n)
    url, db, out = a.url, a.db, Path(a.out)
    setups = [Setup(name="dense", db=db, top_k=5, llm=f"openai:{url}/v1@fake"),
              Setup(name="hybrid", db=db, top_k=5, retrieval="hybrid", llm=f"openai:{url}/v1@fake")]
    new = hasattr(R, "_batches_in_flight")     # the in-flight setting of issue 42; the old code had batches
    kw = dict(concurrency=a.concurrency) if new else dict(batch_size=16, parallel_batches=4)
    def ev(items, folder):
        factory = lambda spec: make_llm(spec, cache_dir=folder / "cache", max_concurrency=a.concurrency)
        return evaluate(items, setups, folder, llm_factory=factory, judge_llm=f"openai:{url}/v1@fake", **kw)
    ev(Dataset(ds.items[:4]), out / "warm")                 # model loads, the HTTP client: untimed
    r0, t0, c0 = requests_served(url), time.perf_counter(), time.process_time()
    summ = ev(ds, out / "timed")
    wall, cpu, reqs = time.perf_counter() - t0, time.process_time() - c0, requests_served(url) - r0
    print(json.dumps({"rows": summ["new_rows"], "requests": reqs, "wall_s": wall, "cpu_s": cpu,
                      "errors": sum(summ["errors"].values()), "load": load()}))


def sources(a) -> list:
    "(label, folder of its ragbench/) of the code versions measured: the old ones if given, then this one."
    befores = a.before_src or []
    return [("before" if len(befores) == 1 else f"before{i + 1}", d) for i, d in enumerate(befores)] + [("after", str(ROOT))]


def score_differences(tmp: Path, labels: list) -> None:
    "How far each version's scores are from the last one's (the same rows: item, setup, mode), metric by metric."
    def rows(label):
        out = {}
        for line in (tmp / f"speed-{label}" / "timed" / "scores.jsonl").read_text().splitlines():
            r = json.loads(line)
            out[(r["item_id"], r["setup"], r["mode"])] = r["metrics"]
        return out
    last = rows(labels[-1])
    for label in labels[:-1]:
        other, worst, unequal = rows(label), 0.0, 0
        for key, m in last.items():
            for name, v in m.items():
                w = (other.get(key) or {}).get(name)
                if isinstance(v, (int, float)) and isinstance(w, (int, float)): worst = max(worst, abs(v - w))
                elif v != w: unequal += 1
        print(f"scores of {label} vs {labels[-1]}: {len(other)} vs {len(last)} rows, largest difference of a numeric "
              f"metric {worst:.1e}, other values unequal: {unequal}")


def speed(a, url: str, tmp: Path) -> None:
    "The issue-42 evaluation, the old code (if given) and this one, each in its own interpreter against one server."
    ds = load_static(HOTPOT, "hotpotqa", limit=a.n)
    index_static(HOTPOT, "hotpotqa", tmp / "mini", embedder=None,
                 only_ids={c.chunk_id for it in ds for c in it.contexts})
    print(f"\nevaluation: {a.n} HotpotQA items x 2 setups (dense, hybrid; MiniLM), answers + judges + BERTScore + "
          f"similarity; fake server {a.latency} s, {a.concurrency} in flight")
    print(f"{'code':<8}{'rows':>6}{'requests':>10}{'wall_s':>9}{'ideal_s':>9}{'wall/ideal':>12}{'cpu ms/row':>12}"
          f"{'cpu ms/req':>12}{'errors':>8}   load at the end (uptime)")
    for label, src in sources(a):
        env = {**os.environ, "RAGBENCH_BENCH_SRC": src, "PYTHONPATH": src}
        argv = [sys.executable, __file__, "--speed-child", "--url", url, "--db", str(tmp / "mini"), "--out",
                str(tmp / f"speed-{label}"), "--n", str(a.n), "--concurrency", str(a.concurrency)]
        started = load()
        res = subprocess.run(argv, capture_output=True, text=True, env=env)
        if res.returncode: sys.exit(f"{label}: {res.stderr[-3000:]}")
        r = json.loads(res.stdout.strip().splitlines()[-1])
        ideal = r["requests"] * a.latency / a.concurrency
        print(f"{label:<8}{r['rows']:>6}{r['requests']:>10}{r['wall_s']:>9.1f}{ideal:>9.1f}{r['wall_s'] / ideal:>12.2f}"
              f"{1000 * r['cpu_s'] / r['rows']:>12.1f}{1000 * r['cpu_s'] / r['requests']:>12.1f}{r['errors']:>8}   "
              f"{r['load']} (at the start: {started})")
    score_differences(tmp, [label for label, _ in sources(a)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, help="items (default 100; --speed: 40)")
    p.add_argument("--latency", type=float, help="seconds per fake reply (default 0.05; --speed: 2)")
    p.add_argument("--concurrency", type=int, default=16); p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--embedder", default="hash:256"); p.add_argument("--skip-bert", action="store_true")
    p.add_argument("--speed", action="store_true", help="issue 42: imports, then wall / ideal and CPU per row")
    p.add_argument("--before-src", action="append", help="with --speed: a folder holding an old code's ragbench/, "
                   "measured too (repeatable: before1, before2 ...)")
    p.add_argument("--speed-child", action="store_true", help=argparse.SUPPRESS)
    for f in ("--url", "--db", "--out"): p.add_argument(f, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.speed_child: return speed_child(a)
    a.n, a.latency = a.n or (40 if a.speed else 100), (2.0 if a.speed else 0.05) if a.latency is None else a.latency
    if a.speed:
        import_times(sources(a))
        tmp = Path(tempfile.mkdtemp(prefix="rb-bench-eval-"))
        q = mp.get_context("spawn").Queue()
        srv = mp.get_context("spawn").Process(target=serve, args=(q, a.latency), daemon=True); srv.start()
        try: speed(a, f"http://127.0.0.1:{q.get(timeout=60)}", tmp)
        finally: srv.terminate(); shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp = Path(tempfile.mkdtemp(prefix="rb-bench-eval-"))
    q = mp.get_context("spawn").Queue()
    srv = mp.get_context("spawn").Process(target=serve, args=(q, a.latency), daemon=True); srv.start()
    url = f"http://127.0.0.1:{q.get(timeout=60)}"
    try:
        t = time.perf_counter()
        ds = load_static(HOTPOT, "hotpotqa", limit=a.n)
        idx = index_static(HOTPOT, "hotpotqa", tmp / "db", embedder=a.embedder,
                           only_ids={c.chunk_id for it in ds for c in it.contexts})
        print(f"{len(ds)} HotpotQA items, {len(idx)} paragraphs indexed with {a.embedder} in {time.perf_counter() - t:.1f}s; "
              f"fake server latency {a.latency}s, LLM concurrency {a.concurrency}, batch {a.batch_size}")
        # the user's own answers: the gold paragraphs' first retrieved ids and a short answer
        ans = tmp / "answers.jsonl"
        ans.write_text("".join(json.dumps({"item_id": it.id, "answer": f"It is {it.answer}.",
                                           "retrieved_chunk_ids": [c.chunk_id for c in it.contexts][:5]}) + "\n" for it in ds))
        ext = [Setup(name="mine", answers=str(ans), db=str(tmp / "db"))]
        rag = [Setup(name="rag", db=str(tmp / "db"), top_k=5, llm=f"openai:{url}/v1@fake")]
        rows = []
        run("warm-up", Dataset(ds.items[:5]), ext, tmp / "ev_warm", url, a)   # one-off imports and client start-up, untimed
        rows.append(run("answers", ds, ext, tmp / "ev_answers", url, a))
        if not a.skip_bert:
            from ragbench.eval.metrics import bertscore_recall
            bertscore_recall(["warm up"], ["the encoder"])  # load the encoder before timing
            rows.append(run("answers+bert", ds, ext, tmp / "ev_bert", url, a, bertscore=True))
        rows.append(run("rag", ds, rag, tmp / "ev_rag", url, a))
        (tmp / "ev_rag" / "scores.jsonl").unlink()
        rows.append(run("rag-resume", ds, rag, tmp / "ev_rag", url, a, keep=True))
        # per item: correctness, faithfulness and keypoint extraction, then keypoint judging = 4 calls in 2 sequential
        # rounds (rag: 5 calls, 3 rounds, the answer first). Ideal items/s = min(C / (calls * L), batch / (rounds * L)).
        shape = {"answers": (4, 2), "answers+bert": (4, 2), "rag": (5, 3), "rag-resume": (0, 0)}
        print(f"\n{'scenario':<14}{'rows':>6}{'wall_s':>9}{'items/s':>9}{'ideal':>8}{'LLM req':>9}{'req/s':>8}{'cpu ms/item':>13}{'fails':>7}")
        for r in rows:
            calls, rounds = shape[r["scenario"]]
            ideal = min(a.concurrency / (calls * a.latency), a.batch_size / (rounds * a.latency)) if calls and a.latency else float("inf")
            print(f"{r['scenario']:<14}{r['rows']:>6}{r['wall_s']:>9}{r['items_per_s']:>9}{ideal:>8.0f}{r['llm_requests']:>9}"
                  f"{r['requests_per_s']:>8}{r['cpu_ms_per_item']:>13}{r['judge_failures']:>7}")
        tracemalloc.start()
        run("answers", ds, ext, tmp / "ev_trace", url, a)   # untimed: tracemalloc slows Python down
        _, peak_answers = tracemalloc.get_traced_memory(); tracemalloc.stop()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\npeak RSS {rss:.0f} MB (whole process, includes torch/LanceDB{'' if a.skip_bert else ' and the BERTScore encoder'}); "
              f"tracemalloc peak of the 'answers' run {peak_answers / 1e6:.1f} MB")
    finally:
        srv.terminate(); shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
