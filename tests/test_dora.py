"""DoRA: gates on literal examples, end-to-end runs on a Git-docs slice (scripted LLM and fake server), leakage, CLI."""
import json, os, re
from pathlib import Path
from unittest.mock import patch

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Chunk, Dataset, QAItem
from ragbench.dora.styles import get_style, Style, register_style, list_styles
from ragbench.dora.gates import run_checks, gate, span_f1, _numeric_consistency, context_recall, context_precision, qa_relevance
from ragbench.text import split_sentences
from ragbench.dora import run_dora, load_config, DoraConfig
from ragbench.cli import main
from ragbench.dora.splits import leakage_check, export_sft

GITDOCS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gitdocs" / "git_docs.jsonl"
if not GITDOCS.exists(): GITDOCS = Path("/work/shared/data/gitdocs/git_docs.jsonl")
SLICE = ["git-gc.txt", "git-prune.txt", "git-cherry-pick.txt", "git-credential-cache.txt", "git-revert.txt",
         "git-rm.txt", "git-show-ref.txt", "git-pack-refs.txt"]
ALL = ["find", "explain", "summarize", "generate", "provide"]


def dora_cli(argv):
    "`ragbench dora ARGV` in-process: its exit status."
    return main(["dora", *argv])

# ---------------------------------------------------------------------------------------------- gates

EV = [("c-1", "Unreachable objects older than 2 weeks are pruned by `git gc`. The gc.pruneExpire setting changes this period."),
      ("c-2", "With --aggressive, git gc optimizes the repository more thoroughly, at the cost of much more time.")]
Q = "How old must unreachable objects be before git gc prunes them?"

@pytest.mark.parametrize("style,question,answer,cited,failed", [
    ("provide", Q, "a fortnight", ["c-1"], {"has_number"}),                         # provide answer without a number
    ("provide", Q, "older than 3 weeks", ["c-1"], {"numbers_in_evidence"}),         # number not in the evidence
    ("provide", Q, "older than 2 weeks", ["c-1"], set()),
    ("find", "Which setting changes the pruning period of git gc?", "the prune expiry option", ["c-1"], {"verbatim"}),  # not verbatim
    ("find", "Which setting changes the pruning period of git gc?", "gc.pruneExpire", ["c-1"], set()),
    ("find", "Which setting changes the pruning period of git gc?", "Is it gc.pruneExpire?", ["c-1"], {"not_a_question", "verbatim"}),
    ("find", "According to the document, which setting changes the period?", "gc.pruneExpire", ["c-1"], {"no_doc_reference"}),
    ("find", "What does the gc.pruneExpire setting change?", "gc.pruneExpire", ["c-1"], {"answer_not_in_question"}),
    ("find", "Which setting changes the pruning period of git gc?", " ", ["c-1"], {"non_empty", "verbatim"}),
    ("find", "Which setting changes the pruning period of git gc?", " ".join(["word"] * 25), [], {"max_words", "verbatim"}),
    ("explain", "Why does git gc delete some objects?", "It prunes old objects. It uses gc.pruneExpire.", ["c-1"], {"citations"}),
    ("explain", "Why does git gc delete some objects?", "It prunes old objects.", ["c-1", "c-2"], {"sentences", "citations"}),  # c-2 supports none of it
    ("summarize", "What are the main points about git gc maintenance?", "It prunes. It packs. It repacks. It optimizes. It waits.",
     ["c-1", "c-2"], {"sentences"}),
    ("generate", "Which tasks does git gc perform on a repository?", "1. pruning\n2. packing", ["c-1", "c-2"], {"numbered_list", "citations"}),
    ("generate", "Which tasks does git gc perform on a repository?", "1. pruning\n2. packing\n3. optimizing", ["c-1", "c-2"], set()),
    ("explain", "Why does the text say objects vanish?", "It prunes them. They are old.", ["c-1", "c-2"], {"no_doc_reference", "citations"}),
])
def test_hard_checks(style, question, answer, cited, failed):
    assert set(run_checks(get_style(style).checks, question, answer, cited, EV)) == failed


