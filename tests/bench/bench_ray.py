"""Benchmark of ragbench.scale on this machine: indexing throughput in one process vs on Ray (with peak memory of
the driver and of each Ray worker, at two corpus sizes), Ray's scheduling overhead per shard, and generation wall
time over the ideal with 2 workers against the fake LLM server.

    python tests/bench/bench_ray.py [--chunks 200 800] [--latency 2.0] [--in-flight 16] [--waves 4]

1. Indexing: the first N chunks (pack mode, 256-token target) of the Git docs in ../shared/data (else the
   bundled sample, repeated) are embedded with the bundled all-MiniLM-L6-v2 by `ChunkIndex.build` and by
   `build_index_on_ray` on a local cluster of 2 CPUs (model load included in both; Ray's cluster start is
   not). Chunks/s for each, the driver's peak RSS and the largest Ray worker RSS (sampled every 0.2 s).
   On 2 cores expect parity: the point is that the same command spreads over a cluster's cores.
2. Scheduling overhead: a no-LLM method (each task returns at once) over 256 tasks in shards of 64, then of 4;
   (wall on Ray - wall in one process) / shards for each, and the marginal cost of a shard between the two.
3. Generation: `OneChunkQuestions` against the fake server with `--latency` seconds per reply, 2 workers x
   `--in-flight` tasks, `--waves` waves (2 x in_flight x waves tasks, one call each): wall / ideal, where
   ideal = waves x latency. Twice: cold (each worker imports the OpenAI SDK and opens its clients), then warm; and in
   one process with 2 x in_flight in flight, as the baseline under the same machine load.
"""
import argparse, asyncio, os, resource, sys, tempfile, threading, time
from itertools import islice
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
try: import ragbench  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ragbench.core import Chunk
from ragbench.corpus import Document, chunk_documents, load_documents, sample_corpus_path
from ragbench.gen.base import GenerationMethod, OneChunkQuestions, Task, TaskResult, run_generation
from ragbench.index import ChunkIndex
from ragbench.llm import make_llm
from ragbench.scale import build_index_on_ray
from ragbench.scale.gen import RayExecutor
from ragbench.scale.cluster import connect, _disconnect
from ragbench.testing import FakeLLMServer

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "gitdocs" / "git_docs.jsonl"


def peak_mb() -> float: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class WorkerMemory:
    "Samples the RSS of Ray worker processes (cmdline starting with 'ray::') in a thread; keeps the largest."
    def __init__(self): self.peak, self._stop = 0.0, threading.Event()
    def __enter__(self):
        import psutil
        def loop():
            while not self._stop.wait(0.2):
                for p in psutil.process_iter(["cmdline", "memory_info"]):
                    cmd = " ".join(p.info["cmdline"] or [])
                    if cmd.startswith("ray::") and p.info["memory_info"]: self.peak = max(self.peak, p.info["memory_info"].rss / 2**20)
        self._t = threading.Thread(target=loop, daemon=True); self._t.start(); return self
    def __exit__(self, *a): self._stop.set(); self._t.join()


def documents(n_chunks: int) -> list[Document]:
    "Documents whose chunks (target 256 tokens) number at least n_chunks."
    src = SHARED if SHARED.exists() else sample_corpus_path()
    docs, got, rep = [], 0, 0
    while got < n_chunks:
        for d in load_documents(src):
            d = Document(f"{d.id}#{rep}", d.title, d.text, d.meta)
            docs.append(d); got += sum(1 for _ in chunk_documents([d], target_tokens=256, min_tokens=50))
            if got >= n_chunks: break
        rep += 1
    return docs


def bench_index(n: int, tmp: Path) -> dict:
    docs = documents(n)
    chunks = list(chunk_documents(docs, target_tokens=256, min_tokens=50))
    t0 = time.time(); ChunkIndex.build(tmp / f"one{n}", chunks, progress=False, tune=True); one = time.time() - t0
    with WorkerMemory() as wm:
        t0 = time.time()
        idx = build_index_on_ray(docs, tmp / f"ray{n}", chunking=dict(target_tokens=256, min_tokens=50), progress=False)
        on_ray = time.time() - t0
    assert len(idx) == len(chunks)
    return {"chunks": len(chunks), "one process chunks/s": round(len(chunks) / one, 1), "ray chunks/s": round(len(chunks) / on_ray, 1),
            "ray / one": round(one / on_ray, 2), "driver peak MB": round(peak_mb()), "largest worker MB": round(wm.peak)}


