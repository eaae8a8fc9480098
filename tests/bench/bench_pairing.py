"""Benchmark of TRIAD's pairing: which chunks reach the entity call, under the old candidate rule and the library's
(a script, not a test; no LLM involved).

    python tests/bench/bench_pairing.py [--db /tmp/ragbench-pairing] [--git-seeds 300] [--json FILE]

Both rules run in one process on the same indexes: "before" is the candidate rule up to issue 41 (kept below as
`old_partners`: a comparison is offered the `offer_k` nearest neighbours), "after" is `bridge.pick_partners` (a
comparison is offered `comparison_offer_k` chunks of other documents that do not name the seed's title, nearest
first). The gate a run applies is applied too (the pre-check, where the library still has one). A third rule,
"category_proxy", stands in offline for the other design (a category call per comparison seed, then a search for that
kind): the search is for the seed's first sentence without its names.

1. HotpotQA / MuSiQue: every paragraph of the samples' corpora indexed with the bundled embedder (one index per
   dataset, one document per paragraph). Each gold paragraph is a seed; its gold partners are the other gold
   paragraphs of its question (MuSiQue: the paragraphs of the neighbouring hops). Per type, before and after, the
   share of (seed, gold partner) pairs whose partner reaches the entity call, with a Wilson 95% interval.
2. Git docs (`../shared/data/gitdocs`): chunked and indexed; for random seeds (a comparison, intersection and
   composition seed in turn), per type, before and after: the share of offered partners from the seed's own document
   and the share whose only shared names are boilerplate; then `afind_bridge` with the `template` stand-in on the
   first 120 of those seeds: per type, the share of configurations with two chunks of one document.
The index is built once under --db and reused. Peak memory (RSS) is printed too.
"""
import argparse, asyncio, contextlib, functools, json, os, re, resource, sys, time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Chunk, make_chunk_id
from ragbench.corpus import chunk_documents, load_documents
from ragbench.index import ChunkIndex
from ragbench.llm import arun, make_llm
from ragbench.stats import proportion_ci
from ragbench.text import candidate_names, mentions, split_sentences
from ragbench.triad import TriadConfig
from ragbench.triad import bridge as B

SHARED = ROOT.parent / "shared" / "data"
LIBRARY_RULE = B.pick_partners
KINDS = ("comparison", "intersection", "composition")


def _cid(title, text): return make_chunk_id(title, 0, text)


def hotpot():
    "Chunks of the HotpotQA corpus and (type, [gold chunk ids], seed/partner pairs) per question."
    corpus = json.loads((SHARED / "hotpotqa" / "hotpotqa_train100_corpus.json").read_text())
    chunks = {}
    for t, s in corpus.items():
        x = "".join(s).strip(); chunks[_cid(t, x)] = Chunk(id=_cid(t, x), doc_id=t, text=x, meta={"title": t})
    golds = []
    for q in json.loads((SHARED / "hotpotqa" / "hotpotqa_train100.json").read_text()):
        paras = {t: "".join(s).strip() for t, s in q["context"]}
        g = list(dict.fromkeys(t for t, _ in q["supporting_facts"]))
        if len(g) == 2 and all(t in paras for t in g):
            golds.append(("comparison" if q["type"] == "comparison" else "bridge", [_cid(t, paras[t]) for t in g],
                          [(0, 1), (1, 0)]))
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


def old_partners(seed, hits, cfg, kind=None, skip=frozenset()) -> list:
    "The candidate rule before issue 41: a comparison is offered the `offer_k` nearest neighbours."
    pool = [h for h in hits if not (cfg.other_documents and h.doc_id == seed.doc_id)]
    k = max(cfg.offer_k, cfg.n_chunks - 1)
    near = pool[: max(cfg.neighbours_k, k)]
    if kind == "comparison": return near[:k]
    names = B.seed_names(seed, skip)[:30]
    named = [h for h in pool[: cfg.fallback_n] if any(mentions(B.chunk_text(h), n) for n in names)]
    return list({h.chunk_id: h for h in [*named, *near]}.values())[:k]


def kind_query(seed) -> str:
    "The seed's first sentence without its names: what a category call would search for (\"is an American director\")."
    s = (split_sentences(seed.text) or [seed.text])[0]
    for n in sorted(candidate_names(s, (seed.meta or {}).get("title", ""), parts=False), key=len, reverse=True):
        s = s.replace(n, " ")
    return " ".join(re.sub(r"\([^)]*\)", " ", s).split()) or seed.text


def category_proxy(index, seed, hits, cfg, kind=None, skip=frozenset()) -> list:
    """The other design, offline: a comparison is offered the chunks a search for the seed's kind finds (other
    documents, not naming the seed, first), the kind taken from the seed's first sentence instead of a category call."""
    if kind != "comparison": return LIBRARY_RULE(seed, hits, cfg, kind, skip)
    found = [h for h in index.search(kind_query(seed), k=cfg.fallback_n) if h.chunk_id != seed.id]
    return B._comparison_pool(seed, found, skip)[: cfg.comparison_offer_k]


def rules(index) -> dict:
    "The candidate rules compared: before (issue 41), after (the library's), and the category design's offline proxy."
    return {"before": old_partners, "after": None, "category_proxy": functools.partial(category_proxy, index)}


@contextlib.contextmanager
def rule(fn):
    "The library's `neighbourhood` (and so `afind_bridge`) with the candidate rule `fn` (None: the library's own)."
    keep = B.pick_partners
    B.pick_partners = fn or keep
    try: yield
    finally: B.pick_partners = keep