def test_metrics_literal():
    texts = [t for _, t in EV]
    assert span_f1("older than 2 weeks", texts) == 1.0 and span_f1("bananas ripen in the sun", texts) < 0.3
    assert _numeric_consistency("2 weeks", texts) == 1.0 and _numeric_consistency("3 weeks", texts) == 0.0
    assert _numeric_consistency("no numbers", texts) == 1.0
    two = "Unreachable objects older than 2 weeks are pruned. With --aggressive git gc optimizes more thoroughly."
    assert context_recall(two, texts) == 1.0 and context_precision(two, texts) == 1.0
    assert context_precision("Unreachable objects older than 2 weeks are pruned.", texts) == 0.5
    assert qa_relevance("Why does git gc prune objects?", "git gc prunes old objects.") == 1.0


def test_gate_quality_threshold():
    good = ('git gc prunes unreachable objects after a set age. The docs say "older than 2 weeks are pruned", '
            'and "--aggressive" makes it optimize "more thoroughly".')
    assert gate("explain", "Why does git gc delete some objects?", good, ["c-1", "c-2"], EV, labels=["entailment"] * 2).passed
    # cites and draws on both chunks (the citation check passes), but the judge finds it unsupported and contradicted
    bad = "Unreachable objects are pruned because a janitor sweeps them monthly. The --aggressive option makes git gc delete all branches."
    r = gate("explain", "Why does git gc delete some objects?", bad, ["c-1", "c-2"], EV, labels=["neutral", "contradiction"])
    assert not r.passed and r.failed_check == "quality" and r.score < r.tau, r
    # unsupported by the chunks it cites: the citation check fails first
    r = gate("explain", "Why does git gc delete some objects?", "Objects vanish because a janitor sweeps them monthly. "
             "Server storage quotas force this cleanup.", ["c-1", "c-2"], EV, labels=["neutral", "contradiction"])
    assert not r.passed and r.failed_check == "citations" and r.score < r.tau
    # a contradicted provide answer fails even with the right-looking number
    r = gate("provide", Q, "older than 2 weeks", ["c-1"], EV, labels=["contradiction"])
    assert not r.passed and r.failed_check == "quality"


def test_user_style_without_editing_ragbench(tmp_path):
    register_style(Style(name="compare_t", description="how two options differ", template="Ask how two options differ.",
                         k=2, checks={"non_empty": {}, "citations": {"min": 2}}, weights={"entailment": 1.0}, tau=0.5))
    assert "compare_t" in list_styles()
    ok = gate("compare_t", "How do gc options differ here?", "Unreachable objects older than 2 weeks are pruned. "
              "With --aggressive, git gc optimizes the repository more thoroughly.", ["c-1", "c-2"], EV)
    assert ok.passed, ok

# ---------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    "An 8-document slice of the Git docs, chunked and indexed with the hash embedder (no model load)."
    from ragbench.corpus import load_documents, chunk_documents
    from ragbench.index import ChunkIndex
    root = tmp_path_factory.mktemp("dora")
    rows = [json.loads(l) for l in GITDOCS.read_text().splitlines()]
    rows = [r for r in rows if r["id"] in SLICE]
    assert len(rows) == 8
    dup = dict(next(r for r in rows if r["id"] == "git-gc.txt"), id="copy-of-git-gc.txt")          # a planted duplicate for the leakage test
    (root / "slice.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "slice_dup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [dup]))
    chunks = list(chunk_documents(load_documents(root / "slice.jsonl")))
    ChunkIndex.build(root / "db", chunks, embedder="hash", progress=False)
    dchunks = list(chunk_documents(load_documents(root / "slice_dup.jsonl")))
    ChunkIndex.build(root / "db_dup", dchunks, embedder="hash", progress=False)
    return {"root": root, "db": root / "db", "db_dup": root / "db_dup", "chunks": chunks}


@pytest.fixture(scope="module")
def server():
    from ragbench.testing import FakeLLMServer
    with FakeLLMServer() as srv: yield srv


