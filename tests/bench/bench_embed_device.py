"""Benchmark of embedding on each device there is: chunks per second of a bare SentenceTransformer.encode and of
ChunkIndex.build (embedding + LanceDB writes + indices) on the same texts, on the CPU and, when torch sees one,
on the GPU, measured in one run so the ratios compare like with like.

    python tests/bench/bench_embed_device.py [--chunks 400] [--repeat 2]

The texts are the bundled Git manual sample's chunks (repeated, made unique, up to --chunks). Each figure is the
best of --repeat runs with the model already loaded. The `build ÷ encode` ratio is ragbench's own cost: 1.0
means indexing is as fast as the model alone. Prints peak resident memory, and peak GPU memory on a GPU.
"""
import argparse, os, resource, shutil, sys, tempfile, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
try: import ragbench  # noqa: F401
except ImportError: sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ragbench.core import Chunk
from ragbench.corpus import chunk_documents, load_documents, sample_corpus_path
from ragbench.embed import _Embedder, _default_batch_size
from ragbench.index import ChunkIndex


def texts(n: int) -> list:
    "n unique chunk texts of the bundled sample."
    base = [c.text for c in chunk_documents(load_documents(sample_corpus_path()), 256, 60, 512)]
    return [f"{base[i % len(base)]} ({i // len(base)})" for i in range(n)]


def best(f, repeat: int) -> float:
    "The shortest of `repeat` timed calls of f, in seconds."
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter(); f(); out.append(time.perf_counter() - t0)
    return min(out)


def on(device: str, ts: list, repeat: int, work: Path) -> dict:
    "Chunks/s of the bare model and of ChunkIndex.build on `device`."
    emb = _Embedder(device=device); model = emb.model; bs = _default_batch_size(device)
    model.encode(ts[:32], batch_size=bs)                                   # warm up
    bare = best(lambda: model.encode(ts, batch_size=bs, normalize_embeddings=True, convert_to_numpy=True), repeat)
    chunks = [Chunk(id=f"c{i}", doc_id=f"d{i // 10}", text=t) for i, t in enumerate(ts)]
    k = iter(range(100))
    build = best(lambda: ChunkIndex.build(work / f"{device}-{next(k)}", chunks, emb, progress=False), repeat)
    out = {"device": device, "batch_size": bs, "chunks": len(ts), "encode_chunks_s": round(len(ts) / bare, 1),
           "build_chunks_s": round(len(ts) / build, 1), "build_over_encode": round(bare / build, 3),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    if device.startswith("cuda"):
        import torch
        out["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=400); ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    import torch
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"load average {os.getloadavg()}; devices {devices}" + ("" if len(devices) > 1 else " (no GPU visible: CPU only)"))
    work = Path(tempfile.mkdtemp(prefix="rb-bench-dev-")); ts = texts(a.chunks)
    try:
        for d in devices: print(on(d, ts if d == "cpu" else texts(a.chunks * 10), a.repeat, work), flush=True)
    finally: shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
