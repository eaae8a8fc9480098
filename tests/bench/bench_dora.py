"""Benchmark of the DoRA pipeline (a script, not a test).

    python tests/bench/bench_dora.py [--docs 8] [--per-style 4] [--latency 0.0 0.05] [--embedder hash]

Builds an index over the first --docs Git manual pages of ../shared/data/gitdocs (hash embedder by default,
so no model load is timed), starts `ragbench.testing.FakeLLMServer` in this process (DoRA's template
rules are registered by `ragbench.dora.run`), and runs `run_dora` for all five styles through the real OpenAI
client (`openai:URL/v1@fake`) with a fresh cache, once per latency. Reports LLM calls, tokens and wall time
per accepted item, calls per stage, acceptance per style, and the peak memory of the process.
"""
import argparse, json, os, resource, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.corpus import load_documents, chunk_documents
from ragbench.index import ChunkIndex
from ragbench.llm import make_llm
from ragbench.testing import FakeLLMServer
from ragbench.dora import run_dora, load_config

GITDOCS = ROOT.parent / "shared" / "data" / "gitdocs" / "git_docs.jsonl"


def build_index(n_docs: int, embedder: str, root: Path) -> ChunkIndex:
    "Index the first n_docs pages of the Git docs that have 2-8 chunks (enough for multi-chunk styles)."
    docs = []
    for d in load_documents(GITDOCS):
        n = len(list(chunk_documents([d])))
        if 2 <= n <= 8: docs.append(d)
        if len(docs) >= n_docs: break
    chunks = list(chunk_documents(docs))
    t = time.time()
    idx = ChunkIndex.build(root / "db", chunks, embedder=embedder, progress=False)
    print(f"index: {len(docs)} documents, {len(chunks)} chunks, built in {time.time() - t:.1f}s ({embedder} embedder)")
    return idx


def bench(idx, per_style: int, latency: float, root: Path) -> dict:
    with FakeLLMServer(latency=latency) as srv:   # DoRA registers its template rules when imported
        llm = make_llm(f"openai:{srv.url}/v1@fake", cache_dir=root / f"cache-{latency}", max_concurrency=8)
        t = time.time()
        r = run_dora(idx, llm, cfg=load_config(per_style=per_style), out=root / f"run-{latency}",
                     embed=lambda xs: idx.embedder.encode(list(xs)))
        wall = time.time() - t
        reqs = srv.stats()["requests"]
    s = r.summary
    n = len(r.items)
    return {"latency_s": latency, "accepted": n, "requested": sum(s["requested"].values()),
            "candidates": sum(s["candidates"].values()), "server_requests": reqs, "calls": s["usage"]["calls"],
            "calls_per_accepted": round(s["usage"]["calls"] / n, 2) if n else None,
            "tokens_per_accepted": round((s["usage"]["input_tokens"] + s["usage"]["output_tokens"]) / n) if n else None,
            "wall_s": round(wall, 2), "wall_per_accepted_s": round(wall / n, 3) if n else None,
            "calls_by_stage": {k: v["calls"] for k, v in s["by_stage"].items()},
            "acceptance": s["acceptance"], "gate_failures": s["gate_failures"], "duplicates": s["duplicates"], "rounds": s["rounds"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=8)
    p.add_argument("--per-style", type=int, default=4)
    p.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05])
    p.add_argument("--embedder", default="hash")
    a = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench_dora_"))
    idx = build_index(a.docs, a.embedder, root)
    rows = [bench(idx, a.per_style, lat, root) for lat in a.latency]
    for r in rows: print(json.dumps(r))
    print("\nlatency  accepted/requested  candidates  calls  calls/acc  tokens/acc  wall_s  wall/acc_s")
    for r in rows:
        print(f"{r['latency_s']:>7}  {r['accepted']:>8}/{r['requested']:<9}  {r['candidates']:>10}  {r['calls']:>5}  "
              f"{r['calls_per_accepted']!s:>9}  {r['tokens_per_accepted']!s:>10}  {r['wall_s']:>6}  {r['wall_per_accepted_s']!s:>10}")
    print(f"peak memory (max RSS of this process): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