def spec(srv): return f"openai:{srv.url}/v1@fake"

# ---------------------------------------------------------------------------------------------- end to end

def _script(req):
    "A scripted model that follows the DoRA contracts: the stand-in's items for the style and chunks of each prompt."
    if req.stage == "dora_bundle": return {"completeness": 4, "complementarity": 4, "coherence": 4, "task_fit": 4}
    if req.stage == "dora_entail": return {"label": "entailment"}
    from ragbench.llm.template import template_reply
    return template_reply(req.prompt, req.system, req.schema)


def test_e2e_scripted_llm(corpus, tmp_path):
    from ragbench.index import ChunkIndex
    from ragbench.testing import FakeLLM
    idx = ChunkIndex.open(corpus["db"])
    llm = FakeLLM(_script)
    r = run_dora(idx, llm, cfg=load_config(per_style=2), out=tmp_path / "run")
    assert r.summary["achieved"] == {s: 2 for s in ALL}, r.summary
    ds = Dataset.read(tmp_path / "run" / "dataset.jsonl")
    assert len(ds) == 10
    ids = {c.id for c in corpus["chunks"]}
    for it in ds:
        assert it.method == "dora" and it.kind == it.style and it.status == "accepted"
        assert it.gold_chunk_ids and set(it.gold_chunk_ids) <= ids
        assert [c.chunk_id for c in it.contexts] == it.gold_chunk_ids and all(c.relevant and c.source == "gold" for c in it.contexts)
        assert len(it.gold_chunk_ids) >= (2 if get_style(it.style).multi_chunk else 1)
        assert it.attempts[0].judge["score"] >= get_style(it.style).tau
    assert len({it.question for it in ds}) == 10


