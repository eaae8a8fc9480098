"""Provider batch mode (issue 42): requests per batch job, jobs per run and wall time of a small TRIAD run against the
fake server's batch API, beside the same run unbatched. Prints, never asserts.

    python tests/bench/bench_batch.py [--n 12] [--docs 40] [--concurrency 8,16,64] [--poll 0.05]

A batch job's wall time at a real provider is minutes to hours, so what sets a batch run's wall time there is the
number of jobs that follow one another (a TRIAD seed waits on several rounds of requests): `jobs` is that figure's
upper bound; the fake answers a job at its first poll.
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
HOTPOT = ROOT.parent / "shared" / "data" / "hotpotqa" / "hotpotqa_train100.json"


def run(db, out, url, n, concurrency, *extra) -> float:
    "Wall seconds of one `ragbench triad` process."
    cmd = [sys.executable, "-m", "ragbench.cli", "triad", "--db", str(db), "--out", str(out), "--llm",
           f"openai:{url}/v1@fake-model", "--n", str(n), "--concurrency", str(concurrency), *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--concurrency", default="8,16,64")
    ap.add_argument("--poll", default="0.05")
    a = ap.parse_args()
    from ragbench.corpus import hotpot_chunks
    from ragbench.index import ChunkIndex
    from ragbench.testing import FakeLLMServer
    tmp = Path(tempfile.mkdtemp())
    db = ChunkIndex.build(tmp / "db", hotpot_chunks(HOTPOT, a.docs), "hash", progress=False).db_dir
    print(f"uptime: {os.getloadavg()[0]:.1f} (1-min load); HotpotQA {a.docs} docs, hash embedder, n {a.n}")
    print(f"{'concurrency':>11} {'mode':>6} {'requests':>8} {'jobs':>5} {'per job':>7} {'max':>4} {'wall s':>7}")
    for c in map(int, a.concurrency.split(",")):
        for mode in ("plain", "batch"):
            with FakeLLMServer() as srv:
                out = tmp / f"{mode}{c}"
                extra = ("--provider-batch", "--batch-poll", a.poll) if mode == "batch" else ()
                wall = run(db, out, srv.url, a.n, c, *extra)
                st = srv.stats()
            jobs = [len(j["keys"]) for j in map(json.loads, open(out / "batches.jsonl")) if "keys" in j] if \
                mode == "batch" else []
            per = f"{sum(jobs) / len(jobs):.1f}" if jobs else "-"
            print(f"{c:>11} {mode:>6} {st['requests']:>8} {len(jobs) or '-':>5} {per:>7} {max(jobs, default='-'):>4} "
                  f"{wall:>7.1f}")


if __name__ == "__main__":
    main()
