"""Issue 43, generation in the corpus's language: the Debian Reference in German and French (30 sections of each) indexed
with ragbench's own build; TRIAD runs against the fake LLM server on 127.0.0.1 through the OpenAI SDK."""
import json
from collections import Counter
from pathlib import Path

import lancedb
import pytest
from lancedb.index import FTS

from ragbench.cli import main
from ragbench.core import Chunk, Dataset, QAItem
from ragbench.index import ChunkIndex
from ragbench.prompts import parse_chunks
from ragbench.testing import FakeLLMServer
from ragbench.text import detect_language

BOOKS = Path("/work/shared/data/debian_reference")
pytestmark = pytest.mark.skipif(not BOOKS.exists(), reason="the shared Debian Reference is not here")
GENERATE = "Write one question and its answer from the"      # the opening of TRIAD's generation prompt


def sections(lang: str, n: int = 30) -> list[Chunk]:
    "The first `n` sections of the Debian Reference in `lang`, one chunk each (title and text)."
    rows = [json.loads(l) for l in open(BOOKS / f"debian_reference_{lang}.jsonl")][:n]
    return [Chunk(id=r["id"], doc_id=r["id"], text=f"{r['title']}\n{r['text']}", meta={"title": r["title"]})
            for r in rows]


@pytest.fixture(scope="module")
def german(tmp_path_factory):
    return ChunkIndex.build(tmp_path_factory.mktemp("de") / "db", sections("de"), progress=False)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return ChunkIndex.build(tmp_path_factory.mktemp("defr") / "db", sections("de") + sections("fr"), progress=False)


def test_german_book_gets_a_lang_column_and_german_stemming(german):
    langs = Counter(b for t in german.tbl.search().select(["lang"]).limit(None).to_batches() for b in t.column("lang").to_pylist())
    assert langs["de"] >= 28 and set(langs) <= {"de", "en", ""}, langs
    assert german.text_language["fts_language"] == "German", german.text_language
    # section 1.2.3 says only "Einstellungen": the German stemmer finds it from "Einstellung", English stemming cannot
    hits = [h.chunk_id for h in german.search("Einstellung", k=10, mode="bm25")]
    assert "dref-de-1.2.3" in hits, hits
    rows = german.tbl.search().select(["id", "text"]).limit(None).to_arrow()
    english = lancedb.connect("memory://").create_table("en", data=rows)
    english.create_index("text", config=FTS())                        # FTS()'s defaults: English
    found = [r["id"] for r in english.search("Einstellung", query_type="fts").limit(10).to_list()]
    assert "dref-de-1.2.3" not in found, found


def test_index_command_says_the_full_text_language(tmp_path, capsys):
    src = tmp_path / "de.jsonl"
    src.write_text("".join(open(BOOKS / "debian_reference_de.jsonl").readlines()[:30]))
    assert main(["index", str(src), "--db", str(tmp_path / "db"), "--embedder", "hash:64", "--quiet"]) == 0
    assert "full-text index: German stemming and stop words" in capsys.readouterr().out


def test_older_table_without_lang_column_still_loads_and_grows(tmp_path):
    db = tmp_path / "db"
    idx = ChunkIndex.build(db, sections("de", 4), progress=False)
    idx.tbl.drop_columns(["lang"])                                     # the layout before issue 43
    old = ChunkIndex.open(db)
    assert old.add(sections("de", 8)) == 4 and "lang" not in old.tbl.schema.names
    assert old.search("Einstellung", k=3, mode="bm25") is not None and "lang" not in old.get("dref-de-3.1").meta
    assert old.chunk_language(old.get("dref-de-3.1")) == "de"          # detected from its text instead


def _recording(reply=None):
    "A responder that logs every request the server receives and answers generation prompts with `reply`."
    log = []
    def respond(req):
        log.append(req)
        return reply(req) if reply and GENERATE in req["prompt"] else None      # None: the template model's reply
    return log, respond


def _triad(db, out, srv, n=2, rounds=2):
    return main(["triad", "--db", str(db), "--out", str(out), "--llm", f"openai:{srv.url}/v1@fake-model", "--n", str(n),
                 "--seed", "3", "--max-rounds", str(rounds), "--no-unanswerable"])


def test_prompts_for_german_chunks_ask_for_german_and_pair_one_language(mixed, tmp_path):
    log, respond = _recording()
    with FakeLLMServer(responder=respond) as srv: _triad(mixed.db_dir, tmp_path / "run", srv, n=4)
    asked = [r["prompt"] for r in log if GENERATE in r["prompt"]]
    assert asked, "no generation prompt reached the server"
    by_lang = Counter()
    for p in asked:
        langs = {detect_language(text) for _, _, text in parse_chunks(p)} - {""}
        assert len(langs) == 1, langs                                  # TRIAD pairs chunks of one language
        lang = langs.pop()
        by_lang[lang] += 1
        want = {"de": "in German, the language of the passages", "fr": "in French, the language of the passages"}
        if lang in want: assert want[lang] in p
        else: assert "the language of the passages" not in p           # English: the prompt as it always was
    assert by_lang["de"], by_lang


