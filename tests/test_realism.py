"""`ragbench realism` (issue 43): a generated dataset against a team's real questions.

On the shared HotpotQA sample (100 questions and their 994 paragraphs, indexed with the model-free `hash` embedder
so the test stays quick): the first 50 questions are the "real" ones (a JSONL with their gold documents' titles);
a leak set built from them (each question replaced by the opening of its first supporting-fact sentence, its gold
the page that sentence is on) fails `--fail-if-easier`; the other 50 human questions pass it. hit@k counts a
question as found when all its evidence (a chunk of each gold page) is in the top k: hash 0.92 vs 0.16, difference
0.76 [0.59, 0.85]; with the shipped all-MiniLM-L6-v2 (measured, not run here) 0.96 vs 0.54, 0.42 [0.26, 0.56], and
the human half 0.70 vs 0.54, lower bound -0.03 (passes). Bad input names the file, line and field; the real
questions' text is shown only with --show-real. Run: pytest tests/test_realism.py -q
"""
import csv, json, os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.cli import main
from ragbench.core import Dataset
from ragbench.index import ChunkIndex

HOTPOT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hotpotqa" / "hotpotqa_train100.json"
pytestmark = pytest.mark.skipif(not HOTPOT.exists(), reason="shared data not present")


def run_cli(argv, capsys):
    "Run `ragbench ARGV` in-process through the dispatcher: (exit status, stdout, stderr)."
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def opening(q: dict, n: int = 12) -> str:
    "The first `n` words of a HotpotQA question's first supporting-fact sentence."
    title, i = q["supporting_facts"][0]
    return " ".join(dict((t, s) for t, s in q["context"])[title][i].split()[:n])


@pytest.fixture(scope="module")
def hotpot(tmp_path_factory):
    "The sample indexed (hash embedder), 50 real questions with gold document ids, a leak set and 50 other questions."
    root = tmp_path_factory.mktemp("realism")
    assert main(["static", "--format", "hotpotqa", str(HOTPOT), "--db", str(root / "db"), "--embedder", "hash",
                 "--out", str(root / "hot.jsonl"), "--quiet"]) == 0
    qs, ds = json.loads(HOTPOT.read_text()), Dataset.read(root / "hot.jsonl")
    assert [it.meta["source_id"] for it in ds] == [q["_id"] for q in qs]
    (root / "real.jsonl").write_text("".join(json.dumps(
        {"question": q["question"], "answer": q["answer"],
         "gold_doc_ids": list(dict.fromkeys(t for t, _ in q["supporting_facts"]))}) + "\n" for q in qs[:50]))
    pages = {}
    for c in ChunkIndex.open(root / "db").iter_chunks(): pages.setdefault(c.doc_id, []).append(c.id)
    Dataset([it.model_copy(update={"question": opening(q), "gold_chunk_ids": pages[q["supporting_facts"][0][0]]})
             for it, q in zip(ds.items[:50], qs[:50])]).write(root / "leak.jsonl")
    Dataset(ds.items[50:]).write(root / "human.jsonl")
    return root, qs


def test_a_leak_set_is_easier_and_human_questions_are_not(hotpot, capsys):
    root, qs = hotpot
    rc, out, err = run_cli(["realism", root / "leak.jsonl", "--real", root / "real.jsonl", "--db", root / "db",
                            "--fail-if-easier", "--out", root / "leak"], capsys)
    assert rc == 1, out + err
    assert "--fail-if-easier 0.05: EASIER" in out
    r = json.loads((root / "leak" / "realism.json").read_text())
    assert r["n"] == {"generated": 50, "real": 50, "generated_with_gold": 50, "real_with_gold": 50}  # titles -> chunks
    assert r["hit_difference"]["lo"] > 0.05 and r["easier"]["failed"] is True
    assert r["overlap"]["generated"]["mean"] > r["overlap"]["real"]["mean"]                        # the leak, beside
    rc, out, err = run_cli(["realism", root / "human.jsonl", "--real", root / "real.jsonl", "--db", root / "db",
                            "--fail-if-easier", "0.05"], capsys)
    assert rc == 0, out + err
    assert "--fail-if-easier 0.05: not shown easier" in out


