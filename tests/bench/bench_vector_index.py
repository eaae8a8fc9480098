"""Benchmark of the vector index: recall@10 against the exact scan, dense and hybrid query latency, build time, peak memory.

    python tests/bench/bench_vector_index.py synthetic [--rows 100000 1000000] [--queries 200]
    python tests/bench/bench_vector_index.py real [--queries 200]

`synthetic`: a table of `--rows` 384-dimensional unit vectors drawn around 2,000 random centres (so neighbours
exist, as in real embeddings) with short random-word texts, written in batches through `ChunkIndex.upsert`
(no model: vectors are given), then the full-text and id indices and the IVF-PQ index that `ChunkIndex.build`
adds past the threshold. Queries are stored vectors moved a little. For each size: build seconds, recall@10 of
the index's search (`_dense_rows`, the path every stage uses) against an exact scan of the same table, and the
p50 / p95 latency of exact dense, indexed dense and hybrid queries (hybrid with the query vector given, so the
latency is the index's, not the model's).

`real`: the texts of /work/shared/data (Git manual chunks, HotpotQA and MuSiQue paragraphs) embedded with the
bundled all-MiniLM-L6-v2, the index forced on (threshold 0) and its recall@10 measured with the datasets' real
questions as queries. It shows the index on real vectors; at this size (a few thousand rows) the index reads a
large share of its lists, so the synthetic figures are the ones that speak for a large table.

Prints the machine's load average and the peak resident memory (ru_maxrss) after each phase.
"""
import argparse, json, os, random, resource, shutil, statistics, sys, tempfile, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import numpy as np

try: import ragbench  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ragbench.core import Chunk
from ragbench.embed import HashEmbedder, make_embedder
from ragbench.index import ChunkIndex
from ragbench.index.build import _vector_index_params

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def peak_mb() -> float:
    "Peak resident memory of this process so far, in MB."
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(xs, q) -> float:
    "The q-th percentile of xs, in milliseconds."
    return float(np.percentile(np.asarray(xs) * 1000, q))


def synthetic_batches(n: int, dim: int = 384, batch: int = 20_000, seed: int = 0):
    "(chunks, vectors) batches of a clustered synthetic table, generated as they are written (memory stays flat)."
    rng = np.random.default_rng(seed); centres = rng.standard_normal((2000, dim)).astype(np.float32)
    words = [f"w{i}" for i in range(5000)]; rnd = random.Random(seed)
    for start in range(0, n, batch):
        m = min(batch, n - start)
        v = centres[rng.integers(0, len(centres), m)] + 0.35 * rng.standard_normal((m, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        yield [Chunk(id=f"s{start + i}", doc_id=f"d{(start + i) // 20}", text=" ".join(rnd.choices(words, k=20))) for i in range(m)], v


def exact_top(idx, q: np.ndarray, k: int = 10) -> list:
    "The exact top-k ids (a full scan, the index bypassed)."
    rows = (idx.tbl.search(q, vector_column_name="vector").distance_type("cosine").bypass_vector_index()
            .limit(k).select(["id", "_distance"]).to_list())
    return [r["id"] for r in rows]


def measure(idx, queries: np.ndarray, texts: list, k: int = 10) -> dict:
    "Recall@k of the indexed search against the exact one, and latencies of exact, indexed and hybrid queries."
    t_exact, t_ann, t_hyb, hit, tot = [], [], [], 0, 0
    for q, text in zip(queries, texts):
        t0 = time.perf_counter(); ex = exact_top(idx, q, k); t_exact.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); ann = [r["id"] for r in idx._dense_rows(q, k)]; t_ann.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); idx._fuse(q, idx._dense_rows(q, 50), idx._bm25_rows(text, 50, vector=True), 0.7)
        t_hyb.append(time.perf_counter() - t0)
        hit += len(set(ann) & set(ex)); tot += len(ex)
    return {"recall@10": round(hit / max(tot, 1), 4),
            "exact_dense_ms": (round(pct(t_exact, 50), 1), round(pct(t_exact, 95), 1)),
            "indexed_dense_ms": (round(pct(t_ann, 50), 1), round(pct(t_ann, 95), 1)),
            "hybrid_ms": (round(pct(t_hyb, 50), 1), round(pct(t_hyb, 95), 1))}