def test_english_answer_to_german_chunks_is_rejected_by_the_language_gate(german, tmp_path, capsys):
    planted = {"question": "Welcher Befehl zeigt die Einstellungen des Systems unter Debian an?",
               "answer": "The command shows every setting of the system"}
    log, respond = _recording(lambda req: planted)
    out = tmp_path / "run"
    with FakeLLMServer(responder=respond) as srv: _triad(german.db_dir, out, srv, n=1)
    assert "rejected by the language gate" in capsys.readouterr().out
    asked = [r["prompt"] for r in log if GENERATE in r["prompt"]]
    assert asked and all("in German, the language of the passages" in p for p in asked)
    rejected = [QAItem(**json.loads(l)) for l in open(out / "rejected.jsonl")]
    gated = [i for i in rejected if i.attempts and i.attempts[-1].failed_check == "language"]
    assert gated, [(i.status, [a.failed_check for a in i.attempts]) for i in rejected]
    assert "written in English" in gated[0].attempts[-1].feedback and gated[0].meta["lang"] == "de"
    # the reviewer's reason reached the generator's revision prompt
    assert any("written in English, but the passages are in German" in p for p in asked[1:])
    s = json.loads((out / "summary.json").read_text())
    assert s["by_language"]["de"]["rejected_language"] == len(gated) and s["failed_checks"]["language"] >= len(gated)
    assert not (out / "dataset.jsonl").exists() or not (out / "dataset.jsonl").read_text().strip()


def test_german_items_are_kept_and_the_card_counts_them_per_language(german, tmp_path):
    reply = {"question": "Welcher Befehl zeigt die Einstellungen des Systems unter Debian an?", "answer": "sysctl"}
    log, respond = _recording(lambda req: reply)
    out = tmp_path / "run"
    with FakeLLMServer(responder=respond) as srv: _triad(german.db_dir, out, srv, n=2)
    items = [QAItem(**json.loads(l)) for l in open(out / "dataset.jsonl")]
    assert items and all(i.meta["lang"] == "de" for i in items)       # a one-word answer is not judged: too short
    assert Dataset(items).card()["language"] == {"de": len(items)}
    s = json.loads((out / "summary.json").read_text())
    assert s["by_language"]["de"]["accepted"] >= len(items) and s["by_language"]["de"]["rejected_language"] == 0


def test_report_splits_metrics_by_language_only_when_there_are_several(tmp_path):
    from ragbench.eval.scores import summarize
    from ragbench.report import build_report
    from ragbench.testing.demo import _demo_rows
    for langs, split in ((("de", "fr"), True), (("de",), False)):
        rows = _demo_rows(12, ("baseline", "top3"), seed=1)
        ids = list(dict.fromkeys(r["item_id"] for r in rows))
        rows = [{**r, "lang": langs[ids.index(r["item_id"]) % len(langs)]} for r in rows]
        d = tmp_path / "-".join(langs); d.mkdir()
        (d / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        summary = summarize(rows)
        (d / "summary.json").write_text(json.dumps(summary))
        assert set(summary["breakdowns"]["lang"]) == set(langs)
        text = build_report(d, tmp_path / f"{d.name}.html").read_text()
        assert ("<figure id='correct_by_language'>" in text) is split, (langs, split)


def test_dora_styles_gate_the_language_too():
    from ragbench.dora.gates import run_checks
    from ragbench.dora.styles import get_style
    evidence = [(c.id, c.text) for c in sections("de", 2)]
    checks = get_style("find").checks
    assert "language" in checks
    q = "Welche Leitregeln wurden beim Erstellen dieses Dokuments verfolgt?"
    assert "language" not in run_checks(checks, q, "KISS", [evidence[0][0]], evidence)          # too short to judge
    failed = run_checks(checks, q, "It keeps things short and simple", [evidence[0][0]], evidence)
    assert failed["language"] == "answer is in English, the evidence in German", failed


def _folder_digest(path: Path) -> str:
    import hashlib
    return hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())).hexdigest()


