"""One full-text index per language in a mixed corpus (issue 43): the three Debian Reference books indexed together
(a section a chunk), BM25 recall@5 with each book's section titles as queries (gold: the same section number in any
language), with ragbench's routing and the alternatives it was chosen over:

- single: the text column's index alone (the dominant language's; what a mixed table had before);
- own alone: a query in a language with an index of its own searches that index alone;
- best score: that index and the text column's in one LanceDB search, each row's best score kept;
- ragbench: that index and the text column's, their hits taken in turn (`ChunkIndex.search`);
- all if unsure: ragbench, and a query too short to tell its language searches every index (best score).

    python tests/bench/bench_language_fts.py [--db /tmp/langfts-db] [--n 0]      # n: sections a book (0: all)
"""
import argparse, json, shutil, time
from collections import Counter
from pathlib import Path

from ragbench.core import Chunk
from ragbench.embed import HashEmbedder
from ragbench.index import ChunkIndex
from ragbench.stats import proportion_ci
from ragbench.text import detect_language

BOOKS = Path("/work/shared/data/debian_reference")


def book(lang: str, n: int) -> list[dict]:
    rows = [json.loads(l) for l in open(BOOKS / f"debian_reference_{lang}.jsonl")]
    return rows[:n] if n else rows


def folder_mb(p: Path) -> float:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**20


def ranked(idx, q: str, how: str, k: int = 5) -> list[str]:
    "The top-k ids for query `q` searched `how`."
    own, lang = idx._indexed_own_columns(), detect_language(q)
    fts = lambda cols: [r["id"] for r in idx.tbl.search(q, query_type="fts", fts_columns=cols).limit(k).to_list()]
    if how == "all if unsure" and not lang: return fts(["text", *own.values()])
    if how in ("ragbench", "all if unsure"): return [h.chunk_id for h in idx.search(q, k=k, mode="bm25")]
    if how == "single" or lang not in own: return fts("text")
    return fts(own[lang]) if how == "own alone" else fts([own[lang], "text"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", default="/tmp/langfts-db")
    ap.add_argument("--n", type=int, default=0)
    a = ap.parse_args()
    shutil.rmtree(a.db, ignore_errors=True)
    rows = {l: book(l, a.n) for l in ("en", "de", "fr")}
    chunks = [Chunk(id=r["id"], doc_id=r["id"], text=f"{r['title']}\n{r['text']}", meta={"title": r["title"]})
              for rs in rows.values() for r in rs]
    t0 = time.perf_counter()
    idx = ChunkIndex.build(a.db, chunks, HashEmbedder(64), progress=False)
    print(f"{len(idx)} sections indexed in {time.perf_counter() - t0:.1f} s, table {folder_mb(Path(a.db)):.2f} MB; "
          f"{idx.text_language['line']}")
    for lang in ("de", "fr", "en"):
        # a double quote makes a phrase query, which an index without positions refuses (as before this change)
        qs = [(r["title"], r["section"]) for r in rows[lang] if r["title"].strip() and '"' not in r["title"]]
        routes = Counter(str(idx._fts_columns(t)) for t, _ in qs)
        print(f"{lang} titles: {len(qs)} ({len(rows[lang]) - len(qs)} with a quote left out), searched {dict(routes)}")
        for how in ("single", "own alone", "best score", "ragbench", "all if unsure"):
            t = time.perf_counter()
            hit = sum(any(i.split("-", 2)[2] == s for i in ranked(idx, q, how)) for q, s in qs)
            ci = proportion_ci(hit, len(qs), method="wilson")
            print(f"  {how:>13}: recall@5 {hit / len(qs):.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}]  "
                  f"({1000 * (time.perf_counter() - t) / len(qs):.1f} ms a query)")


if __name__ == "__main__":
    main()
