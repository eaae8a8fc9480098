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
"""
import argparse, json, multiprocessing as mp, os, resource, shutil, sys, tempfile, time, tracemalloc
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
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
                    batch_size=a.batch_size)
    wall, cpu, reqs = time.perf_counter() - t0, time.process_time() - c0, requests_served(url) - r0
    n = summ["new_rows"]
    fails = sum(sum(v.values()) for v in summ["judge_failures"].values())
    return {"scenario": name, "rows": n, "wall_s": round(wall, 2), "items_per_s": round(n / wall, 1),
            "llm_requests": reqs, "requests_per_s": round(reqs / wall, 1), "cpu_ms_per_item": round(1000 * cpu / max(n, 1), 1),
            "judge_failures": fails}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=100); p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--concurrency", type=int, default=16); p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--embedder", default="hash:256"); p.add_argument("--skip-bert", action="store_true")
    a = p.parse_args()
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