def test_a_users_table_is_read_in_its_language_and_never_written(tmp_path):
    "A user's table (no lang column, never written): languages detected once per chunk in the run, FTS copy in German."
    import pyarrow as pa
    from ragbench.embed import HashEmbedder
    from ragbench.triad import TriadConfig
    from ragbench.triad.bridge import neighbourhood
    chunks = sections("de", 12) + sections("fr", 4)
    vecs = HashEmbedder(64).encode([c.text for c in chunks])
    db = tmp_path / "own"
    lancedb.connect(str(db)).create_table("kb", data=pa.table({
        "chunk_id": [c.id for c in chunks], "content": [c.text for c in chunks],
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel().astype("float32")), 64)}))
    before = _folder_digest(db)
    idx = ChunkIndex.open(db, table="kb", embedder=HashEmbedder(64))
    hood = neighbourhood("dref-de-3.1", idx, TriadConfig())
    assert hood.hits and {h.chunk_id[:7] for h in hood.distinct} == {"dref-de"}, [h.chunk_id for h in hood.hits]
    assert any(h.chunk_id.startswith("dref-fr") for h in hood.hits)   # the filter had French neighbours to leave out
    assert idx._languages["dref-de-3.1"] == "de"                        # detected once, kept for the run
    assert idx.search("Einstellung", k=10, mode="bm25") and idx.text_language["fts_language"] == "German"
    assert _folder_digest(db) == before


# ---- one full-text index per language in a mixed corpus (issue 43, left open at the last stop)

def _fts_columns(idx) -> set:
    return {tuple(i.columns)[0] for i in idx.tbl.list_indices() if i.index_type == "FTS"}


@pytest.fixture(scope="module")
def trilingual(tmp_path_factory):
    "The three books indexed together, English the dominant language (BM25 only: the model-free embedder)."
    from ragbench.embed import HashEmbedder
    books = sections("en", 60) + sections("de") + sections("fr")
    return ChunkIndex.build(tmp_path_factory.mktemp("enfrde") / "db", books, HashEmbedder(64), progress=False)


def test_a_mixed_corpus_gets_a_full_text_index_in_each_language(trilingual):
    idx = trilingual
    assert idx.tbl.schema.names[-2:] == ["text_de", "text_fr"] and "text_en" not in idx.tbl.schema.names
    assert _fts_columns(idx) == {"text", "text_de", "text_fr"}
    rows = idx.tbl.search().select(["lang", "text", "text_de", "text_fr"]).limit(None).to_list()
    for r in rows:                                   # a language's own column holds its rows' text, null elsewhere
        assert r["text_de"] == (r["text"] if r["lang"] == "de" else None)
        assert r["text_fr"] == (r["text"] if r["lang"] == "fr" else None)
    assert idx.text_language["own_indexes"] == {"de": "text_de", "fr": "text_fr"}
    assert "German and French texts also in an index of their own language" in idx.text_language["line"]


@pytest.mark.parametrize("query, word, target", [
    ("Wo ist die Einstellung", "Einstellung", "dref-de-1.2.3"),          # the section says only "Einstellungen"
    ("Quelle est la signification de ce mot", "signification", "dref-fr-3.5"),   # ... only "significatif"
])
def test_a_query_searches_the_index_of_its_language_too(trilingual, query, word, target):
    idx, lang = trilingual, target[5:7]
    assert detect_language(query) == lang and idx._fts_columns(query) == [f"text_{lang}", "text"]
    assert target in [h.chunk_id for h in idx.search(query, k=10, mode="bm25")]
    assert target in [h.chunk_id for h in idx.search(query, k=10, mode="hybrid", dense_weight=0.0)]
    # the dominant language's index (English stemming, every row) cannot find it
    english = [r["id"] for r in idx.tbl.search(query, query_type="fts", fts_columns="text").limit(10).to_list()]
    assert target not in english, english
    alone = idx.tbl.search(word, query_type="fts", fts_columns="text").limit(200).to_list()
    assert target not in [r["id"] for r in alone]


def test_a_query_too_short_to_tell_or_in_another_language_searches_the_dominant_index(trilingual):
    for q in ("Einstellung",                                            # one word: its language is not detected
              "How do I change the settings of the system",            # English: the dominant language
              "¿Quién es el administrador del sistema?"):              # Spanish: no index of its own
        assert trilingual._fts_columns(q) == ["text"], q
    hits = trilingual.search("How do I change the settings of the system", k=5, mode="bm25")
    assert hits and all(h.meta["lang"] == "en" for h in hits)


def test_a_quoted_query_is_searched_as_plain_words(trilingual):
    "A query that is all one quoted phrase asks LanceDB for word positions the indexes do not keep; it reads as words."
    for q in ('"Wo ist die Einstellung"', '"system administrator"'):
        with pytest.raises(Exception, match="position"):          # the failure the plain reading avoids
            trilingual.tbl.search(q, query_type="fts", fts_columns="text").limit(5).to_list()
        assert trilingual.search(q, k=5, mode="bm25") == trilingual.search(q.strip('"'), k=5, mode="bm25")