def test_e2e_fake_server_cli_resumable(corpus, server, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--db", str(corpus["db"]), "--out", str(out), "--per-style", "2", "--llm", spec(server), "--no-progress", "--seed", "1"]
    server.reset_stats()
    assert dora_cli(argv) == 0
    n1 = server.stats()["requests"]
    s = json.loads((out / "summary.json").read_text())
    from ragbench.llm import CallMeter
    assert s["usage"]["calls"] == n1 == CallMeter(out / "calls.jsonl").totals()["calls"]   # per-item usage adds up to what the server saw
    assert s["achieved"] == {st: 2 for st in ALL}, s
    assert s["requested"] == {st: 2 for st in ALL}
    assert s["usage"]["calls"] > 0 and s["per_accepted"]["calls"] > 0 and s["per_accepted"]["tokens"] > 0
    assert set(s) >= {"candidates", "gate_failures", "acceptance", "duplicates", "rounds"}
    items = Dataset.read(out / "dataset.jsonl")
    assert len(items) == 10 and {it.style for it in items} == set(ALL)
    assert all(it.models["generate"].startswith("openai:") for it in items)
    assert (out / "cache").is_dir() and (out / "candidates.jsonl").exists()
    # a second run of the finished job costs no requests and gives the same dataset
    assert dora_cli(argv) == 0
    assert server.stats()["requests"] == n1
    assert [it.id for it in Dataset.read(out / "dataset.jsonl")] == [it.id for it in items]
    assert "achieved 10/10" in capsys.readouterr().out


def test_fake_server_without_dora_rules_degrades_to_rejections(corpus, server, tmp_path):
    "The generic fake answers ('What does the text say about ...') fail the gates: rejections, not crashes."
    from dataclasses import replace
    from ragbench.prompts import PROMPTS, register_prompt
    out = tmp_path / "run"
    saved = [PROMPTS[get_style(s).prompt_name] for s in ("find", "explain")]
    for t in saved: register_prompt(replace(t, stand_in=None))
    try:
        rc = dora_cli(["--db", str(corpus["db"]), "--out", str(out), "--per-style", "1", "--styles", "find,explain",
                       "--llm", spec(server), "--no-progress", "--no-embed"])
    finally:
        for t in saved: register_prompt(t)
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert sum(s["candidates"].values()) > 0 and s["gate_failures"]
    assert sum(s["achieved"].values()) <= 2


def test_llm_errors_become_rejections(corpus, tmp_path):
    from ragbench.index import ChunkIndex
    from ragbench.llm import LLMError
    from ragbench.testing import FakeLLM
    idx = ChunkIndex.open(corpus["db"])
    flaky = FakeLLM(lambda r: LLMError("boom") if r.stage == "dora_generate" else "not json", max_retries=0, max_repairs=0)
    r = run_dora(idx, flaky, cfg=load_config(per_style=1, styles=["find", "summarize"]))
    assert r.items == [] and r.summary["achieved"] == {"find": 0, "summarize": 0}
    assert set(r.summary["gate_failures"]) <= {"llm_error", "too_few_chunks", "no_candidates"}
    assert r.summary["gate_failures"].get("llm_error", 0) > 0


def test_budget_stops_cleanly(corpus, server, tmp_path):
    out = tmp_path / "run"
    rc = dora_cli(["--db", str(corpus["db"]), "--out", str(out), "--per-style", "3", "--llm", spec(server),
                   "--max-calls", "10", "--no-progress", "--no-embed"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["stopped"] == "budget" and s["usage"]["calls"] <= 10


def test_user_styles_file_via_cli(corpus, server, tmp_path):
    (tmp_path / "styles.yaml").write_text(
        "brief:\n  base: summarize\n  description: a two-sentence brief\n  checks: {sentences: {min: 2, max: 2}}\n  tau: 0.5\n")
    out = tmp_path / "run"
    rc = dora_cli(["--db", str(corpus["db"]), "--out", str(out), "--per-style", "1", "--styles", "brief,find",
                   "--styles-file", str(tmp_path / "styles.yaml"), "--llm", spec(server), "--no-progress", "--no-embed"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert set(s["requested"]) == {"brief", "find"} and s["achieved"]["find"] == 1

# ---------------------------------------------------------------------------------------------- splits

def test_split_leakage_planted_duplicate(corpus, server, tmp_path, capsys):
    "git-gc.txt (train) and copy-of-git-gc.txt (test) hold the same text: the leakage check must fail the run."
    (tmp_path / "test_docs.txt").write_text("copy-of-git-gc.txt\ngit-prune.txt\n")
    (tmp_path / "docs.txt").write_text("git-gc.txt\ngit-rm.txt\ncopy-of-git-gc.txt\ngit-prune.txt\n")
    out = tmp_path / "run"
    rc = dora_cli(["--db", str(corpus["db_dup"]), "--out", str(out), "--per-style", "2", "--styles", "find,explain",
                   "--docs", str(tmp_path / "docs.txt"), "--split", "train,test", "--test-docs", str(tmp_path / "test_docs.txt"),
                   "--llm", spec(server), "--no-progress"])
    assert rc == 3
    leak = json.loads((out / "leakage.json").read_text())
    assert not leak["passed"] and leak["evidence_ngram"]["flagged"] >= 1 and leak["evidence_ngram"]["max"] == 1.0
    assert "leakage" in capsys.readouterr().err


def test_split_clean_cross_generator_and_sft_export(corpus, server, tmp_path):
    (tmp_path / "test_docs.txt").write_text("git-revert.txt\ngit-cherry-pick.txt\n")
    out = tmp_path / "run"
    rc = dora_cli(["--db", str(corpus["db"]), "--out", str(out), "--per-style", "1", "--styles", "find,summarize,provide",
                   "--split", "train,test", "--test-docs", str(tmp_path / "test_docs.txt"),
                   "--llm", spec(server), "--test-llm", f"openai:{server.url}/v1@fake-other", "--no-progress",
                   "--leak-cosine", "0.999"])
    leak = json.loads((out / "leakage.json").read_text())
    assert rc == 0, leak
    assert leak["passed"] and not leak["doc_overlap"]
    items = Dataset.read(out / "dataset.jsonl")
    tr = [it for it in items if it.split == "train"]; te = [it for it in items if it.split == "test"]
    assert tr and te
    assert {it.meta["doc_id"] for it in te} <= {"git-revert.txt", "git-cherry-pick.txt"}
    assert not {it.meta["doc_id"] for it in tr} & {"git-revert.txt", "git-cherry-pick.txt"}
    assert {it.models["generate"] for it in tr} != {it.models["generate"] for it in te}
    chat = [json.loads(l) for l in (out / "sft" / "train.chat.jsonl").read_text().splitlines()]
    assert len(chat) == len(tr) and all([m["role"] for m in c["messages"]] == ["system", "user", "assistant"] for c in chat)
    assert all("Context:\n[1]" in c["messages"][1]["content"] for c in chat)
    import yaml
    readme = (out / "sft" / "hf" / "README.md").read_text()
    hdr = yaml.safe_load(readme.split("---")[1])
    files = {d["split"]: d["path"] for d in hdr["configs"][0]["data_files"]}
    assert files == {"train": "data/train.jsonl", "test": "data/test.jsonl"}
    rows = [json.loads(l) for l in (out / "sft" / "hf" / files["train"]).read_text().splitlines()]
    assert rows and {"question", "answer", "context", "messages", "style"} <= set(rows[0])
    card = json.loads((out / "sft" / "dataset_card.json").read_text())
    assert card["splits"]["train"]["models"]["generate"] != card["splits"]["test"]["models"]["generate"]
    s = json.loads((out / "summary.json").read_text())
    assert s["leakage_passed"] and s["same_generator"] is False


@pytest.mark.parametrize("extra,msg", [
    (["--split", "train,test"], "needs --test-docs"),
    (["--split", "train,dev", "--test-docs", "x"], "--split must be 'train,test'"),
    (["--styles", "find,poem"], "unknown DoRA style 'poem'"),
])
def test_cli_bad_input(corpus, tmp_path, capsys, extra, msg):
    rc = dora_cli(["--db", str(corpus["db"]), "--out", str(tmp_path / "r"), "--per-style", "1", "--llm", "fake", *extra])
    assert rc == 2 and msg in capsys.readouterr().err


def test_cli_unknown_test_doc_names_file_and_line(corpus, tmp_path, capsys):
    (tmp_path / "t.txt").write_text("git-gc.txt\nno-such-doc.txt\n")
    rc = dora_cli(["--db", str(corpus["db"]), "--out", str(tmp_path / "r"), "--per-style", "1", "--llm", "fake",
                   "--split", "train,test", "--test-docs", str(tmp_path / "t.txt")])
    err = capsys.readouterr().err
    assert rc == 2 and "t.txt:2: document id 'no-such-doc.txt'" in err
    rc = dora_cli(["--db", str(tmp_path / "nope"), "--out", str(tmp_path / "r"), "--per-style", "1", "--llm", "fake"])
    assert rc == 2 and "no LanceDB database" in capsys.readouterr().err

# ---------------------------------------------------------------------------------------------- issue 11 (DoRA) and 13

REL_EV = [("c-1", "Git 2.30 was released in December 2020. The gc.pruneExpire configuration variable sets how long "
                  "unreachable objects are kept before git gc prunes them.")]
REL_Q = "Which configuration variable sets how long unreachable objects are kept?"


def test_verbatim_answer_is_checked_against_its_question():
    "A span copied from the evidence proves only that the text exists: 'December 2020' does not name a variable."
    wrong = gate("find", REL_Q, "December 2020", ["c-1"], REL_EV)
    assert not wrong.passed and wrong.failed_check == "answers_question", wrong      # before: passed with Q = 1.0
    assert wrong.answer_verdict["verdict"] == "does_not_answer"
    assert gate("find", REL_Q, "gc.pruneExpire", ["c-1"], REL_EV).passed


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    "Two small documents in a real LanceDB table (hash embedder)."
    from ragbench.index import ChunkIndex
    c = lambda d, i, t: Chunk(id=f"{d}-{i}", doc_id=d, text=t, meta={"title": d, "position": i})
    chunks = [c("gc", 0, REL_EV[0][1]), c("gc", 1, "With the aggressive option git gc optimizes much harder and takes far more time."),
              c("tag", 0, "Annotated tags store the tagger name, a date and a message. Lightweight tags store none of these.")]
    return ChunkIndex.build(tmp_path_factory.mktemp("tiny") / "db", chunks, embedder="hash", progress=False)


def test_run_asks_the_judge_whether_a_verbatim_answer_answers(tiny_index, tmp_path):
    "Each find candidate that passes the hard checks costs one answer-check call, and the judge's verdict decides."
    from ragbench.testing import FakeLLM
    def script(req):
        if req.stage == "dora_generate":
            if 'id="gc-0"' in req.prompt: return {"question": REL_Q, "answer": "December 2020", "cited_chunk_ids": ["gc-0"]}
            return {"question": "What does the aggressive option make git gc do?", "answer": "optimizes much harder", "cited_chunk_ids": ["gc-1"]}
        if req.stage == "dora_answer_check":
            return {"reason": "a release date" if "Proposed answer: December" in req.prompt else "it is what is asked",
                    "verdict": "does_not_answer" if "Proposed answer: December" in req.prompt else "answers"}
        return {"completeness": 4, "complementarity": 4, "coherence": 4, "task_fit": 4}
    llm = FakeLLM(script)
    r = run_dora(tiny_index, llm, cfg=load_config(per_style=1, styles=["find"], overgen=2.0, max_rounds=1), out=tmp_path / "r",
                 doc_ids=["gc"])
    stages = [q.stage for q in llm.requests]
    assert stages.count("dora_answer_check") == stages.count("dora_generate") == 2            # before: no judge call at all
    assert [it.answer for it in r.items] == ["optimizes much harder"]                           # before: both accepted, quality 1.0
    assert r.summary["gate_failures"] == {"answers_question": 1}
    wrong = next(c for c in r.candidates if c.answer == "December 2020")
    assert wrong.status == "rejected" and wrong.attempts[0].judge["answer_check"]["reason"] == "a release date"


def test_llm_prefilter_asks_relevance_and_complementarity_to_the_seed():
    "The paper's prefilter keeps candidates relevant to the seed; it never asks whether a candidate entails the seed."
    from ragbench.dora.evidence import LLMEntailment
    from ragbench.testing import FakeLLM
    llm = FakeLLM(lambda r: {"relevance": "same_subject" if "prunes" in r.prompt.split("Candidate passage:")[1] else "unrelated",
                             "adds_information": True})
    assert LLMEntailment(llm).relevance(EV[0][1], [EV[1][1], REL_EV[0][1], "Tags name commits."]) == [0.0, 1.0, 0.0]
    p = llm.requests[0].prompt
    assert llm.requests[0].stage == "dora_prefilter" and "Claim:" not in p and "entail" not in p.lower()   # before: dora_entail, seed as claim
    assert "Seed passage:" in p and "Candidate passage:" in p and "adds_information" in p


def test_cited_chunk_must_support_part_of_the_answer():
    "Two cited ids are not two sources: every sentence comes from c-1, so c-2 does not count."
    ans = "Unreachable objects older than 2 weeks are pruned by git gc. The gc.pruneExpire setting changes this period."
    fails = run_checks(get_style("explain").checks, "Why does git gc delete some objects?", ans, ["c-1", "c-2"], EV)
    assert set(fails) == {"citations"} and "c-2: none" in fails["citations"]                 # before: {} (two ids cited)
    both = ans + ' With "--aggressive" it optimizes "more thoroughly".'
    assert run_checks(get_style("explain").checks, "Why does git gc delete some objects?", both, ["c-1", "c-2"], EV) == {}


def test_same_model_judge_is_said_in_summary_and_card(corpus, server, tmp_path):
    "Judge = generator (no --judge-llm): the summary and the dataset card say so; another judge model clears it."
    base = ["--db", str(corpus["db"]), "--per-style", "1", "--styles", "find", "--llm", spec(server), "--no-progress", "--no-embed"]
    assert dora_cli([*base, "--out", str(tmp_path / "same")]) == 0
    for f in ("summary.json", "dataset_card.json"):
        ws = json.loads((tmp_path / "same" / f).read_text())["warnings"]
        assert len(ws) == 1 and "judge is the generator's own model" in ws[0] and "--judge-llm" in ws[0], (f, ws)
    # pin changed by issue 19: the check compares model families, and "fake-judge" is of the generator's family "fake";
    # a judge of another family clears it
    assert dora_cli([*base, "--out", str(tmp_path / "other"), "--judge-llm", f"openai:{server.url}/v1@other-judge"]) == 0
    assert json.loads((tmp_path / "other" / "summary.json").read_text())["warnings"] == []
    assert json.loads((tmp_path / "other" / "dataset_card.json").read_text())["warnings"] == []


def test_split_by_test_fraction_seeded_and_caveats(corpus, server, tmp_path, capsys):
    "--split train,test --test-fraction 0.25: a seeded draw of 2 of the 8 documents; one generator for both splits is a caveat."
    from ragbench.dora.splits import pick_test_docs
    argv = ["--db", str(corpus["db"]), "--per-style", "1", "--styles", "find", "--llm", spec(server), "--no-progress", "--no-embed",
            "--split", "train,test", "--test-fraction", "0.25", "--seed", "3", "--leak-cosine", "0.999"]
    assert dora_cli([*argv, "--out", str(tmp_path / "a")]) == 0                               # before: unknown flag, exit 2
    items = Dataset.read(tmp_path / "a" / "dataset.jsonl")
    test_docs = {it.meta["doc_id"] for it in items if it.split == "test"}
    want = set(pick_test_docs(SLICE, 0.25, seed=3))
    assert len(want) == 2 and test_docs <= want and not {it.meta["doc_id"] for it in items if it.split == "train"} & want
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert any("same generator" in w and "--test-llm" in w for w in s["warnings"]), s["warnings"]
    card = json.loads((tmp_path / "a" / "sft" / "dataset_card.json").read_text())
    assert card["warnings"] == s["warnings"] and "## Caveats" in (tmp_path / "a" / "sft" / "hf" / "README.md").read_text()
    assert "same generator" in capsys.readouterr().err
    assert pick_test_docs(SLICE, 0.25, seed=3) == pick_test_docs(list(reversed(SLICE)), 0.25, seed=3)


@pytest.mark.parametrize("extra,msg", [
    (["--split", "train,test", "--test-fraction", "0.2", "--test-docs", "x"], "not both"),
    (["--test-fraction", "0.2"], "--test-fraction needs --split train,test"),
    (["--split", "train,test", "--test-fraction", "1.0"], "--test-fraction must be between 0 and 1"),
])
def test_cli_test_fraction_bad_input(corpus, tmp_path, capsys, extra, msg):
    rc = dora_cli(["--db", str(corpus["db"]), "--out", str(tmp_path / "r"), "--per-style", "1", "--llm", "fake", *extra])
    assert rc == 2 and msg in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_stand_in_writes_the_same_items_for_a_reworded_generation_prompt(corpus):
    "The stand-in reads the style and chunks a generation prompt was rendered with, not its wording (a user override)."
    from ragbench.dora.styles import DoraQA, render_generation
    from ragbench.llm.template import template_reply
    from ragbench.prompts import override_prompt, reset_prompts
    chunks, schema = corpus["chunks"][:2], DoraQA.model_json_schema()
    def items(): return {s: json.loads(template_reply(render_generation(s, chunks)[1], schema=schema)) for s in ALL}
    before = items()
    for s in ALL:
        override_prompt(get_style(s).prompt_name, template="Passages:\n{chunks}\n\nWrite one question of the kind "
                        "'{style}', citing at least {min_cite} of the passages.")
    try: after = items()
    finally:
        for s in ALL: reset_prompts(get_style(s).prompt_name)
    assert after == before
    assert before["find"]["question"].startswith("Which words come just before") and before["find"]["cited_chunk_ids"]
