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