def test_rows_added_later_fill_their_language_column_and_a_reopened_table_routes_alike(tmp_path):
    from ragbench.embed import HashEmbedder
    db = tmp_path / "db"
    ChunkIndex.build(db, sections("en", 40) + sections("de", 25), HashEmbedder(64), progress=False)
    idx = ChunkIndex.open(db)
    assert idx.add(sections("de", 40)[25:] + sections("fr", 25)) == 40       # French now qualifies: its column is added
    n = Counter(r["lang"] for r in idx.tbl.search().select(["lang"]).limit(None).to_list())
    filled = {c: idx.tbl.count_rows(f"{c} IS NOT NULL") for c in ("text_de", "text_fr")}
    assert filled == {"text_de": n["de"], "text_fr": n["fr"]} and n["de"] >= 38, (filled, n)
    again = ChunkIndex.open(db)
    assert again._fts_columns("Wo ist die Einstellung") == ["text_de", "text"]
    assert "dref-de-1.2.3" in [h.chunk_id for h in again.search("Wo ist die Einstellung", k=10, mode="bm25")]


def test_a_one_language_corpus_keeps_its_single_column_and_index(german, tmp_path):
    from ragbench.embed import HashEmbedder
    assert german.tbl.schema.names == ["id", "doc_id", "text", "vector", "meta", "lang"]
    assert _fts_columns(german) == {"text"} and german._fts_columns("Wo ist die Einstellung") == ["text"]
    # a few French sections are under the threshold (20 rows): no column of their own, the summary says why
    few = ChunkIndex.build(tmp_path / "db", sections("de") + sections("fr", 5), HashEmbedder(64), progress=False)
    assert "text_fr" not in few.tbl.schema.names and _fts_columns(few) == {"text"}
    assert "no other language has 20 texts" in few.text_language["line"]


# ---- a user's table: the chunk languages detected when seeds are read are kept in the run folder

def _users_table(path: Path) -> Path:
    "A user's LanceDB table of 16 German and 8 French sections (own column names, no lang column, no sidecar)."
    import pyarrow as pa
    from ragbench.embed import HashEmbedder
    chunks = sections("de", 16) + sections("fr", 8)
    vecs = HashEmbedder(64).encode([c.text for c in chunks])
    lancedb.connect(str(path)).create_table("kb", data=pa.table({
        "chunk_id": [c.id for c in chunks], "content": [c.text for c in chunks],
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel().astype("float32")), 64)}))
    return path


def _counting_detector(monkeypatch, texts):
    """Every chunk text in `texts` detected: by the index's chunk detector, or by `detect_language` of several passages
    (the writer's prompt, the language gate); the real detector answers."""
    import ragbench.index.read as read
    import ragbench.text as text
    seen = []
    for module in (read, text):
        real = module.detect_language
        spy = lambda x, real=real: (seen.append(x) if isinstance(x, str) and x in texts else None) or real(x)
        monkeypatch.setattr(module, "detect_language", spy)
    return seen


@pytest.mark.parametrize("keep_cache", [True, False])
def test_a_resumed_run_detects_no_chunk_of_a_users_table_twice(tmp_path, monkeypatch, keep_cache):
    db, out = _users_table(tmp_path / "own"), tmp_path / "run"
    before = _folder_digest(db)
    texts = {r["content"] for r in lancedb.connect(str(db)).open_table("kb").to_arrow().to_pylist()}
    seen = _counting_detector(monkeypatch, texts)
    reply = {"question": "Welcher Befehl zeigt die Einstellungen des Systems unter Debian an?", "answer": "sysctl"}
    args = ["triad", "--db", str(db), "--table", "kb", "--embedder", "hash:64", "--out", str(out), "--n", "3",
            "--seed", "3", "--no-unanswerable", "--max-rounds", "2"]
    with FakeLLMServer(responder=lambda req: reply if GENERATE in req["prompt"] else None) as srv:
        llm = ["--llm", f"openai:{srv.url}/v1@fake-model"]
        assert main([*args, *llm, "--max-calls", "6"]) == 0              # the budget stops it after a seed or two
        first, tried = list(seen), json.loads((out / "summary.json").read_text())["seeds_tried"]
        cached = [json.loads(l) for l in open(out / "languages.jsonl")]
        assert first and len(first) == len(set(first)) == len(cached)     # once each, every one appended
        assert {r["lang"] for r in cached} <= {"de", "fr", "en", ""} and "de" in {r["lang"] for r in cached}
        if not keep_cache: (out / "languages.jsonl").unlink()
        seen.clear()
        assert main([*args, *llm]) == 0                                    # the same command resumes the run
    again = set(seen) & set(first)
    assert json.loads((out / "summary.json").read_text())["seeds_tried"] > tried   # the resume read new seeds
    if keep_cache: assert not again and len(seen) == len(set(seen)), len(again)
    else: assert again                                         # the control: without the cache, detected again
    assert _folder_digest(db) == before                                    # the user's table is never written
