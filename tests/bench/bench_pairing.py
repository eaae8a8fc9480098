"""Benchmark of TRIAD's pairing: which chunks reach the entity call (a script, not a test; no LLM involved).

    python tests/bench/bench_pairing.py [--db /tmp/ragbench-pairing] [--git-seeds 300] [--json FILE]

1. HotpotQA / MuSiQue: every paragraph of the samples' corpora indexed with the bundled embedder (one index per
   dataset, one document per paragraph). Each gold paragraph is a seed; its gold partners are the other gold
   paragraphs of its question (MuSiQue: the paragraphs of the neighbouring hops). Figures per type: the share of
   (seed, gold partner) pairs whose partner is among the seed's `neighbours_k` nearest neighbours, and the share
   whose partner reaches the entity call (is among the chunks `neighbourhood` offers and the pre-check lets
   through) — what `afind_bridge` sends to the LLM for a seed of that type.
2. Git docs (`../shared/data/gitdocs`): chunked and indexed; for random seeds (a comparison, intersection and
   composition seed in turn), the share of offered partners from the seed's own document, the share whose only
   shared names are boilerplate (names in at least half of the documents, by the run's own `boilerplate_names`)
   and the pre-check's pass rate; then `afind_bridge` with the `template` stand-in on the first 120 of those
   seeds: the share of configurations with two chunks of one document and with a boilerplate bridging topic.
The index is built once under --db and reused. Peak memory (RSS) is printed too.
"""
import argparse, json, os, random, resource, sys, time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Chunk, make_chunk_id
from ragbench.corpus import chunk_documents, load_documents
from ragbench.index import ChunkIndex
from ragbench.text import candidate_names, mentions
from ragbench.triad import TriadConfig
from ragbench.triad import bridge as B

SHARED = ROOT.parent / "shared" / "data"


def _cid(title, text): return make_chunk_id(title, 0, text)


def hotpot():
    "Chunks of the HotpotQA corpus and (type, [gold chunk ids]) per question."
    corpus = json.loads((SHARED / "hotpotqa" / "hotpotqa_train100_corpus.json").read_text())
    chunks = {}
    for t, s in corpus.items():
        x = "".join(s).strip(); chunks[_cid(t, x)] = Chunk(id=_cid(t, x), doc_id=t, text=x, meta={"title": t})
    golds = []
    for q in json.loads((SHARED / "hotpotqa" / "hotpotqa_train100.json").read_text()):
        paras = {t: "".join(s).strip() for t, s in q["context"]}
        g = list(dict.fromkeys(t for t, _ in q["supporting_facts"]))
        if len(g) == 2 and all(t in paras for t in g):
            golds.append(("comparison" if q["type"] == "comparison" else "bridge", [_cid(t, paras[t]) for t in g], [(0, 1), (1, 0)]))
    return list(chunks.values()), golds


def musique():
    "Chunks of the MuSiQue corpus and ('musique', [gold chunk ids in hop order], neighbouring-hop pairs) per question."
    chunks = {}
    for i, p in enumerate(json.loads((SHARED / "musique" / "musique_train100_corpus.json").read_text())):
        x = p["text"].strip(); cid = _cid(p["title"], x)
        chunks.setdefault(cid, Chunk(id=cid, doc_id=cid, text=x, meta={"title": p["title"]}))
    golds = []
    for q in json.loads((SHARED / "musique" / "musique_train100.json").read_text()):
        ps = {p["idx"]: p for p in q["paragraphs"]}
        ids = [_cid(ps[d["paragraph_support_idx"]]["title"], ps[d["paragraph_support_idx"]]["paragraph_text"].strip())
               for d in q["question_decomposition"]]
        pairs = [(a, a + 1) for a in range(len(ids) - 1)] + [(a + 1, a) for a in range(len(ids) - 1)]
        golds.append(("musique", ids, pairs))
    return [c for c in chunks.values()], golds


def open_or_build(db: Path, table: str, chunks) -> ChunkIndex:
    "The index of `chunks` under db/table, built once."
    try:
        idx = ChunkIndex.open(db, table)
        if len(idx) > 0: return idx
    except Exception: pass
    return ChunkIndex.build(db, chunks, None, table=table, progress=False)


def offered(seed_id, index, cfg, kind):
    "The chunks the entity call would see for this seed and type (empty when the pre-check stops it), and the hood."
    hood = B.neighbourhood(seed_id, index, cfg, kind) if _takes_kind() else B.neighbourhood(seed_id, index, cfg)
    offer = getattr(hood, "offered", None) or hood.partners
    if len(offer) < cfg.n_chunks - 1: return [], hood
    first = [hood.seed, *map(B.hit_chunk, offer)]
    if cfg.precheck:
        ok = B.precheck_passes(first, getattr(hood, "similarities", None), cfg) if _takes_kind() else B.precheck_passes(first)
        if not ok: return [], hood
    return first, hood


def _takes_kind() -> bool:
    import inspect
    return "kind" in inspect.signature(B.neighbourhood).parameters


