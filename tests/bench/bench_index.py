"""Benchmark of ChunkIndex: build throughput against raw embedding, search latency at 20k chunks, peak memory.

    python tests/bench/bench_index.py [--rows 20000] [--queries 20] [--repeat 3]

1. Throughput: the bundled Git sample is chunked (pack mode, ~190 chunks); the same chunk texts are
   embedded with `embedder.encode()` alone and indexed with `ChunkIndex.build` (embedding + LanceDB
   writes + FTS/B-tree indices), with the same model, already loaded. Best of `--repeat` interleaved
   runs each, as wall-clock chunks/s and as chunks per CPU-second of this process (the CPU figure is
   the steadier one on a shared machine). Goal: build >= 0.9x the raw encode throughput.
2. Latency: a `--rows` table is built from the sample's chunk texts repeated (made unique) with random
   unit vectors (so building it takes seconds, not an hour of embedding), then dense / BM25 / hybrid
   searches are timed with the real model encoding each query (median and p95 over `--queries`
   queries; the query-encoding time alone is reported too, and the searches are timed again with
   precomputed query vectors to show the index's own latency).
3. Peak memory: ru_maxrss of this process after each phase.
"""
import argparse, os, resource, shutil, statistics, sys, tempfile, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import numpy as np

try: import ragbench  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # run from a source checkout
from ragbench.core import Chunk
from ragbench.corpus import chunk_documents, load_documents, sample_corpus_path
from ragbench.embed import _Embedder
from ragbench.index import ChunkIndex

QUERIES = ["how do I undo the last commit", "save uncommitted changes for later", "create a signed tag",
           "rebase my branch onto main", "list remote branches", "resolve a merge conflict",
           "push a new branch to the remote", "show the history of a file", "delete a local branch",
           "cherry-pick a commit from another branch", "fetch without merging", "amend the commit message",
           "switch to a new branch", "stage only part of a file", "clone a repository with submodules",
           "revert a merge commit", "stash only the staged changes", "initialise a bare repository",
           "show which files changed", "squash several commits into one"]


