"""The team's own RAG under test, end to end: a real HTTP service on 127.0.0.1 (tests/tools/rag_server.py: dense
search over a LanceDB table with the bundled embedder, its own reply shape, texts instead of chunk ids, a bearer
token from the environment) evaluated by `ragbench evaluate` in a subprocess. The service's request log must equal
ragbench's count, a budget must hold across resumes, a rerun must ask nothing, and a SIGKILL mid-run must resume
without losing or duplicating a row."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
TOKEN_ENV, TOKEN = "RB_TEAM_RAG_TOKEN", "tok-5e3c7a91"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", TOKEN_ENV: TOKEN}


@pytest.fixture(scope="module")
def hotpot(tmp_path_factory):
    "The bundled HotpotQA questions (dataset.jsonl) and their paragraphs indexed with the bundled embedder."
    from ragbench.benchmarks import index_static, load_static
    from ragbench.demo import hotpotqa_sample_path
    from ragbench.embed import make_embedder
    work = tmp_path_factory.mktemp("systems")
    ds = load_static(hotpotqa_sample_path(), "hotpotqa"); ds.write(work / "dataset.jsonl")
    index_static(hotpotqa_sample_path(), "hotpotqa", work / "db", embedder=make_embedder())
    return {"work": work, "dataset": work / "dataset.jsonl", "db": work / "db", "questions": [it.question for it in ds]}


class Service:
    "tests/tools/rag_server.py in a subprocess; `requests()` reads its log."
    def __init__(self, db, log: Path, delay: float = 0.0):
        self.log = log
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests/tools/rag_server.py"), str(db), str(log), "--delay", str(delay),
                                      "--token-env", TOKEN_ENV], stdout=subprocess.PIPE, text=True, env=ENV)
        line = self.proc.stdout.readline()
        assert line.startswith("listening "), f"the RAG service did not start: {line!r}"
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/rag"

    def requests(self) -> list:
        return [json.loads(l) for l in self.log.read_text().splitlines()] if self.log.exists() else []

    def stop(self):
        self.proc.terminate(); self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def service(hotpot):
    s = Service(hotpot["db"], hotpot["work"] / "requests.jsonl")
    yield s
    s.stop()


def setups_file(path: Path, url: str, concurrency: int = 4, baseline: bool = True) -> Path:
    "A setups file with the team's service (its reply shape, a header naming an environment variable) and a built-in dense top-3."
    path.write_text("setups:\n"
                    f"  - {{name: team-rag, endpoint: '{url}', top_k: 3, concurrency: {concurrency}, retries: 2,\n"
                    f"     headers: {{Authorization: 'Bearer ${{{TOKEN_ENV}}}'}}, answer_path: data.answer, contexts_path: data.sources}}\n"
                    + ("  - {name: dense-top3, retrieval: dense, top_k: 3}\n" if baseline else ""))
    return path


def evaluate(hotpot, setups: Path, out: Path, *extra, popen: bool = False):
    cmd = [sys.executable, "-m", "ragbench.cli", "evaluate", "--dataset", str(hotpot["dataset"]), "--db", str(hotpot["db"]),
           "--setups", str(setups), "--out", str(out), "--judges", "none", "--no-bertscore", "--quiet",
           "--batch-size", "2", *map(str, extra)]
    if popen: return subprocess.Popen(cmd, env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    return subprocess.run(cmd, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600)


def rows(out: Path, setup: str) -> list:
    return [r for r in map(json.loads, (out / "scores.jsonl").read_text().splitlines()) if r["setup"] == setup]


def test_endpoint_counted_budgeted_cached_and_scored_like_its_retrieval(hotpot, service):
    out, setups = hotpot["work"] / "eval", setups_file(hotpot["work"] / "setups.yaml", service.url)
    p = evaluate(hotpot, setups, out, "--max-calls", 5)                # a budget: five requests, then a clean stop
    assert p.returncode == 1 and "budget" in p.stderr, p.stderr
    assert len(service.requests()) == 5 == json.loads((out / "summary.json").read_text())["usage"]["run"]["calls"]
    p = evaluate(hotpot, setups, out)                                  # resume: the other seven
    assert p.returncode == 0, p.stderr
    reqs, summary = service.requests(), json.loads((out / "summary.json").read_text())
    assert len(reqs) == summary["usage"]["run"]["calls"] == 12         # the service's log equals ragbench's count
    assert sorted(r["body"]["question"] for r in reqs) == sorted(hotpot["questions"])   # each question once, nothing else
    assert all(set(r["body"]) == {"question"} and r["auth"] for r in reqs)
    team, dense = {r["item_id"]: r for r in rows(out, "team-rag")}, {r["item_id"]: r for r in rows(out, "dense-top3")}
    assert len(team) == 12 and all(r["error"] is None for r in team.values())
    # the service is a dense top-3 over the same table: its texts map back exactly to the chunks our own search finds
    assert {i: r["retrieved_chunk_ids"] for i, r in team.items()} == {i: r["retrieved_chunk_ids"] for i, r in dense.items()}
    assert summary["context_mapping"]["team-rag"] == {"id": 0, "exact": 36, "overlap": 0, "document": 0, "unmapped": 0}
    assert summary["setups"]["team-rag"]["recall@k"]["mean"] == summary["setups"]["dense-top3"]["recall@k"]["mean"]
    assert summary["setups"]["team-rag"]["token_f1"]["n"] == 12        # its answers are scored too
    assert summary["models"]["answer"]["team-rag"] == f"endpoint:{service.url}"
    assert not [f for f in out.rglob("*") if f.is_file() and TOKEN in f.read_text(errors="replace")]   # the secret is never stored
    p = evaluate(hotpot, setups, out)                                  # a rerun asks nothing
    assert p.returncode == 0 and len(service.requests()) == 12 and "(0 new)" in p.stdout, p.stdout


def test_missing_header_variable_is_refused_before_asking(hotpot, service, monkeypatch):
    from ragbench.core import UserError
    from ragbench.eval import evaluate
    monkeypatch.delenv(TOKEN_ENV, raising=False)      # (the variable is only in the subprocesses' environment)
    n, out = len(service.requests()), hotpot["work"] / "eval-noenv"
    setups = setups_file(hotpot["work"] / "setups-noenv.yaml", service.url, baseline=False)
    with pytest.raises(UserError, match=TOKEN_ENV):
        evaluate(hotpot["dataset"], setups, out, db=hotpot["db"], judges=(), bertscore=False)
    assert len(service.requests()) == n and not out.exists()          # nothing sent, nothing written


def test_langchain_retriever_is_a_retrieval_only_setup(hotpot):
    "A real LangChain retriever (an in-memory vector store over the bundled embedder) evaluated like the built-in dense search."
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore
    from ragbench.embed import make_embedder
    from ragbench.eval import Setup, evaluate
    from ragbench.index import ChunkIndex
    emb = make_embedder()

    class Bundled(Embeddings):
        def embed_documents(self, texts): return [[float(x) for x in v] for v in emb.encode(list(texts))]
        def embed_query(self, text): return self.embed_documents([text])[0]

    chunks = list(ChunkIndex.open(hotpot["db"]).iter_chunks())
    store = InMemoryVectorStore(Bundled())
    store.add_texts([c.text for c in chunks], metadatas=[{"source": c.doc_id} for c in chunks])
    lc = Setup(name="langchain", function=store.as_retriever(search_kwargs={"k": 3}), top_k=3)
    summ = evaluate(hotpot["dataset"], [lc, Setup(name="dense-top3", top_k=3)], hotpot["work"] / "eval-lc", db=hotpot["db"],
                    judges=(), bertscore=False)
    assert summ["context_mapping"]["langchain"] == {"id": 0, "exact": 36, "overlap": 0, "document": 0, "unmapped": 0}
    assert summ["setups"]["langchain"]["recall@k"]["mean"] == summ["setups"]["dense-top3"]["recall@k"]["mean"]
    assert summ["setups"]["langchain"]["token_f1"]["n"] == 0           # a retriever gives no answer: retrieval metrics only
    assert summ["models"]["answer"]["langchain"].startswith("function:langchain_core.")


def test_sigkill_mid_run_resumes_without_loss_or_duplicates(hotpot):
    slow = Service(hotpot["db"], hotpot["work"] / "requests-slow.jsonl", delay=0.4)
    try:
        out, setups = hotpot["work"] / "eval-kill", setups_file(hotpot["work"] / "setups-kill.yaml", slow.url, concurrency=2, baseline=False)
        p = evaluate(hotpot, setups, out, popen=True)
        t0 = time.time()
        while len(slow.requests()) < 5:
            assert p.poll() is None and time.time() - t0 < 300, "evaluate ended before the kill"
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGKILL); p.wait()
        before = len(rows(out, "team-rag")) if (out / "scores.jsonl").exists() else 0
        assert before < 12
        done = evaluate(hotpot, setups, out)
        assert done.returncode == 0, done.stderr
        got = rows(out, "team-rag")
        assert len(got) == 12 and len({r["item_id"] for r in got}) == 12    # every item once: nothing lost, nothing twice
        reqs = slow.requests()
        assert 12 <= len(reqs) <= 12 + 2                                   # at most the requests in flight at the kill are asked again
        assert json.loads((out / "summary.json").read_text())["usage"]["run"]["calls"] >= len(reqs)   # counted before sent: never under
    finally: slow.stop()


@pytest.fixture(scope="module")
def git_sample(tmp_path_factory):
    "Eight chunks of the bundled Git docs sample indexed with the bundled embedder, and one question per chunk (its opening words, gold: that chunk)."
    from itertools import islice
    from ragbench.core import Dataset, QAItem
    from ragbench.corpus import chunk_documents, load_documents, sample_corpus_path
    from ragbench.embed import make_embedder
    from ragbench.index import ChunkIndex
    work, emb = tmp_path_factory.mktemp("systems-git"), make_embedder()
    chunks = list(islice(chunk_documents(load_documents(sample_corpus_path()), target_tokens=256, min_tokens=60, max_tokens=512), 8))
    ChunkIndex.build(work / "db", chunks, emb)
    ds = Dataset(QAItem(id=f"git-{i}", method="static", kind="single-hop", question=" ".join(c.text.split()[:14]),
                        answer=" ".join(c.text.split()[14:30]), gold_chunk_ids=[c.id]) for i, c in enumerate(chunks))
    ds.write(work / "dataset.jsonl")
    return {"work": work, "dataset": work / "dataset.jsonl", "db": work / "db", "chunks": chunks, "embedder": emb}


def llama_index_over(git_sample):
    "A real LlamaIndex VectorStoreIndex over the chunks' texts, embedded by a BaseEmbedding that wraps the bundled embedder."
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.schema import TextNode
    emb = git_sample["embedder"]

    class Bundled(BaseEmbedding):
        def _get_text_embeddings(self, texts): return [[float(x) for x in v] for v in emb.encode(list(texts))]
        def _get_text_embedding(self, text): return self._get_text_embeddings([text])[0]
        def _get_query_embedding(self, query): return self._get_text_embedding(query)
        async def _aget_query_embedding(self, query): return self._get_query_embedding(query)

    nodes = [TextNode(text=c.text, metadata={"source": c.doc_id}, excluded_embed_metadata_keys=["source"]) for c in git_sample["chunks"]]
    return VectorStoreIndex(nodes, embed_model=Bundled())


def test_llamaindex_retriever_and_query_engine(git_sample):
    "A real LlamaIndex retriever (retrieval only) and query engine (MockLLM answering) evaluated like the built-in dense search."
    from llama_index.core.llms import MockLLM
    from ragbench.eval import Setup, evaluate
    index = llama_index_over(git_sample)
    li = Setup(name="llamaindex", function=index.as_retriever(similarity_top_k=3), top_k=3)
    qe = Setup(name="llamaindex-qe", function=index.as_query_engine(llm=MockLLM(max_tokens=8), similarity_top_k=3), top_k=3)
    summ = evaluate(git_sample["dataset"], [li, qe, Setup(name="dense-top3", top_k=3)], git_sample["work"] / "eval-li", db=git_sample["db"],
                    judges=(), bertscore=False)
    n = len(git_sample["chunks"])
    for name in ("llamaindex", "llamaindex-qe"):
        assert summ["context_mapping"][name] == {"id": 0, "exact": 3 * n, "overlap": 0, "document": 0, "unmapped": 0}
        assert summ["setups"][name]["recall@k"]["mean"] == summ["setups"]["dense-top3"]["recall@k"]["mean"] > 0.5
    scores = [json.loads(l) for l in (git_sample["work"] / "eval-li" / "scores.jsonl").read_text().splitlines()]
    by = lambda s: {r["item_id"]: r["retrieved_chunk_ids"] for r in scores if r["setup"] == s}
    assert by("llamaindex") == by("llamaindex-qe") == by("dense-top3")       # the same chunks, in the same order
    assert summ["setups"]["llamaindex"]["token_f1"]["n"] == 0                 # a retriever gives no answer: retrieval metrics only
    assert summ["setups"]["llamaindex-qe"]["token_f1"]["n"] == n              # the query engine's (MockLLM's) answers are scored
    assert all(r["answer"] == "text " * 7 + "text" for r in scores if r["setup"] == "llamaindex-qe"), [r.get("answer") for r in scores][:3]
    assert summ["models"]["answer"]["llamaindex"] == "function:llama_index.core.indices.vector_store.retrievers.retriever:VectorIndexRetriever"
    assert summ["models"]["answer"]["llamaindex-qe"].endswith(":RetrieverQueryEngine")