def synthetic(rows: int, n_queries: int, work: Path) -> dict:
    "Build a synthetic table of `rows` rows with its indices and measure it."
    idx = ChunkIndex.create_or_open(work / f"db{rows}", "chunks", HashEmbedder(384))
    t0 = time.perf_counter(); samples = []
    for chunks, vecs in synthetic_batches(rows):
        idx.upsert(chunks, vecs)
        if len(samples) < n_queries: samples += [(v, c.text) for v, c in zip(vecs[:5], chunks[:5])]
    write_s = time.perf_counter() - t0; mem_write = peak_mb()
    t0 = time.perf_counter(); idx._ensure_indices(); fts_s = time.perf_counter() - t0
    t0 = time.perf_counter(); built = idx.ensure_vector_index(min(rows, 100_000), log=lambda m: None); vi_s = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    qs = np.stack([v for v, _ in samples[:n_queries]]); qs = qs + 0.05 * rng.standard_normal(qs.shape).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    res = measure(idx, qs, [t for _, t in samples[:n_queries]])
    return {"rows": rows, "index_built": built, "params": idx.vector_index(), "write_s": round(write_s, 1),
            "fts_btree_s": round(fts_s, 1), "vector_index_s": round(vi_s, 1), "peak_mb_after_write": round(mem_write),
            "peak_mb": round(peak_mb()), **res}


def real_texts() -> tuple:
    "(texts, questions) of the shared corpora: Git manual chunks, HotpotQA and MuSiQue paragraphs and questions."
    from ragbench.corpus import chunk_documents, load_documents
    texts = [c.text for c in chunk_documents(load_documents(SHARED / "gitdocs" / "git_docs.jsonl"), 128, 40, 256)]
    questions = []
    for name in ("hotpotqa/hotpotqa_train100_corpus.json", "musique/musique_train100_corpus.json"):
        data = json.loads((SHARED / name).read_text())     # HotpotQA: {title: [sentences]}; MuSiQue: [{title, text}]
        texts += ["".join(v) for v in data.values()] if isinstance(data, dict) else [d["text"] for d in data]
    for name in ("hotpotqa/hotpotqa_train100.json", "musique/musique_train100.json"):
        data = json.loads((SHARED / name).read_text())
        questions += [d["question"] for d in (data if isinstance(data, list) else data.values()) if isinstance(d, dict) and d.get("question")]
    return [t for t in texts if t and t.strip()], questions


def real(n_queries: int, work: Path) -> dict:
    "Real vectors of the shared corpora with the index forced on; recall@10 with real questions."
    texts, questions = real_texts()
    emb = make_embedder()
    t0 = time.perf_counter()
    idx = ChunkIndex.build(work / "real", [Chunk(id=f"r{i}", doc_id=f"r{i}", text=t) for i, t in enumerate(texts)], emb,
                           progress=False, vector_index_min_rows=0)
    build_s = time.perf_counter() - t0
    qs = emb.encode(questions[:n_queries])
    return {"rows": len(idx), "embedder": emb.name, "build_s": round(build_s, 1), "params": idx.vector_index(),
            **measure(idx, qs, questions[:n_queries]), "peak_mb": round(peak_mb())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["synthetic", "real"])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=200)
    a = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="rb-bench-vi-"))
    try:
        if a.what == "real": print(json.dumps(real(a.queries, work)), flush=True)
        else:
            for n in a.rows:
                print(json.dumps(synthetic(n, a.queries, work)), flush=True)
                shutil.rmtree(work / f"db{n}", ignore_errors=True)
    finally: shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
