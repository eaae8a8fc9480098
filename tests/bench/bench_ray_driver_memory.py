"""Peak memory of the Ray driver against corpus size (issue 23: flat, <= 1.2x from 60k to 600k chunks).

    python tests/bench/bench_ray_driver_memory.py [--sizes 60000,600000] [--batch-chunks N] [--under TREE]

Each size runs in a fresh process that starts a local Ray cluster (2 CPUs) and calls `build_index_on_ray` on a JSONL
of synthetic documents (20 paragraphs of about 600 characters each, one chunk per paragraph) with the model-free
`hash` embedder, so what is measured is ragbench's driver, not a model. Printed per size: chunks, wall seconds,
chunks/s, the driver's peak RSS (ru_maxrss; the Ray workers are other processes) and its ratio to the smallest size's,
the same peak once the chunks are written, before the table's indexes are built (what the streaming costs), and at the end the driver's own heap (RssAnon) apart from the pages of Ray's shared object store it has mapped (RssShmem).
`--under TREE` imports ragbench from another source tree (e.g. a worktree of an older commit), for a before/after.
"""
import argparse, json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, sys, time
n, work, batch = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
from ragbench.scale import build_index_on_ray, connect
import ragbench.scale.index as scale_index
before_fts = [0.0]
def after(f):   # the driver's peak once the chunks are written, before the table's indexes are built
    def g(*a, **k):
        out = f(*a, **k)
        before_fts[0] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return out
    return g
if hasattr(scale_index, "settle"): scale_index.settle = after(scale_index.settle)
else: scale_index.TableWriter.flush = after(scale_index.TableWriter.flush)   # an older tree: its last write
WORDS = "commit branch merge rebase tag remote stash index tree blob object reference history patch diff".split()
src = f"{work}/docs.jsonl"
with open(src, "w") as f:
    for d in range(n // 20):
        paras = [f"Paragraph {d * 20 + p}. " + " ".join(WORDS[(d * 20 + p + j * 7) % len(WORDS)] for j in range(80)) for p in range(20)]
        f.write(json.dumps({"id": f"d{d:07d}", "title": f"doc {d}", "text": "\n\n".join(paras)}) + "\n")
connect("local", num_cpus=2)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
idx = build_index_on_ray(src, f"{work}/db", embedder="hash", chunking={"mode": "paragraph"}, progress=False,
                         **({"batch_chunks": batch} if batch else {}))
wall = time.perf_counter() - t
st = dict(l.split(":", 1) for l in open("/proc/self/status"))
mb = lambda k: int(st[k].split()[0]) / 1024
print(json.dumps({"chunks": len(idx), "wall_s": wall, "base_mb": base, "anon_mb": mb("RssAnon"), "shmem_mb": mb("RssShmem"),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "before_fts_mb": before_fts[0]}))
"""


def run_size(n: int, tree: Path, batch_chunks: int) -> dict:
    "Index `n` chunks on a fresh local cluster in a fresh driver process; its figures."
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(tree)}
        r = subprocess.run([sys.executable, "-c", CHILD, str(n), d, str(batch_chunks)], capture_output=True, text=True, env=env, cwd=d)
        if r.returncode: raise SystemExit(r.stderr[-3000:])
        return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="60000,600000")
    ap.add_argument("--under", default=str(ROOT), help="source tree to import ragbench from")
    ap.add_argument("--batch-chunks", type=int, default=0, help="build_index_on_ray's batch_chunks (0: its default)")
    a = ap.parse_args()
    rows = [run_size(int(s), Path(a.under).resolve(), a.batch_chunks) for s in a.sizes.split(",")]
    print(f"tree {a.under}, batch_chunks {a.batch_chunks or 'default'}")
    print(f"{'chunks':>9} {'wall s':>8} {'chunks/s':>9} {'base MB':>8} {'peak MB':>8} {'peak ratio':>10} "
          f"{'end: anon MB':>12} {'shmem MB':>9} {'peak before indexes MB':>22} {'ratio':>6}")
    for r in rows:
        print(f"{r['chunks']:>9} {r['wall_s']:>8.1f} {r['chunks'] / r['wall_s']:>9.0f} {r['base_mb']:>8.0f} "
              f"{r['peak_mb']:>8.0f} {r['peak_mb'] / rows[0]['peak_mb']:>10.2f} {r['anon_mb']:>12.0f} {r['shmem_mb']:>9.0f} "
              f"{r['before_fts_mb']:>22.0f} {r['before_fts_mb'] / rows[0]['before_fts_mb']:>6.2f}")
    print("goal: the driver's peak ratio <= 1.2 from 60k to 600k chunks (issue 23)")


if __name__ == "__main__":
    main()