def gold_reach(index, golds, cfg) -> dict:
    "Per type: (seed, gold partner) pairs, share in the top-k neighbours, share reaching the entity call."
    seen, topk, reach = Counter(), Counter(), Counter()
    for typ, ids, pairs in golds:
        kind = "comparison" if typ == "comparison" else "composition"
        for a, b in pairs:
            seen[typ] += 1
            hits = index.neighbours(ids[a], k=cfg.neighbours_k)
            topk[typ] += any(h.chunk_id == ids[b] for h in hits)
            first, _ = offered(ids[a], index, cfg, kind)
            reach[typ] += any(c.id == ids[b] for c in first[1:])
    return {t: {"pairs": seen[t], "in_top_k": round(topk[t] / seen[t], 3), "reach_entity_call": round(reach[t] / seen[t], 3)}
            for t in sorted(seen)}


def git_docs(index, n_seeds, cfg, bridge_seeds=120) -> dict:
    "On random Git-docs seeds: same-document share, boilerplate-only share and pre-check pass rate of the offered partners."
    common = B.boilerplate_names(index) if hasattr(B, "boilerplate_names") else _doc_frequent(index)
    seeds = index.sample_ids(n_seeds, seed=1)
    kinds = ("comparison", "intersection", "composition")
    offers, same, boiler, passed, tried = 0, 0, 0, 0, 0
    for i, sid in enumerate(seeds):
        kind = kinds[i % 3]
        hood = B.neighbourhood(sid, index, cfg, kind) if _takes_kind() else B.neighbourhood(sid, index, cfg)
        offer = getattr(hood, "offered", None) or hood.partners
        if len(offer) < cfg.n_chunks - 1: continue
        tried += 1
        first, _ = offered(sid, index, cfg, kind)
        passed += bool(first)
        for h in offer:
            offers += 1
            same += h.doc_id == hood.seed.doc_id
            shared = _shared_names(hood.seed, B.hit_chunk(h))
            boiler += bool(shared) and all(n in common for n in shared)
    return {"seeds": len(seeds), "configurations": tried, "offered_partners": offers,
            "same_document_share": round(same / max(offers, 1), 3),
            "boilerplate_only_share": round(boiler / max(offers, 1), 3),
            "precheck_pass_rate": round(passed / max(tried, 1), 3),
            "boilerplate_names": sorted(common)[:20], "boilerplate_count": len(common),
            "template_run": template_bridges(index, seeds[:bridge_seeds], cfg, common)}


def template_bridges(index, seeds, cfg, common) -> dict:
    "`afind_bridge` with the template stand-in on these seeds (types in turn): configurations, same-document and boilerplate-topic shares."
    from ragbench.llm import arun, make_llm
    import asyncio
    llm, kinds = make_llm("template", max_concurrency=8), ("comparison", "intersection", "composition")
    async def go(): return await asyncio.gather(*(B.afind_bridge(s, index, llm, cfg, kinds[i % 3]) for i, s in enumerate(seeds)))
    found = [b for b in arun(go()) if b is not None]
    low = {n.lower() for n in common}
    return {"seeds": len(seeds), "configurations": len(found), "entity_calls": llm.usage.totals()["calls"],
            "same_document_share": round(sum(len({c.doc_id for c in b.chunks}) < len(b.chunks) for b in found) / max(len(found), 1), 3),
            "boilerplate_topic_share": round(sum(b.bridge_topic.strip().lower() in low for b in found) / max(len(found), 1), 3),
            "via": dict(Counter(b.via for b in found))}


def _shared_names(a: Chunk, b: Chunk) -> list[str]:
    "Every name of one chunk that the other mentions (the links the name matchers see)."
    out = []
    for c, other in ((a, B.chunk_text(b)), (b, B.chunk_text(a))):
        out += [n for n in candidate_names(c.text, (c.meta or {}).get("title", "")) if mentions(other, n)]
    return list(dict.fromkeys(out))


def _doc_frequent(index, share=0.5) -> set:
    "Names in at least `share` of the documents (for the 'before' run, where the library has no such list)."
    per = {}
    for c in index.iter_chunks():
        per.setdefault(c.doc_id, set()).update(candidate_names(c.text, (c.meta or {}).get("title", "")))
    df = Counter(n for ns in per.values() for n in ns)
    return {n for n, k in df.items() if k >= share * len(per)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", default="/tmp/ragbench-pairing")
    ap.add_argument("--git-seeds", type=int, default=300)
    ap.add_argument("--json", default=None)
    ap.add_argument("--other-documents", action="store_true", help="TriadConfig(other_documents=True)")
    ap.add_argument("--only", default="hotpotqa,musique,gitdocs", help="datasets to run, comma-separated")
    a = ap.parse_args()
    cfg = TriadConfig(other_documents=True) if a.other_documents else TriadConfig()
    db, report, t0 = Path(a.db), {}, time.perf_counter()
    only = a.only.split(",")
    for name, load in (("hotpotqa", hotpot), ("musique", musique)):
        if name not in only: continue
        chunks, golds = load()
        idx = open_or_build(db, name, chunks)
        report[name] = gold_reach(idx, golds, cfg)
        print(json.dumps({name: report[name]}), flush=True)
    if "gitdocs" in only:
        docs = list(load_documents(SHARED / "gitdocs" / "git_docs.jsonl"))
        gidx = open_or_build(db, "gitdocs", chunk_documents(docs))
        report["gitdocs"] = {"chunks": len(gidx), "documents": len(docs), **git_docs(gidx, a.git_seeds, cfg)}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(report, indent=2))
    if a.json: Path(a.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
