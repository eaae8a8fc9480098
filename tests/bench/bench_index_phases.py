"""Where one-process indexing's memory goes (issue 23): RSS during the writes and around each index build.

    python tests/bench/bench_index_phases.py [--rows 1000000]

The same synthetic chunks and `hash` embedder as `bench_index_memory.py`, streamed into `ChunkIndex.build`; prints the
peak (ru_maxrss) and current RSS every 200k chunks and before and after the duplicate repair, the full-text / B-tree
indices and the IVF-PQ vector index.
"""
import argparse, functools, resource, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ragbench.index import ChunkIndex  # noqa: E402

WORDS = "commit branch merge rebase tag remote stash index tree blob object reference history patch diff".split()
PHASES = ("remove_duplicates", "_ensure_indices", "ensure_vector_index")


def rss() -> str:
    "Peak and current RSS in MB."
    now = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20
    return f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB, now {now:.0f} MB"


def timed_phase(name: str):
    "Wrap `ChunkIndex.<name>` so it prints RSS before and after, and its seconds."
    f = getattr(ChunkIndex, name)
    @functools.wraps(f)
    def g(self, *a, **k):
        print(f"before {name}: {rss()}", flush=True); t = time.perf_counter()
        r = f(self, *a, **k)
        print(f"after  {name}: {rss()} ({time.perf_counter() - t:.0f} s)", flush=True); return r
    setattr(ChunkIndex, name, g)


def chunks(n: int):
    "N synthetic chunks of about 600 characters (as bench_index_memory.py), printing RSS every 200k."
    from ragbench.core import Chunk
    for i in range(n):
        if i % 200_000 == 0: print(f"at {i:,} chunks: {rss()}", flush=True)
        yield Chunk(id=f"c{i:08d}", doc_id=f"d{i // 20:07d}",
                    text=f"Chunk {i}. " + " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(80)),
                    meta={"source": "bench/d%07d.md" % (i // 20), "position": i % 20})


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    a = ap.parse_args()
    for p in PHASES: timed_phase(p)
    ChunkIndex.build(tempfile.mkdtemp(), chunks(a.rows), "hash", progress=False, tune=True)   # as `ragbench index`
    print(f"end: {rss()}")
