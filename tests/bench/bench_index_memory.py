"""Peak memory of one-process indexing against corpus size (issue 23: flat, <= 1.2x from 100k to 1M chunks).

    python tests/bench/bench_index_memory.py [--sizes 100000,1000000] [--mode build|sync|resync]

Each size runs in a fresh subprocess: N synthetic chunks (about 600 characters each, made unique) stream from a
generator into `ChunkIndex.build` with the model-free `hash` embedder (ragbench's own cost, no model) and `tune=True`,
the process tuning `ragbench index` asks for (two malloc arenas, two LanceDB IO threads while the lock is held). Printed per
size: chunks, wall seconds, chunks/s, the process's peak RSS (ru_maxrss) and its RSS before the build (imports),
and the ratio of each peak to the smallest size's. `--mode sync` passes `source=` (the path `ragbench index` takes:
`sync`); `--mode resync` builds the table in one process, then measures a second `sync` of the same chunks in a fresh
one (a re-index of an unchanged corpus: everything stored is read, nothing is embedded).

`--cli` measures the command itself (issue 42): N one-chunk documents written to a JSONL file (`--cli-format folder`:
one .txt file each), then `python -m ragbench index FILE --db D --embedder hash --quiet` in a fresh process; its peak
RSS is that child's own ru_maxrss (`os.wait4`), so corpus reading, the re-index bookkeeping, the summary and the
full-text index all count. `--keep DIR` keeps the generated corpora there (written once, reused on later runs).
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


WORDS = "commit branch merge rebase tag remote stash index tree blob object reference history patch diff".split()


def _doc_text(i: int) -> str:
    "The text of generated document `i`: about 600 characters, unique, one chunk."
    return f"Document {i}. " + " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(80))

def write_corpus(n: int, where: Path, fmt: str) -> Path:
    "N one-chunk documents as `where`/docs-N.jsonl, or as a folder of N .txt files (written once)."
    path = where / (f"docs-{n}.jsonl" if fmt == "jsonl" else f"docs-{n}")
    done = path.with_name(path.name + ".done")
    if done.exists(): return path
    if fmt == "jsonl":
        with open(path, "w") as f:
            for i in range(n): f.write(json.dumps({"id": f"d{i:08d}", "title": f"Doc {i}", "text": _doc_text(i)}) + "\n")
    else:
        for i in range(n):
            sub = path / f"{i // 10_000:04d}"
            if i % 10_000 == 0: sub.mkdir(parents=True, exist_ok=True)
            (sub / f"d{i:08d}.txt").write_text(_doc_text(i))
    done.touch()
    return path


def run_cli(n: int, corpora: Path, fmt: str, src_tree: Path = ROOT) -> dict:
    "Run `ragbench index` on `n` generated one-chunk documents in a fresh process; its wall time and peak RSS."
    src = write_corpus(n, corpora, fmt)      # `src_tree`: the ragbench source tree run (an older one: before)
    with tempfile.TemporaryDirectory() as d, open(Path(d) / "out", "w+") as out, open(Path(d) / "err", "w+") as err:
        cmd = [sys.executable, "-m", "ragbench.cli", "index", str(src), "--db", str(Path(d) / "db"), "--embedder", "hash",
               "--quiet"]
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=src_tree,
                             env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(src_tree)})
        _, status, ru = os.wait4(p.pid, 0)                # this child's own peak, not the largest child's so far
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0); err.seek(0)
        if p.returncode: raise SystemExit(err.read()[-3000:])
        return {"chunks": n, "wall_s": wall, "base_mb": float("nan"), "peak_mb": ru.ru_maxrss / 1024, "out": out.read()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--mode", choices=("build", "sync", "resync"), default="build")
    ap.add_argument("--cli", action="store_true", help="measure `ragbench index` itself on N one-chunk documents")
    ap.add_argument("--cli-format", choices=("jsonl", "folder"), default="jsonl")
    ap.add_argument("--src", default=str(ROOT), help="with --cli: the ragbench source tree to run (e.g. an older one)")
    ap.add_argument("--keep", help="folder to keep the generated corpora in (default: a temporary one)")
    a = ap.parse_args()
    if a.cli:
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(a.keep or tmp); where.mkdir(parents=True, exist_ok=True)
            rows = [run_cli(int(s), where, a.cli_format, Path(a.src)) for s in a.sizes.split(",")]
    else: rows = [run_size(int(s), a.mode) for s in a.sizes.split(",")]
    print(f"{'chunks':>9} {'wall s':>8} {'chunks/s':>9} {'base MB':>8} {'peak MB':>8} {'peak ratio':>10}")
    for r in rows:
        print(f"{r['chunks']:>9} {r['wall_s']:>8.1f} {r['chunks'] / r['wall_s']:>9.0f} {r['base_mb']:>8.0f} "
              f"{r['peak_mb']:>8.0f} {r['peak_mb'] / rows[0]['peak_mb']:>10.2f}")
    print(f"mode {'cli ' + a.cli_format + ' ' + a.src if a.cli else a.mode}; load {os.getloadavg()[0]:.1f}; goal: peak ratio <= 1.2 from 100k to 1M chunks (issue 23)")


if __name__ == "__main__":
    main()
