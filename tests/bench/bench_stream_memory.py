"""Peak memory of `ragbench triad` and `ragbench evaluate` against table size (issue 23: flat from 10k to 1M chunks).

    python tests/bench/bench_stream_memory.py [--sizes 10000,1000000] [--n 10] [--items 30] [--work DIR]

For each size a table is made once under `--work` (kept for the next run): `ragbench static` indexes the paragraphs
of the first `--items` shared HotpotQA questions with the model-free `hash` embedder and writes their dataset with
gold chunk ids; then filler chunks (the HotpotQA corpus's paragraphs again, each copy marked and in its own
document) are appended until the table holds the size, which gets the vector index from 100k rows. Then, each in a
fresh process and measured with GNU time (peak RSS, wall): `ragbench triad --n N` with the offline stand-in LLM
(`fake`), and `ragbench evaluate` of the static dataset with built-in dense and hybrid retrieval (top 5), the stand-in as answering LLM
and judge, BERTScore off. Printed per size and command: peak MB, wall s and the ratio to the smallest size's peak.
"""
import argparse, json, re, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "hotpotqa"

FILL = r"""
import json, sys
sys.path.insert(0, sys.argv[4])
from ragbench.core import Chunk
from ragbench.index import ChunkIndex
db, size, corpus = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3]))
paras = [(t, " ".join(s).strip()) for t, s in corpus.items()]
index = ChunkIndex.open(db)
have = len(index)
def fillers():
    for i in range(size - have):
        title, text = paras[i % len(paras)]
        copy = i // len(paras)
        yield Chunk(id=f"fill{i:08d}", doc_id=f"{title} (copy {copy})", text=f"{text} [copy {copy}]",
                    meta={"source": f"filler/{copy}/{title}", "position": 0})
index.add(fillers(), progress=False)
index.ensure_vector_index()
print(len(index))
"""


def ragbench(*args) -> None:
    "Run the `ragbench` CLI of this interpreter's environment; exit with its output on failure."
    r = subprocess.run([sys.executable, "-m", "ragbench.cli", *map(str, args)], capture_output=True, text=True)
    if r.returncode: raise SystemExit(f"ragbench {' '.join(map(str, args))} failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")


def make_table(work: Path, size: int, items: int) -> tuple[Path, Path]:
    "The table of `size` chunks and the static dataset over it (made once, reused)."
    db, ds = work / f"db_{size}", work / f"static_{size}.jsonl"
    if (work / f"db_{size}.done").exists(): return db, ds
    ragbench("static", SHARED / "hotpotqa_train100.json", "--format", "hotpotqa", "--db", db, "--out", ds,
             "--embedder", "hash", "--limit", items, "--quiet")
    r = subprocess.run([sys.executable, "-c", FILL, *map(str, (db, size, SHARED / "hotpotqa_train100_corpus.json", ROOT))],
                       capture_output=True, text=True)
    if r.returncode: raise SystemExit(r.stderr[-3000:])
    (work / f"db_{size}.done").write_text(r.stdout)
    return db, ds


def measured(*args) -> dict:
    "Peak RSS (MB) and wall seconds of one `ragbench` command in a fresh process (GNU time)."
    cmd = ["/usr/bin/time", "-f", "PEAK %M WALL %e", sys.executable, "-m", "ragbench.cli", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"PEAK (\d+) WALL ([\d.]+)", r.stderr)
    if r.returncode or not m: raise SystemExit(f"{' '.join(map(str, args))} failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
    return {"peak_mb": int(m[1]) / 1024, "wall_s": float(m[2])}


def run_size(work: Path, size: int, a) -> dict:
    "Make the table, then measure triad and evaluate on it."
    t = time.perf_counter(); db, ds = make_table(work, size, a.items); made = time.perf_counter() - t
    triad_out, eval_out = work / f"triad_{size}", work / f"eval_{size}"
    for d in (triad_out, eval_out): shutil.rmtree(d, ignore_errors=True)
    triad = measured("triad", "--db", db, "--out", triad_out, "--n", a.n, "--llm", "fake")
    setups = work / "setups.yaml"
    setups.write_text("defaults: {llm: fake}\nbaseline: {name: dense5, top_k: 5}\n"
                      "variants:\n  - {name: hybrid5, top_k: 5, retrieval: hybrid}\njudge_llm: fake\n")
    evaluate = measured("evaluate", "--dataset", ds, "--out", eval_out, "--db", db, "--setups", setups,
                        "--no-bertscore", "--quiet")
    summary = json.loads((triad_out / "summary.json").read_text())
    return {"size": size, "table_s": made, "triad": triad, "evaluate": evaluate,
            "triad_calls": summary.get("llm", {}).get("calls"), "accepted": summary.get("accepted")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--n", type=int, default=10, help="accepted TRIAD questions wanted")
    ap.add_argument("--items", type=int, default=30, help="HotpotQA questions of the static dataset")
    ap.add_argument("--work", default="/tmp/ragbench_stream_memory", help="tables are kept here between runs")
    a = ap.parse_args()
    if not SHARED.exists(): raise SystemExit(f"needs the shared HotpotQA sample at {SHARED}")
    work = Path(a.work); work.mkdir(parents=True, exist_ok=True)
    rows = [run_size(work, int(s), a) for s in a.sizes.split(",")]
    print(f"{'chunks':>9} {'command':>9} {'wall s':>8} {'peak MB':>8} {'ratio':>6}")
    for cmd in ("triad", "evaluate"):
        for r in rows:
            f = r[cmd]
            print(f"{r['size']:>9} {cmd:>9} {f['wall_s']:>8.1f} {f['peak_mb']:>8.0f} "
                  f"{f['peak_mb'] / rows[0][cmd]['peak_mb']:>6.2f}")
    for r in rows: print(f"{r['size']}: triad {r['triad_calls']} calls, accepted {r['accepted']}; "
                         f"table made in {r['table_s']:.0f} s")
    print("goal: peak of triad and evaluate flat from 10k to 1M chunks (issue 23)")


if __name__ == "__main__":
    main()