def run_gate(first, hood, cfg) -> bool:
    "The gate `afind_bridge` applies before the entity call, with the run's own arguments (True where there is none)."
    if not (hasattr(B, "precheck_passes") and getattr(cfg, "precheck", False)): return True
    return B.precheck_passes(first, [getattr(h, "score", None) for h in hood.partners], cfg.precheck_similarity,
                             hood.skip, need=cfg.n_chunks - 1)


def offered(seed_id, index, cfg, kind):
    "The chunks the entity call sees for this seed and type (empty when the run's gate stops it), and the hood."
    hood = B.neighbourhood(seed_id, index, cfg, kind)
    if len(hood.partners) < cfg.n_chunks - 1: return [], hood
    first = [hood.seed, *map(B.hit_chunk, hood.partners)]
    return (first if run_gate(first, hood, cfg) else []), hood


def share(k, n) -> dict:
    "k of n with a Wilson 95% interval, rounded."
    ci = proportion_ci(k, n, method="wilson")
    return {"k": k, "n": n, **{x: (round(ci[x], 3) if ci[x] is not None else None) for x in ("mean", "lo", "hi")}}


def gold_reach(index, golds, cfg) -> dict:
    "Per type, before and after: (seed, gold partner) pairs whose partner reaches the entity call."
    seen, reach = Counter(), Counter()
    for typ, ids, pairs in golds:
        kind = "comparison" if typ == "comparison" else "composition"
        for a, b in pairs:
            seen[typ] += 1
            for name, fn in rules(index).items():
                with rule(fn): first, _ = offered(ids[a], index, cfg, kind)
                reach[typ, name] += any(c.id == ids[b] for c in first[1:])
    return {t: {name: share(reach[t, name], seen[t]) for name in rules(index)} for t in sorted(seen)}


def git_docs(index, n_seeds, cfg, bridge_seeds=120) -> dict:
    "On random Git-docs seeds, per type, before and after: same-document and boilerplate-only shares, gate passes."
    common = B.boilerplate_names(index, cfg.boilerplate_share)
    seeds = index.sample_ids(n_seeds, seed=1)
    out = {}
    for name, fn in rules(index).items():
        offers, same, boiler, passed, tried = Counter(), Counter(), Counter(), Counter(), Counter()
        with rule(fn):
            for i, sid in enumerate(seeds):
                kind = KINDS[i % 3]
                first, hood = offered(sid, index, cfg, kind)
                if len(hood.partners) < cfg.n_chunks - 1: continue
                tried[kind] += 1; passed[kind] += bool(first)
                for h in hood.partners:
                    offers[kind] += 1; same[kind] += h.doc_id == hood.seed.doc_id
                    shared = _shared_names(hood.seed, B.hit_chunk(h))
                    boiler[kind] += bool(shared) and all(n in common for n in shared)
            out[name] = {k: {"configurations": tried[k], "offered_partners": offers[k],
                             "same_document_share": share(same[k], offers[k]),
                             "boilerplate_only_share": round(boiler[k] / max(offers[k], 1), 3),
                             "run_gate_passes": f"{passed[k]}/{tried[k]}"} for k in KINDS}
            out[name]["template_run"] = template_bridges(index, seeds[:bridge_seeds], cfg, common)
    return {"seeds": len(seeds), "boilerplate_names": sorted(common)[:20], **out}


def template_bridges(index, seeds, cfg, common) -> dict:
    "`afind_bridge` with the template stand-in on these seeds (types in turn): per type, same-document configurations."
    llm = make_llm("template", max_concurrency=8)
    async def go():
        return await asyncio.gather(*(B.afind_bridge(s, index, llm, cfg, KINDS[i % 3]) for i, s in enumerate(seeds)))
    found = [(KINDS[i % 3], b) for i, b in enumerate(arun(go())) if b is not None]
    low = {n.lower() for n in common}
    per = {k: [b for kind, b in found if kind == k] for k in KINDS}
    return {"seeds": len(seeds), "configurations": len(found), "entity_calls": llm.usage.totals()["calls"],
            "same_document_share": {k: share(sum(b.same_document for b in bs), len(bs)) for k, bs in per.items()},
            "boilerplate_topic_share": round(sum(b.bridge_topic.strip().lower() in low for _, b in found)
                                             / max(len(found), 1), 3),
            "via": dict(Counter(b.via for _, b in found))}


def _shared_names(a: Chunk, b: Chunk) -> list[str]:
    "Every name of one chunk that the other mentions (the links the name matchers see)."
    out = []
    for c, other in ((a, B.chunk_text(b)), (b, B.chunk_text(a))):
        out += [n for n in candidate_names(c.text, (c.meta or {}).get("title", "")) if mentions(other, n)]
    return list(dict.fromkeys(out))


def verdict(report) -> dict:
    "Issue 41's bar: the comparison share's lower bound above the before's point estimate; bridge not below before."
    h = report.get("hotpotqa")
    if not h: return {}
    c, b = h["comparison"], h["bridge"]
    return {"comparison_lo_after_above_mean_before": c["after"]["lo"] > c["before"]["mean"],
            "bridge_after_not_below_before": b["after"]["mean"] >= b["before"]["mean"]}


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
    report["verdict"] = verdict(report)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(report, indent=2))
    if a.json: Path(a.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