def peak_mb() -> float:
    "Peak resident memory of this process so far, in MB (Linux ru_maxrss is in kB)."
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RandomEmbedder:
    "Random unit vectors with the real model's name/dim: only for filling the latency table quickly."
    def __init__(self, like):
        self.name, self.spec, self.dim = like.name, like.spec, like.dim
        self.rng = np.random.default_rng(0)

    def encode(self, texts):
        v = self.rng.normal(size=(len(texts), self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def _timed(f):
    "(wall seconds, process CPU seconds) of calling f()."
    w, c = time.perf_counter(), time.process_time(); f()
    return time.perf_counter() - w, time.process_time() - c


class CachedEmbedder:
    "Returns precomputed query vectors, to time the index alone."
    def __init__(self, emb, texts):
        self.name, self.spec, self.dim = emb.name, emb.spec, emb.dim
        self.cache = dict(zip(texts, emb.encode(texts)))

    def encode(self, texts):
        return np.stack([self.cache[t] for t in texts])


def throughput(emb, chunks, repeat, tmp):
    "Best-of-`repeat` chunks/s (wall clock and per CPU-second) of raw encode and of ChunkIndex.build, interleaved."
    texts = [c.text for c in chunks]
    raw, build = [], []
    for r in range(repeat):
        raw.append(_timed(lambda: emb.encode(texts)))
        db = tmp / f"tp{r}"
        build.append(_timed(lambda: ChunkIndex.build(db, chunks, emb, progress=False)))
        assert len(ChunkIndex.open(db)) == len(chunks)
        shutil.rmtree(db)
    n = len(texts)
    return {k: (n / min(x[i] for x in raw), n / min(x[i] for x in build)) for i, k in enumerate(("wall", "cpu"))}


def latency_table(emb, chunks, rows, tmp):
    "A `rows`-chunk index with real texts (repeated) and random vectors."
    def gen():
        for i in range(rows):
            c = chunks[i % len(chunks)]
            yield Chunk(id=f"c-bench{i:07d}", doc_id=c.doc_id, text=f"{c.text}\n[copy {i // len(chunks)}]", meta=c.meta)
    t = time.perf_counter()
    idx = ChunkIndex.build(tmp / "lat", gen(), RandomEmbedder(emb), batch_size=2048, progress=False)
    idx.embedder = emb
    return idx, time.perf_counter() - t


def ms_stats(xs):
    xs = sorted(xs)
    return statistics.median(xs) * 1e3, xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))] * 1e3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20000); p.add_argument("--queries", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3); p.add_argument("--k", type=int, default=10)
    a = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rb-bench-"))
    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; peak RSS at start {peak_mb():.0f} MB")
        chunks = list(chunk_documents(load_documents(sample_corpus_path())))
        emb = _Embedder()
        t = time.perf_counter(); emb.encode(["warm up"]); load_s = time.perf_counter() - t
        print(f"corpus: {len(chunks)} chunks (bundled Git sample, pack mode); model {emb.name} loaded in {load_s:.1f} s; "
              f"peak RSS {peak_mb():.0f} MB")

        tp = throughput(emb, chunks, a.repeat, tmp)
        for k, unit in (("wall", "chunks/s"), ("cpu", "chunks per CPU-second")):
            raw, built = tp[k]
            print(f"\n[throughput, {k}] raw encode {raw:.1f} {unit} | ChunkIndex.build {built:.1f} {unit} | "
                  f"ratio {built / raw:.2f}x (goal >= 0.9x)", end="")
        print(f"\npeak RSS {peak_mb():.0f} MB")

        idx, build_s = latency_table(emb, chunks, a.rows, tmp)
        print(f"\n[latency] {len(idx)} chunks (random vectors, dim {idx.dim}) written + indexed in {build_s:.1f} s; "
              f"peak RSS {peak_mb():.0f} MB")
        qs = (QUERIES * (a.queries // len(QUERIES) + 1))[: a.queries]
        enc = []
        for q in qs:
            t = time.perf_counter(); emb.encode([q]); enc.append(time.perf_counter() - t)
        med, p95 = ms_stats(enc)
        print(f"  query encoding alone   median {med:6.1f} ms  p95 {p95:6.1f} ms")
        for mode in ("dense", "bm25", "hybrid"):
            idx.search(qs[0], k=a.k, mode=mode)            # warm caches / open the FTS index
            times = []
            for q in qs:
                t = time.perf_counter(); hits = idx.search(q, k=a.k, mode=mode); times.append(time.perf_counter() - t)
                assert len(hits) == a.k
            med, p95 = ms_stats(times)
            print(f"  search {mode:<7} k={a.k}  median {med:6.1f} ms  p95 {p95:6.1f} ms")
        idx.embedder = CachedEmbedder(emb, qs)
        for mode in ("dense", "bm25", "hybrid"):
            times = []
            for q in qs:
                t = time.perf_counter(); idx.search(q, k=a.k, mode=mode); times.append(time.perf_counter() - t)
            med, p95 = ms_stats(times)
            print(f"  search {mode:<7} k={a.k}  median {med:6.1f} ms  p95 {p95:6.1f} ms  (query vectors precomputed: index only)")
        idx.embedder = emb
        t = time.perf_counter(); n = sum(1 for _ in idx.iter_chunks()); it_s = time.perf_counter() - t
        t = time.perf_counter(); idx.get_many(idx.sample_ids(100, seed=0)); gm_s = time.perf_counter() - t
        print(f"  iter_chunks over {n} rows {it_s:.2f} s; get_many(100 random ids) {gm_s * 1e3:.0f} ms")
        print(f"\npeak RSS (ru_maxrss) {peak_mb():.0f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
