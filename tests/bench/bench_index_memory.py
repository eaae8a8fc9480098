"""Peak memory of one-process indexing against corpus size (issue 23: flat, <= 1.2x from 100k to 1M chunks).

    python tests/bench/bench_index_memory.py [--sizes 100000,1000000] [--mode build|sync|resync]

Each size runs in a fresh subprocess: N synthetic chunks (about 600 characters each, made unique) stream from a
generator into `ChunkIndex.build` with the model-free `hash` embedder (ragbench's own cost, no model) and `tune=True`,
the process tuning `ragbench index` asks for (two malloc arenas, two LanceDB IO threads while the lock is held). Printed per
size: chunks, wall seconds, chunks/s, the process's peak RSS (ru_maxrss) and its RSS before the build (imports),
and the ratio of each peak to the smallest size's. `--mode sync` passes `source=` (the path `ragbench index` takes:
`sync`); `--mode resync` builds the table in one process, then measures a second `sync` of the same chunks in a fresh
one (a re-index of an unchanged corpus: everything stored is read, nothing is embedded).
"""
import argparse, json, os, resource, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[4])
from ragbench.core import Chunk
from ragbench.index import ChunkIndex
n, db, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
WORDS = "commit branch merge rebase tag remote stash index tree blob object reference history patch diff".split()
def chunks():
    for i in range(n):
        words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(80))
        yield Chunk(id=f"c{i:08d}", doc_id=f"d{i // 20:07d}", text=f"Chunk {i}. {words}",
                    meta={"source": "bench/d%07d.md" % (i // 20), "position": i % 20})
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
ChunkIndex.build(db, chunks(), "hash", progress=False, source=None if mode == "build" else "bench", tune=True)
wall = time.perf_counter() - t
print(json.dumps({"chunks": n, "wall_s": wall, "base_mb": base,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_size(n: int, mode: str) -> dict:
    "Index `n` chunks in a fresh process; its figures."
    with tempfile.TemporaryDirectory() as d:
        for _ in range(2 if mode == "resync" else 1):          # resync: the second run is the one measured
            r = subprocess.run([sys.executable, "-c", CHILD, str(n), str(Path(d) / "db"), mode, str(ROOT)],
                               capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if r.returncode: raise SystemExit(r.stderr[-3000:])
        return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--mode", choices=("build", "sync", "resync"), default="build")
    a = ap.parse_args()
    rows = [run_size(int(s), a.mode) for s in a.sizes.split(",")]
    print(f"{'chunks':>9} {'wall s':>8} {'chunks/s':>9} {'base MB':>8} {'peak MB':>8} {'peak ratio':>10}")
    for r in rows:
        print(f"{r['chunks']:>9} {r['wall_s']:>8.1f} {r['chunks'] / r['wall_s']:>9.0f} {r['base_mb']:>8.0f} "
              f"{r['peak_mb']:>8.0f} {r['peak_mb'] / rows[0]['peak_mb']:>10.2f}")
    print(f"mode {a.mode}; goal: peak ratio <= 1.2 from 100k to 1M chunks (issue 23)")


if __name__ == "__main__":
    main()