def test_real_questions_are_shown_only_with_show_real(hotpot, capsys):
    root, qs = hotpot
    argv = ["realism", root / "human.jsonl", "--real", root / "real.jsonl", "--db", root / "db", "--out", root / "h"]
    rc, out, err = run_cli(argv, capsys)
    assert rc == 0, err
    saved = (root / "h" / "realism.json").read_text()
    shown = [q["question"] for q in qs[:50] if q["question"] in out + err or json.dumps(q["question"])[1:-1] in saved]
    assert shown == []
    assert sum(q["question"][:60] in out for q in qs[50:]) >= 5     # generated items are named with their text
    rc, out, err = run_cli(argv + ["--show-real"], capsys)
    assert rc == 0 and "real questions no generated question covers (--show-real):" in out
    assert sum(q["question"][:60] in out for q in qs[:50]) >= 10


def test_too_few_real_questions_with_gold_is_uninformative(hotpot, tmp_path, capsys):
    root, qs = hotpot
    lines = [json.loads(l) for l in (root / "real.jsonl").read_text().splitlines()]
    with open(tmp_path / "few.csv", "w", newline="") as f:       # 20 questions, 5 with their gold documents
        csv.writer(f).writerows([("question", "gold_doc_ids")] + [(d["question"], ";".join(d["gold_doc_ids"]) if i < 5
                                                                   else "") for i, d in enumerate(lines[:20])])
    rc, out, err = run_cli(["realism", root / "leak.jsonl", "--real", tmp_path / "few.csv", "--db", root / "db",
                            "--fail-if-easier"], capsys)
    assert rc == 0, err
    assert "uninformative: 5 real and 50 generated questions have gold" in out


def test_bad_input_names_file_line_and_field(hotpot, tmp_path, capsys):
    root, _ = hotpot
    cases = {"a.jsonl": ('{"question": "q?"}\n{"answer": "x"}\n', "a.jsonl:2: field 'question' is missing"),
             "b.jsonl": ('{"question": "q?", "gold_doc_ids": {"x": 1}}\n', "b.jsonl:1: field 'gold_doc_ids' must be"),
             "c.jsonl": ('{"question": "q?"}\n{"question": \n', "c.jsonl:2: not JSON"),
             "d.csv": ("query,answer\nq?,a\n", "d.csv:1: the header has no 'question' column"),
             "e.csv": ("question,answer\nq?,a\n,b\n", "e.csv:3: field 'question' is empty")}
    for name, (text, said) in cases.items():
        (tmp_path / name).write_text(text)
        rc, out, err = run_cli(["realism", root / "human.jsonl", "--real", tmp_path / name, "--db", root / "db"],
                               capsys)
        assert rc == 2 and said in err, (name, err)
    rc, out, err = run_cli(["realism", root / "human.jsonl", "--real", tmp_path / "none.jsonl", "--db", root / "db"],
                           capsys)
    assert rc == 2 and "real questions file not found" in err


def test_filter_keeps_generated_items_near_real_questions(hotpot, capsys):
    root, _ = hotpot
    rc, out, err = run_cli(["realism", root / "leak.jsonl", "--real", root / "real.jsonl", "--db", root / "db",
                            "--out", root / "f", "--filter", "--threshold", "0.3"], capsys)
    assert rc == 0, err
    r = json.loads((root / "f" / "realism.json").read_text())
    kept = [it.id for it in Dataset.read(root / "f" / "filtered.jsonl")]
    assert kept == [x["id"] for x in r["generated"] if x["nearest_real"] >= 0.3] and 0 < len(kept) < 50