class Instant(GenerationMethod):
    "A method without LLM calls: every task is accepted at once (measures the executor alone)."
    name = "instant"
    def __init__(self, n): self.n = n
    def plan(self, index, results): return [Task(id=f"i{i}", position=i) for i in range(self.n)]
    async def run_task(self, task, index): return TaskResult(task_id=task.id, position=task.position, outcome="empty")


def bench_overhead(idx, tmp: Path, n_tasks: int, size: int) -> dict:
    t0 = time.time(); run_generation(Instant(n_tasks), idx, tmp / f"inst-local-{size}", progress=False); local = time.time() - t0
    ex = RayExecutor(in_flight=16, shard_size=size)
    t0 = time.time(); run_generation(Instant(n_tasks), idx, tmp / f"inst-ray-{size}", executor=ex, progress=False); wall = time.time() - t0
    shards = ex.last_run["shards"]
    return {"tasks": n_tasks, "shards": shards, "local s": round(local, 2), "ray s": round(wall, 2),
            "overhead per shard ms": round(1000 * (wall - local) / shards, 1)}


def bench_generation(idx, tmp: Path, latency: float, in_flight: int, waves: int, tag: str) -> dict:
    n = 2 * in_flight * waves
    with FakeLLMServer(latency=latency) as srv:
        llm = make_llm(f"openai:{srv.url}/v1@fake", max_concurrency=in_flight)
        ex = RayExecutor(in_flight=in_flight, workers=2, shard_size=in_flight * waves)
        t0 = time.time()
        s = run_generation(OneChunkQuestions(llm, n=n, max_tasks=n), idx, tmp / f"gen-{tag}", executor=ex, progress=False)
        wall = time.time() - t0
    ideal = waves * latency
    return {"run": tag, "tasks": n, "calls": s["llm"]["calls"], "wall s": round(wall, 2), "ideal s": ideal, "wall / ideal": round(wall / ideal, 2)}


def bench_local(idx, tmp: Path, latency: float, in_flight: int, waves: int) -> dict:
    "The same generation in one process with 2 x in_flight tasks in flight (the baseline under the same machine load)."
    from ragbench.gen.base import LocalExecutor
    n = 2 * in_flight * waves
    with FakeLLMServer(latency=latency) as srv:
        llm = make_llm(f"openai:{srv.url}/v1@fake", max_concurrency=2 * in_flight)
        t0 = time.time()
        run_generation(OneChunkQuestions(llm, n=n, max_tasks=n), idx, tmp / "gen-local", executor=LocalExecutor(2 * in_flight), progress=False)
        wall = time.time() - t0
    return {"run": "one process", "tasks": n, "wall s": round(wall, 2), "ideal s": waves * latency, "wall / ideal": round(wall / (waves * latency), 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, nargs="*", default=[200, 800], help="corpus sizes to index (none: skip indexing)")
    ap.add_argument("--latency", type=float, default=2.0)
    ap.add_argument("--in-flight", type=int, default=16)
    ap.add_argument("--waves", type=int, default=4)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    t0 = time.time(); connect("local", num_cpus=2); print(f"local Ray cluster (2 CPUs) started in {time.time() - t0:.1f} s")
    try:
        for n in a.chunks: print("indexing:", bench_index(n, tmp))
        idx = ChunkIndex.build(tmp / "gen-db", [Chunk(id=f"c{i:04d}", doc_id="d", text=f"Fact {i}: item {i} weighs {i * 7} g.")
                                               for i in range(2 * a.in_flight * a.waves)], "hash:64", progress=False)
        run_generation(Instant(64), idx, tmp / "warm-up", executor=RayExecutor(shard_size=8), progress=False)   # start the workers
        small, big = (bench_overhead(idx, tmp, 256, size) for size in (64, 4))
        for r in (small, big): print("scheduling:", r)
        print(f"scheduling: marginal overhead per shard {1000 * (big['ray s'] - small['ray s']) / (big['shards'] - small['shards']):.0f} ms")
        print("generation:", bench_local(idx, tmp, a.latency, a.in_flight, a.waves))
        for tag in ("cold", "warm"): print("generation:", bench_generation(idx, tmp, a.latency, a.in_flight, a.waves, tag))
        print(f"driver peak RSS: {peak_mb():.0f} MB")
    finally:
        _disconnect()


if __name__ == "__main__":
    main()
