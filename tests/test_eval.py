"""Integration tests of the evaluation harness (ragbench.eval.* and ragbench.benchmarks).

- metric values against reference implementations on the same inputs: ranx (retrieval), rouge-score and an
  independent LCS (ROUGE-L), bert-score called directly (BERTScore), the official SQuAD v1.1 formulas (EM/F1);
- bad input: missing gold ids, unknown answer ids, empty dataset, missing table;
- end to end on the shared HotpotQA and MuSiQue samples (15 questions each) with two setups, checking
  Recall@k against a brute-force numpy search with the same embedder model;
- judges through the fake OpenAI server (also with every reply unparseable), resume and the judge cache, the CLIs.

Run: pytest tests/test_eval.py -q   (about a minute on 2 cores; the MiniLM model is loaded once)
"""
import json, os, random, re, string
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Dataset, QAItem, Context, Chunk, RunDir
from ragbench.eval.metrics import (precision_at_k, _recall_at_k, _hit_at_k, mrr, _ndcg_at_k, retrieval_metrics,
                                   exact_match, token_f1, rouge_l_recall, bertscore_recall, _default_bertscore_model,
                                   answer_metrics, yes_no)
from ragbench.stats import mean_ci, proportion_ci, _tango_ci
from ragbench.eval import Setup, SetupError, load_setups
from ragbench.eval import evaluate, summarize, compare, export_ragas, EvalError
from ragbench.eval.scores import metric_names
from ragbench.benchmarks import load_static, index_static, missing_gold
from ragbench.cli import main

evaluate_cli, compare_cli, export_ragas_cli, static_cli = (lambda argv, _n=n: main([_n, *argv])   # `ragbench NAME ARGV` in-process
                                                           for n in ("evaluate", "compare", "export-ragas", "static"))

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
HOTPOT = SHARED / "hotpotqa" / "hotpotqa_train100.json"
MUSIQUE = SHARED / "musique" / "musique_train100.json"
N_Q = 15


# ---------------------------------------------------------------------------------------------------------
# Retrieval metrics vs ranx

def _random_runs(n_queries=300, n_docs=40, seed=0):
    rng = random.Random(seed)
    qrels, runs = {}, {}
    for q in range(n_queries):
        docs = [f"d{i}" for i in range(n_docs)]
        gold = rng.sample(docs, rng.randint(1, 6))
        ranked = rng.sample(docs, rng.randint(0, 15))
        if rng.random() < 0.3 and gold:  # make hits likelier
            ranked = ([rng.choice(gold)] + [d for d in ranked if d not in gold])[: max(1, len(ranked))]
        qrels[f"q{q:04d}"], runs[f"q{q:04d}"] = gold, ranked
    return qrels, runs


def test_retrieval_metrics_match_ranx():
    from ranx import Qrels, Run, evaluate as ranx_evaluate
    qrels, runs = _random_runs()
    keep = sorted(q for q in qrels if runs[q])  # ranx needs at least one retrieved doc per query; arrays follow sorted ids
    rq = Qrels({q: {d: 1 for d in qrels[q]} for q in keep})
    rr = Run({q: {d: float(len(runs[q]) - i) for i, d in enumerate(runs[q])} for q in keep})
    ours = {
        "precision@{k}": precision_at_k, "recall@{k}": _recall_at_k, "hit_rate@{k}": _hit_at_k,
        "ndcg@{k}": _ndcg_at_k, "mrr@{k}": lambda r, g, k: mrr(r, g, k),
    }
    for k in (1, 3, 5, 10):
        names = [n.format(k=k) for n in ours]
        ref = ranx_evaluate(rq, rr, names, return_mean=False)
        for name, f in zip(names, ours.values()):
            mine = np.array([f(runs[q], qrels[q], k) for q in keep])
            np.testing.assert_allclose(mine, ref[name], rtol=0, atol=1e-9, err_msg=name)
    ref = ranx_evaluate(rq, rr, "mrr", return_mean=False)
    np.testing.assert_allclose([mrr(runs[q], qrels[q]) for q in keep], ref, rtol=0, atol=1e-9)
    # a query with no retrieved chunk scores 0 (not None); a query without gold ids is not applicable
    empty = [q for q in qrels if not runs[q]]
    assert empty and all(_recall_at_k([], qrels[q], 5) == 0.0 for q in empty)
    assert all(v is None for v in retrieval_metrics(["d1"], [], top_k=5).values())


# ---------------------------------------------------------------------------------------------------------
# Answer metrics vs references

def _squad_normalize(s):  # the official SQuAD v1.1 evaluation script's normalize_answer
    def remove_articles(text): return re.sub(r"\b(a|an|the)\b", " ", text)
    def white_space_fix(text): return " ".join(text.split())
    def remove_punc(text): return "".join(ch for ch in text if ch not in set(string.punctuation))
    return white_space_fix(remove_articles(remove_punc(s.lower())))


def _squad_f1(prediction, ground_truth):  # the official SQuAD v1.1 f1_score
    p, g = _squad_normalize(prediction).split(), _squad_normalize(ground_truth).split()
    common = Counter(p) & Counter(g); same = sum(common.values())
    if same == 0: return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


PAIRS = [("Arthur's Magazine", "Arthur's Magazine"), ("the Arthur's magazine.", "Arthur's Magazine"),
         ("It was Arthur's Magazine, in 1844", "Arthur's Magazine"), ("G. Stanley Hall", "Stanley Hall"),
         ("The Seine river flows", "the seine"), ("1989", "1844"), ("Paris, France", "France"),
         ("An American director and producer", "American"), ("no", "No"), ("a b c d e f", "f e d c b a")]


@pytest.mark.parametrize("pred,gold", PAIRS)
def test_em_f1_match_official_squad(pred, gold):
    assert exact_match(pred, gold) == float(_squad_normalize(pred) == _squad_normalize(gold))
    assert abs(token_f1(pred, gold) - _squad_f1(pred, gold)) < 1e-12


def _lcs(a, b):
    t = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            t[i + 1][j + 1] = t[i][j] + 1 if x == y else max(t[i][j + 1], t[i + 1][j])
    return t[-1][-1]


def test_rouge_l_recall_matches_rouge_score_and_lcs():
    from rouge_score import rouge_scorer
    ref = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    tok = lambda s: re.sub(r"[^a-z0-9]+", " ", s.lower()).split()  # rouge-score's default tokenizer
    rng = random.Random(3); words = "the cat sat on a mat with 1844 magazines and Paris France river".split()
    pairs = PAIRS + [(" ".join(rng.choices(words, k=rng.randint(1, 12))), " ".join(rng.choices(words, k=rng.randint(1, 8))))
                     for _ in range(50)]
    for pred, gold in pairs:
        mine = rouge_l_recall(pred, gold)
        assert abs(mine - ref.score(gold, pred)["rougeL"].recall) < 1e-9
        g = tok(gold)
        assert abs(mine - (_lcs(tok(pred), g) / len(g) if g else 0.0)) < 1e-9


def test_bertscore_recall_matches_bert_score():
    from bert_score import score
    preds = ["Arthur's Magazine was first.", "Paris", "No, because it opened later.", "the Seine"]
    golds = ["Arthur's Magazine", "Paris is the capital", "no", "The Seine river"]
    mine = bertscore_recall(preds, golds)
    _, r, _ = score(preds, golds, model_type=_default_bertscore_model(), num_layers=6, batch_size=64)
    np.testing.assert_allclose(mine, r.numpy().astype(float), rtol=0, atol=1e-9)
    assert bertscore_recall(["", "x"], ["a", ""]) == [0.0, 0.0]


def test_yes_no_rule():
    assert yes_no("No, because it was founded later.") == "no"
    assert yes_no("  YES!") == "yes" and yes_no("Nobody") is None and yes_no("I think no") is None
    m = answer_metrics("No, because the magazine started in 1844.", "no", binary=True)
    assert (m["exact_match"], m["token_f1"], m["token_recall"], m["yes_no_correct"]) == (1.0, 1.0, 1.0, 1.0)
    assert answer_metrics("Yes", "no", binary=True)["token_f1"] == 0.0
    assert answer_metrics("No, because", "no", binary=False)["yes_no_correct"] is None


def test_mean_interval_skips_missing_values():
    rnd = random.Random(5)
    vals = [rnd.random() for _ in range(100)]
    ci = mean_ci(vals + [None] * 7)
    assert mean_ci([0.62] * 100)["lo"] is None           # identical values cannot bound a mean: no zero-width interval
    assert (ci["n"], ci["n_na"]) == (100, 7) and abs(ci["mean"] - np.mean(vals)) < 1e-12
    assert ci["lo"] < ci["mean"] < ci["hi"] and ci["hi"] - ci["lo"] < 0.25


def test_stats_agree_with_evalstats_where_both_compute_the_same_quantity():
    "evalstats (dev extra) states the same small-n safeguards: Tango's continuity-corrected paired interval (SCC-M,"
    "c = 1/4) and Wilson's interval agree to 1e-9; evalstats' logit-t for bounded means is another method (see the note)."
    from evalstats.core.resampling import tango_scc_paired_ci, wilson_ci
    for b, c, n in ((0, 4, 12), (3, 1, 12), (5, 0, 30), (0, 0, 12), (7, 2, 40), (12, 0, 12)):
        a = np.r_[np.ones(b), np.zeros(c), np.zeros(n - b - c)]
        z = np.r_[np.zeros(b), np.ones(c), np.zeros(n - b - c)]
        assert np.allclose(_tango_ci(b, c, n), tango_scc_paired_ci(a, z, 0.05, c=0.25), atol=1e-7), (b, c, n)
    for k, n in ((0, 8), (3, 8), (59, 60), (30, 30)):
        ours = proportion_ci(k, n, method="wilson")
        assert np.allclose((ours["lo"], ours["hi"]), wilson_ci(k, n, 0.05), atol=1e-9), (k, n)


# ---------------------------------------------------------------------------------------------------------
# End to end on the shared HotpotQA and MuSiQue samples

@pytest.fixture(scope="module")
def static_env(tmp_path_factory):
    "15 HotpotQA and 15 MuSiQue questions, each with a paragraph index built with all-MiniLM-L6-v2."
    import torch
    from ragbench.embed import _Embedder
    torch.set_num_threads(1)  # on a busy 2-core machine two torch threads contend: 1 thread is ~7x faster per query
    root = tmp_path_factory.mktemp("static")
    emb = _Embedder()
    env = {"root": root, "emb": emb}
    for name, path, fmt in (("hotpot", HOTPOT, "hotpotqa"), ("musique", MUSIQUE, "musique")):
        ds = load_static(path, fmt, limit=N_Q)
        only = {c.chunk_id for it in ds for c in it.contexts}
        idx = index_static(path, fmt, root / f"{name}_db", embedder=emb, only_ids=only)
        assert missing_gold(ds, idx) == [] and len(idx) == len(only)
        ds.write(root / f"{name}.jsonl")
        env[name] = (ds, idx, root / f"{name}_db")
    return env


def _judge_and_answer_llm():
    from ragbench.testing import FakeLLM
    return FakeLLM()  # default responder: schema-valid replies built from the prompt's chunks


def _brute_force_recall(ds, idx, emb, ks):
    "{k: {item id: (recall@k, whether the k-th and (k+1)-th scores tie)}} by exhaustive cosine search in numpy."
    chunks = list(idx.iter_chunks())
    m = emb.encode([c.text for c in chunks]); ids = [c.id for c in chunks]
    sims = emb.encode([it.question for it in ds]) @ m.T
    out = {k: {} for k in ks}
    for it, row in zip(ds, sims):
        order = np.argsort(-row, kind="stable"); gold = set(it.gold_chunk_ids)
        for k in ks:
            tie = k < len(ids) and abs(row[order[k - 1]] - row[order[k]]) < 1e-5
            out[k][it.id] = (len({ids[i] for i in order[:k]} & gold) / len(gold), tie)
    return out


@pytest.mark.parametrize("name", ["hotpot", "musique"])
def test_end_to_end_recall_equals_brute_force(static_env, tmp_path, name):
    ds, idx, db = static_env[name]
    setups = [Setup(name="top3", top_k=3, llm="fake"), Setup(name="top5", top_k=5, llm="fake")]
    llm = _judge_and_answer_llm()
    summ = evaluate(ds, setups, tmp_path / "ev", db=db, llm_factory=lambda spec: llm, judge_llm=llm,
                    bertscore=False)
    rows = RunDir(tmp_path / "ev").read("scores.jsonl")
    assert len(rows) == len(ds) * 2
    bfs = _brute_force_recall(ds, idx, static_env["emb"], [s.top_k for s in setups])
    for s in setups:
        bf = bfs[s.top_k]
        got = {r["item_id"]: r["metrics"]["recall@k"] for r in rows if r["setup"] == s.name}
        for iid, (ref, tie) in bf.items():
            if not tie: assert abs(got[iid] - ref) < 1e-9, (s.name, iid, got[iid], ref)
        mean = summ["setups"][s.name]["recall@k"]["mean"]
        assert abs(mean - np.mean(list(got.values()))) < 1e-12
    # every row carries every metric; breakdowns by the benchmark's kinds exist
    assert all(set(r["metrics"]) == set(metric_names()) for r in rows)
    kinds = set(summ["breakdowns"]["kind"])
    assert kinds <= ({"bridge", "comparison"} if name == "hotpot" else {"2hop", "3hop", "4hop"}) and kinds
    assert summ["setups"]["top5"]["recall@k"]["mean"] >= summ["setups"]["top3"]["recall@k"]["mean"]
    assert summ["precision_ceiling"]["top3"]["precision@k"] > 0.6  # >= 2 gold paragraphs per question


def test_modes_and_judges_through_fake_server(static_env, tmp_path):
    from ragbench.testing import FakeLLMServer
    from ragbench.llm import make_llm
    ds, idx, db = static_env["hotpot"]
    ds = Dataset(ds.items[:6])
    with FakeLLMServer() as srv:
        judge = make_llm(f"openai:{srv.url}/v1@fake", cache_dir=tmp_path / "cache")
        summ = evaluate(ds, [Setup(name="bm25", retrieval="bm25", top_k=3, llm="fake")], tmp_path / "ev", db=db,
                        modes=("retrieved", "oracle", "unanswerable"), llm_factory=lambda s: make_llm(s),
                        judge_llm=judge, bertscore=False)
        n_requests = srv.stats()["requests"]
    st = summ["setups"]["bm25"]
    for key in ("correct", "faithful", "keypoint_complete", "oracle/correct", "unanswerable/abstained"):
        assert st[key]["n"] == len(ds), key
    assert st["unanswerable/abstained"]["n"] == 6 and "unanswerable/correct" not in st
    shares = [st[f"keypoint_{v}"]["mean"] for v in ("complete", "hallucinated", "irrelevant")]
    assert abs(sum(shares) - 1) < 1e-9
    assert summ["judge_failures"]["bm25"] == {}
    rows = RunDir(tmp_path / "ev").read("scores.jsonl")
    unans = [r for r in rows if r["mode"] == "unanswerable"]
    gold = {it.id: set(it.gold_chunk_ids) for it in ds}
    assert all(not set(r["context_chunk_ids"]) & gold[r["item_id"]] for r in unans)
    assert n_requests > 0


def test_unparseable_judge_output_is_counted_not_nan(static_env, tmp_path):
    from ragbench.testing import FakeLLMServer
    from ragbench.llm import make_llm
    ds, idx, db = static_env["musique"]
    ds = Dataset(ds.items[:4])
    with FakeLLMServer(error_rate=1.0, fault_kinds=("badjson",)) as srv:
        judge = make_llm(f"openai:{srv.url}/v1@fake", max_repairs=1)
        summ = evaluate(ds, [Setup(name="dense", top_k=3, llm="fake")], tmp_path / "ev", db=db,
                        llm_factory=lambda s: make_llm(s), judge_llm=judge, bertscore=False)
    st = summ["setups"]["dense"]
    assert summ["judge_failures"]["dense"] == {"correctness": 4, "faithfulness": 4, "keypoints": 4}
    assert st["correct"] == {"mean": None, "lo": None, "hi": None, "n": 0, "n_na": 4}
    assert st["exact_match"]["n"] == 4  # the other metrics still count
    text = (tmp_path / "ev" / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text


def test_resume_and_judge_cache(static_env, tmp_path):
    from ragbench.llm import make_llm
    ds, idx, db = static_env["hotpot"]
    ds = Dataset(ds.items[:8])
    setups = [Setup(name="top3", top_k=3, llm="fake"), Setup(name="hybrid", retrieval="hybrid", top_k=3, llm="fake")]
    out = tmp_path / "ev"
    made = []
    def factory(spec):
        made.append(make_llm(spec, cache_dir=out / "cache")); return made[-1]
    kw = dict(db=db, llm_factory=factory, judge_llm="fake", bertscore=False)
    full = evaluate(ds, setups, out, **kw)
    rows = (out / "scores.jsonl").read_text().splitlines(keepends=True)
    assert len(rows) == 16
    # kill simulation: keep 5 rows and half of the 6th
    (out / "scores.jsonl").write_text("".join(rows[:5]) + rows[5][: len(rows[5]) // 2])
    made.clear()
    again = evaluate(ds, setups, out, **kw)
    assert again["new_rows"] == 11 and again["n_rows"] == 16
    assert len(RunDir(out).read("scores.jsonl")) == 16
    # every call of the resumed run came from the cache; the run's meter (journaled in calls.jsonl) keeps the first session's calls
    assert again["usage"]["session"]["calls"] == 0 and again["usage"]["session"]["cached"] > 0
    assert again["usage"]["run"]["calls"] == full["usage"]["run"]["calls"] > 0
    for s in ("top3", "hybrid"):
        for m in ("recall@k", "correct", "keypoint_complete"):
            assert again["setups"][s][m] == full["setups"][s][m]


# ---------------------------------------------------------------------------------------------------------
# Bad input

def test_bad_inputs(static_env, tmp_path, capsys):
    ds, idx, db = static_env["hotpot"]
    small = Dataset(ds.items[:3])
    # empty dataset: clear error, nothing written
    with pytest.raises(EvalError, match="empty"):
        evaluate(Dataset([]), [Setup(name="a", llm="fake")], tmp_path / "e1", db=db)
    assert not (tmp_path / "e1").exists()
    # a setup naming a missing table / db: clear error before anything is written
    with pytest.raises(SetupError, match="table 'nope' not found"):
        evaluate(small, [Setup(name="a", llm="fake"), Setup(name="b", table="nope", llm="fake")], tmp_path / "e2", db=db)
    with pytest.raises(SetupError, match="database folder not found"):
        evaluate(small, [Setup(name="a", llm="fake", db=str(tmp_path / "nodb"))], tmp_path / "e2")
    assert not (tmp_path / "e2").exists()
    # missing gold ids: retrieval metrics not applicable (None), never 0
    nogold = small.items[0].model_copy(update={"id": "nogold", "gold_chunk_ids": [], "contexts": []})
    llm = _judge_and_answer_llm()
    summ = evaluate(Dataset([nogold] + small.items[1:]), [Setup(name="a", top_k=3, llm="fake")], tmp_path / "e3", db=db,
                    llm_factory=lambda s: llm, bertscore=False)
    row = [r for r in RunDir(tmp_path / "e3").read("scores.jsonl") if r["item_id"] == "nogold"][0]
    assert row["retrieval_hit"] is None and row["metrics"]["recall@k"] is None and row["metrics"]["mrr"] is None
    assert row["metrics"]["exact_match"] is not None
    assert (summ["setups"]["a"]["recall@k"]["n"], summ["setups"]["a"]["recall@k"]["n_na"]) == (2, 1)
    # answers for unknown item ids: listed and skipped
    ans = tmp_path / "mine.jsonl"
    ans.write_text("".join(json.dumps({"item_id": i, "answer": "x", "retrieved_chunk_ids": g}) + "\n"
                           for i, g in [(small[0].id, small[0].gold_chunk_ids), ("ghost-1", []), ("ghost-2", [])]))
    small.write(tmp_path / "small.jsonl")
    rc = evaluate_cli(["--dataset", str(tmp_path / "small.jsonl"), "--db", str(db), "--answers", f"mine={ans}",
                       "--out", str(tmp_path / "e4"), "--no-bertscore", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0 and "2 answer(s) for unknown item ids skipped: ghost-1, ghost-2" in err
    summ = json.loads((tmp_path / "e4" / "summary.json").read_text())
    assert summ["unknown_answer_ids"] == {"mine": ["ghost-1", "ghost-2"]} and summ["missing_answers"] == {"mine": 2}
    assert summ["setups"]["mine"]["recall@k"]["mean"] == 1.0 and summ["setups"]["mine"]["recall@k"]["n"] == 1
    # a bad setups file names the file and the field
    bad = tmp_path / "bad.yaml"; bad.write_text("baseline: {top_k: 5, retrieval: sparse}\n")
    rc = evaluate_cli(["--dataset", str(tmp_path / "small.jsonl"), "--db", str(db), "--setups", str(bad), "--out", str(tmp_path / "e5")])
    err = capsys.readouterr().err
    assert rc == 2 and str(bad) in err and "field 'retrieval'" in err and not (tmp_path / "e5").exists()


# ---------------------------------------------------------------------------------------------------------
# The CLIs together: static -> evaluate (two setups, two datasets) -> compare -> export-ragas

def test_cli_static_evaluate_compare_export(tmp_path, capsys):
    setups = tmp_path / "setups.yaml"
    setups.write_text("defaults: {llm: fake, embedder: 'hash:64'}\nbaseline: {name: dense5, top_k: 5}\n"
                      "variants:\n  - {name: dense2, top_k: 2}\n  - {name: bm25-5, retrieval: bm25}\njudge_llm: fake\n")
    for name, path, fmt in (("hot", HOTPOT, "hotpotqa"), ("mus", MUSIQUE, "musique")):
        assert static_cli(["--format", fmt, str(path), "--db", str(tmp_path / f"{name}_db"), "--out", str(tmp_path / f"{name}.jsonl"),
                           "--limit", "10", "--embedder", "hash:64", "--quiet"]) == 0
        assert evaluate_cli(["--dataset", str(tmp_path / f"{name}.jsonl"), "--db", str(tmp_path / f"{name}_db"),
                             "--setups", str(setups), "--out", str(tmp_path / f"ev_{name}"), "--no-bertscore",
                             "--quiet", "--modes", "retrieved,oracle"]) == 0
    out = capsys.readouterr().out
    assert "dense5" in out and "recall@k" in out
    assert compare_cli([str(tmp_path / "ev_hot"), str(tmp_path / "ev_mus"), "--metric", "recall@5", "--n-boot", "100",
                        "--json", str(tmp_path / "cmp.json")]) == 0
    c = json.loads((tmp_path / "cmp.json").read_text())
    # recall@5 is not applicable to the top-2 setup (issue 11: no metric at k > top_k), so it is left out and named
    assert c["setups"] == ["dense5", "bm25-5"] and c["dropped"] == ["dense2"] and -1 <= c["kendall_tau"] <= 1
    assert "Kendall tau" in capsys.readouterr().out
    assert export_ragas_cli(["--dataset", str(tmp_path / "hot.jsonl"), "--db", str(tmp_path / "hot_db"),
                             "--scores", str(tmp_path / "ev_hot"), "--setup", "dense2", "--out", str(tmp_path / "r.parquet")]) == 0
    import pandas as pd
    df = pd.read_parquet(tmp_path / "r.parquet")
    assert list(df.columns) == ["user_input", "reference", "reference_contexts", "retrieved_contexts", "response"]
    assert len(df) == 10 and all(len(x) == 2 for x in df["retrieved_contexts"]) and all(len(x) >= 2 for x in df["reference_contexts"])


# ---------------------------------------------------------------------------------------------------------
# Issue 11 (evaluation side), 12 (#4 budget, #7 failed calls, #8 inputs, lock) and 13 (data shapes).
# Each test below failed on the code before these changes (noted per test).

TEXTS = ["Arthur's Magazine was an American literary periodical started in 1844 in Philadelphia.",
         "First for Women is a woman's magazine published by Bauer Media and started in 1989.",
         "Paris is the capital and largest city of France.",
         "The Seine is a river that flows through Paris to the English Channel.",
         "Lyon is the third-largest city of France, at the confluence of the Rhone and the Saone.",
         "Marseille is a port city on the Mediterranean coast of France.",
         "git stash saves local changes away and reverts the working directory to match HEAD.",
         "git bisect uses binary search to find the commit that introduced a bug."]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    "A hash-embedded index of 8 chunks and a dataset of TRIAD items, a TRIAD variant, a corpus-unanswerable and two DoRA items."
    from ragbench.index import ChunkIndex
    root = tmp_path_factory.mktemp("tiny")
    ChunkIndex.build(root / "db", [Chunk(id=f"c{i}", doc_id=f"d{i}", text=t, meta={"title": f"T{i}"}) for i, t in enumerate(TEXTS)],
                     "hash:64", progress=False)
    gold = lambda *ids: [Context(chunk_id=i, relevant=True, source="gold") for i in ids]
    bad = lambda *ids: [Context(chunk_id=i, relevant=False, source="neighbour") for i in ids]
    q1 = QAItem(id="q1", method="triad", kind="comparison", question="Which magazine was started first, Arthur's Magazine or First for Women?",
                answer="Arthur's Magazine", gold_chunk_ids=["c0", "c1"], contexts=gold("c0", "c1") + bad("c4", "c5"))
    variant = q1.model_copy(update={"id": "q1-u", "answerable": False, "answer": "The provided contexts do not contain enough information.",
                                    "gold_chunk_ids": [], "contexts": bad("c4", "c5") + [Context(chunk_id="c0", relevant=True, source="gold",
                                                                                                reason="partially relevant")],
                                    "meta": {"variant_of": "q1", "partial_chunk_id": "c0"}})
    variant = QAItem.model_validate(json.loads(variant.to_json()) | {"unanswerable_kind": None})   # written before the field: context
    items = [q1, variant,
             QAItem(id="q2", method="triad", kind="composition", question="Which river flows through the capital of France?",
                    answer="The Seine", gold_chunk_ids=["c2", "c3"], contexts=gold("c2", "c3") + bad("c5")),
             QAItem(id="qc", method="triad", kind="composition", question="Who was the first mayor of Paris?", answer="(none)",
                    answerable=False, unanswerable_kind="corpus"),
             QAItem(id="d1", method="dora", kind="generate", style="generate", question="Which git commands help with a broken build?",
                    answer="1. git stash 2. git bisect", gold_chunk_ids=["c6", "c7"]),
             QAItem(id="d2", method="dora", kind="find", style="find", question="What does git bisect use to find a commit?",
                    answer="binary search", gold_chunk_ids=["c7"])]
    Dataset(items).write(root / "ds.jsonl")
    return {"root": root, "db": root / "db", "ds": Dataset(items), "path": root / "ds.jsonl"}


def _rows(out):
    from ragbench.eval import read_scores
    return {(r["item_id"], r["mode"]): r for r in read_scores(out)}


def test_metrics_beyond_top_k_are_not_applicable(tiny, tmp_path):
    "Before: a top_k 2 setup reported recall@5 / recall@10 / hit@10 computed on its 2 chunks (equal to recall@2)."
    from ragbench.testing import FakeLLM
    llm = FakeLLM()
    summ = evaluate(tiny["ds"], [Setup(name="bm25-2", retrieval="bm25", top_k=2, llm="fake")], tmp_path / "ev", db=tiny["db"],
                    llm_factory=lambda s: llm, judges=(), bertscore=False)
    rows = [r for r in _rows(tmp_path / "ev").values() if r["metrics"]["recall@k"] is not None]
    assert len(rows) == 4                                                   # q1, q2, d1, d2
    for r in rows:
        assert all(r["metrics"][m] is None for m in ("recall@3", "recall@5", "recall@10", "hit@10", "precision@5", "ndcg@10",
                                                      "precision_ceiling@10")), r["item_id"]
        assert r["metrics"]["recall@1"] is not None and r["metrics"]["hit@k"] is not None
    st = summ["setups"]["bm25-2"]
    assert st["recall@10"]["n"] == 0 and st["recall@10"]["mean"] is None and st["recall@k"]["n"] == 4


def test_unanswerable_kinds(tiny, tmp_path):
    "Before: the variant was answered through retrieval (finding its gold chunks) and scored as 'should abstain'; "
    "the unanswerable mode dropped its partially relevant chunk; no kind was recorded."
    from ragbench.testing import FakeLLM
    llm = FakeLLM()
    summ = evaluate(tiny["ds"], [Setup(name="dense2", top_k=2, llm="fake")], tmp_path / "ev", db=tiny["db"], judges=("abstention",),
                    modes=("retrieved", "unanswerable", "oracle"), llm_factory=lambda s: llm, judge_llm=llm, bertscore=False)
    rows = _rows(tmp_path / "ev")
    r = rows[("q1-u", "retrieved")]
    assert r["skipped"].startswith("not applicable: context-unanswerable") and r["answer"] is None and r["metrics"]["abstained"] is None
    assert r["unanswerable_kind"] == "context"                              # an old variant without the field reads as context
    r = rows[("q1-u", "unanswerable")]
    assert r["context_chunk_ids"] == ["c4", "c5", "c0"] and r["metrics"]["abstained"] is not None   # its own list, partial chunk included
    assert rows[("q1-u", "oracle")]["skipped"].startswith("not applicable")
    r = rows[("qc", "retrieved")]                                           # corpus-unanswerable: scored through retrieval
    assert r["unanswerable_kind"] == "corpus" and len(r["retrieved_chunk_ids"]) == 2 and r["metrics"]["abstained"] is not None
    st = summ["setups"]["dense2"]
    assert st["abstained"]["n"] == 1 and st["unanswerable/abstained"]["n"] == 6   # retrieved: qc only; unanswerable mode: all six
    kinds = summ["breakdowns"]["unanswerable_kind"]
    assert kinds["context"]["dense2"]["unanswerable/abstained"]["n"] == 1 and kinds["corpus"]["dense2"]["abstained"]["n"] == 1
    assert any(k.startswith("retrieved: context-unanswerable") for k in summ["not_applicable"]["dense2"])


def _claims_judge(req):
    "A judge whose correctness and faithfulness verdicts list claims (2 of 3 faithful; 1 of 2 answer claims right, 1 reference claim missed)."
    if req.stage.startswith("eval_correctness"):
        return {"correct": True, "answer_claims": [{"claim": "a", "supported": True}, {"claim": "b", "supported": False}],
                "reference_claims": [{"claim": "a", "covered": True}, {"claim": "c", "covered": False}], "reason": "mostly"}
    if req.stage == "eval_faithfulness":
        return {"faithful": False, "claims": [{"claim": "a", "supported": True}, {"claim": "b", "supported": True},
                                               {"claim": "c", "supported": False}], "reason": "c is not in the context"}
    if req.stage == "eval_rubric":
        from ragbench.eval.judges import RUBRIC_DIMENSIONS
        return {**dict.fromkeys(RUBRIC_DIMENSIONS, 4), "groundedness": 2, "reason": "one list item is not in the evidence"}
    if req.stage == "eval_answer": return {"answer": "git stash and git bisect"}
    return None


def test_judges_fit_the_item(tiny, tmp_path):
    "Before: one factoid correctness prompt for every item ('listing several candidates is not correct'), no 1-5 rubric "
    "judge, and no continuous correctness / faithfulness scores."
    from ragbench.testing import FakeLLM
    from ragbench.llm.template import template_reply
    llm = FakeLLM(lambda r: _claims_judge(r) or template_reply(r.prompt, r.system, r.schema))
    ds = Dataset([it for it in tiny["ds"] if it.id in ("q1", "d1", "d2")])
    evaluate(ds, [Setup(name="dense2", top_k=2, llm="fake")], tmp_path / "ev", db=tiny["db"], llm_factory=lambda s: llm,
             judge_llm=llm, judges=("correctness", "faithfulness", "rubric"), bertscore=False)
    stages = Counter(r.stage for r in llm.requests)
    assert stages["eval_correctness_longform"] == 1 and stages["eval_correctness"] == 2 and stages["eval_rubric"] == 2
    longform = next(r for r in llm.requests if r.stage == "eval_correctness_longform")
    assert "Which git commands" in longform.prompt and "listing several candidates" not in longform.prompt
    rows = _rows(tmp_path / "ev")
    d1, q1 = rows[("d1", "retrieved")], rows[("q1", "retrieved")]
    assert d1["judge"]["correctness"]["rubric"] == "eval_correctness_longform" and q1["judge"]["correctness"]["rubric"] == "eval_correctness"
    assert (d1["metrics"]["rubric_groundedness"], d1["metrics"]["rubric_clarity"]) == (2.0, 4.0) and q1["metrics"]["rubric_clarity"] is None
    assert abs(q1["metrics"]["correct_score"] - 0.5) < 1e-12 and abs(q1["metrics"]["faithful_score"] - 2 / 3) < 1e-12
    assert (q1["metrics"]["correct"], q1["metrics"]["faithful"]) == (1.0, 0.0)    # the binary verdicts stay beside the scores


def test_dora_calibration_end_to_end(tmp_path):
    "Before: no judge wrote 1-5 rubric scores, so DoRA's calibration could not run. Judge scores + the review "
    "queue's scores -> the calibration table, in the report of a DoRA evaluation."
    from sklearn.metrics import cohen_kappa_score
    from ragbench.testing import FakeLLM
    from ragbench.eval import load_calibration
    from ragbench.eval.judges import RUBRIC_DIMENSIONS
    from ragbench.eval.calibration import _sample_for_review, _judge_sample
    from ragbench.widgets import ReviewQueue
    from ragbench.report import build_report
    from ragbench.testing.demo import demo_eval_dir
    run = RunDir(tmp_path / "dora")
    items = [QAItem(id=f"dq-{i:02d}", method="dora", kind=s, style=s, question=f"question {i}?", answer=f"answer {i}")
             for i, s in enumerate(["find", "explain", "generate"] * 4)]
    run.write("dataset.jsonl", "".join(it.to_json() + "\n" for it in items))
    sample = _sample_for_review(run.path, per_style=2)
    assert sorted(Counter(it.style for it in sample).values()) == [2, 2, 2]
    judged = {it.id: 2 + i % 3 for i, it in enumerate(sample)}           # the judge's groundedness: 2, 3, 4, ...
    judge = FakeLLM(lambda req: {**dict.fromkeys(RUBRIC_DIMENSIONS, 4),
                                 "groundedness": judged[next(i for i in judged if f"Question: question {int(i[3:])}?" in req.prompt)]})
    rows = _judge_sample(run.path, judge)
    assert len(rows) == 6 and all(len(r["scores"]) == 7 for r in rows)
    queue = ReviewQueue(run.path, "ann", sources=("calibration_sample.jsonl",), sync=False)
    human = {}
    for i, it in enumerate(sample):
        human[it.id] = 3 + i % 2
        queue.accept(item=it.id, scores={**dict.fromkeys(RUBRIC_DIMENSIONS, 4), "groundedness": human[it.id]})
    table = {r["dimension"]: r for r in load_calibration(run.path)}
    g = table["groundedness"]
    ids = [it.id for it in sample]
    assert g["n"] == 6
    assert abs(g["kappa_w"] - cohen_kappa_score([human[i] for i in ids], [judged[i] for i in ids], weights="quadratic",
                                                labels=[1, 2, 3, 4, 5])) < 1e-12
    assert abs(g["mad"] - np.mean([abs(human[i] - judged[i]) for i in ids])) < 1e-12
    assert table["clarity"]["within_1"] == 1.0
    text = build_report(demo_eval_dir(tmp_path / "eval", n_items=20, method="dora"), tmp_path / "r.html", generation_dir=run.path).read_text()
    assert "<h2>Judge calibration</h2>" in text and "<td>groundedness</td>" in text and "<figure id='rubric_by_style'>" in text


def _setups_file(tmp_path, db, llm=None):
    f = tmp_path / "setups.yaml"
    f.write_text(f"defaults: {{db: '{db}'" + (f", llm: '{llm}'" if llm else "") + "}\nbaseline: {name: dense2, top_k: 2}\n")
    return f


def test_failed_llm_calls_are_recorded_per_row(tiny, tmp_path, capsys):
    "Before: an LLM call that ran out of retries killed `evaluate` with a traceback (exit 1, no rows)."
    from ragbench.testing import FakeLLMServer
    with FakeLLMServer() as srv:
        bad = f"openai:{srv.url}/no-such-api/v1@fake"                      # every answer call gets HTTP 404: fails for good
        argv = ["--dataset", str(tiny["path"]), "--setups", str(_setups_file(tmp_path, tiny["db"], bad)), "--out", str(tmp_path / "ev"),
                "--judge-llm", "none", "--no-bertscore", "--quiet"]
        rc = evaluate_cli(argv)
    err = capsys.readouterr().err
    assert rc == 1 and "row(s) failed on LLM errors (dense2:" in err and "re-run the same command" in err
    rows = _rows(tmp_path / "ev")
    failed = [r for r in rows.values() if r["error"]]
    assert len(failed) == 5 and all("404" in r["error"] or "NotFound" in r["error"] for r in failed)   # all but the n/a variant
    assert rows[("q1", "retrieved")]["metrics"]["recall@k"] is not None       # what needs no LLM is still scored
    summ = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summ["errors"] == {"dense2": 5}


def test_second_evaluate_on_one_out_is_refused(tiny, tmp_path, capsys):
    "Before: two `evaluate` processes on one --out both ran (90 duplicate rows, doubled n)."
    from ragbench.core import RunLock
    out = tmp_path / "ev"
    argv = ["--dataset", str(tiny["path"]), "--setups", str(_setups_file(tmp_path, tiny["db"])), "--out", str(out),
            "--judge-llm", "none", "--no-bertscore", "--quiet"]
    with RunLock(out):
        assert evaluate_cli(argv) == 2
    err = capsys.readouterr().err
    assert "is in use by another ragbench process" in err and f'"pid": {os.getpid()}' in err
    assert not (out / "scores.jsonl").exists()
    assert evaluate_cli(argv) == 0 and len(RunDir(out).read("scores.jsonl")) == 6


def test_max_calls_holds_across_resumes(tiny, tmp_path, capsys):
    "Before: `evaluate` had no --max-calls."
    from ragbench.testing import FakeLLMServer
    with FakeLLMServer() as srv:
        spec = f"openai:{srv.url}/v1@fake"
        argv = ["--dataset", str(tiny["path"]), "--setups", str(_setups_file(tmp_path, tiny["db"], spec)), "--out", str(tmp_path / "ev"),
                "--judge-llm", spec, "--judges", "correctness", "--no-bertscore", "--quiet", "--batch-size", "1"]
        assert evaluate_cli(argv + ["--max-calls", "4"]) == 1
        assert srv.stats()["requests"] <= 4 and "stopped: budget spent" in capsys.readouterr().err
        first = srv.stats()["requests"]
        assert evaluate_cli(argv + ["--max-calls", "4"]) == 1                 # the same budget on resume: nothing more is sent
        assert srv.stats()["requests"] == first
        assert evaluate_cli(argv + ["--max-calls", "100"]) == 0
    summ = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summ["stop_reason"] == "done" and summ["n_rows"] == 6 and summ["usage"]["run"]["calls"] == srv.stats()["requests"]
    assert len([json.loads(l) for l in (tmp_path / "ev" / "calls.jsonl").read_text().splitlines() if '"send"' in l]) == summ["usage"]["run"]["calls"]


def test_answers_and_gold_inputs(tiny, tmp_path, capsys):
    "Before: an answers file whose ids were all unknown gave 0 rows and exit 0; items without gold ids silently left "
    "the retrieval scores."
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"item_id": f"zz-{i}", "answer": "x"}) + "\n" for i in range(3)))
    rc = evaluate_cli(["--dataset", str(tiny["path"]), "--answers", f"mine={other}", "--out", str(tmp_path / "e1"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "answers file" in err and "none of its 3 item ids is in the dataset (e.g. zz-0, zz-1, zz-2)" in err
    assert not (tmp_path / "e1").exists()
    ds = Dataset([it.model_copy(update={"gold_chunk_ids": []}) if it.id == "q2" else it for it in tiny["ds"]])
    ds.write(tmp_path / "ds.jsonl")
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(json.dumps({"item_id": it.id, "answer": it.answer, "retrieved_chunk_ids": it.gold_chunk_ids}) + "\n" for it in ds))
    assert evaluate_cli(["--dataset", str(tmp_path / "ds.jsonl"), "--answers", f"mine={mine}", "--out", str(tmp_path / "e2"),
                         "--no-bertscore", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"1 answerable item(s) have no gold chunk ids, so no retrieval scores: {tmp_path / 'ds.jsonl'}:3" in err
    summ = json.loads((tmp_path / "e2" / "summary.json").read_text())
    assert summ["items_without_gold"] == {"n": 1, "ids": ["q2"], "lines": [f"{tmp_path / 'ds.jsonl'}:3"]}


def test_retrieval_only_setup(tiny, tmp_path, capsys):
    "Before: a setup without an answering LLM was refused ('no answering LLM')."
    rc = evaluate_cli(["--dataset", str(tiny["path"]), "--setups", str(_setups_file(tmp_path, tiny["db"])), "--out", str(tmp_path / "ev"),
                       "--judge-llm", "none", "--no-bertscore", "--quiet", "--modes", "retrieved,oracle"])
    assert rc == 0 and "retrieval metrics only" in capsys.readouterr().err
    rows = _rows(tmp_path / "ev")
    assert rows[("q1", "retrieved")]["metrics"]["recall@k"] is not None and rows[("q1", "retrieved")]["answer"] is None
    assert rows[("q1", "oracle")]["skipped"].startswith("not applicable: retrieval-only")
    summ = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summ["setups"]["dense2"]["recall@k"]["n"] == 4 and summ["usage"]["run"]["calls"] == 0 and summ["models"]["answer"] == {"dense2": None}


def test_evaluate_takes_its_options_from_a_config_file(tiny, tmp_path, capsys):
    "issue 18: `ragbench evaluate --config FILE` (the options by name); a flag given overrides the file; an unknown key names the file."
    from ragbench.cli import main
    setups = tmp_path / "setups.yaml"
    setups.write_text("baseline: {name: bm25-2, retrieval: bm25, top_k: 2}\n")
    conf = tmp_path / "eval.yaml"
    conf.write_text(f"setups: {setups}\ndb: {tiny['db']}\nbertscore: false\nks: [1, 2]\nquiet: true\njudges: none\n")
    assert main(["evaluate", "--dataset", str(tiny["path"]), "--out", str(tmp_path / "ev"), "--config", str(conf)]) == 0
    summ = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert list(summ["setups"]) == ["bm25-2"] and summ["setups"]["bm25-2"]["recall@1"]["n"] == 4 and "recall@3" not in summ["setups"]["bm25-2"]
    conf.write_text("n_bot: 3\n")
    assert main(["evaluate", "--dataset", str(tiny["path"]), "--out", str(tmp_path / "ev2"), "--config", str(conf)]) == 2
    assert "eval.yaml: unknown option 'n_bot'" in capsys.readouterr().err and not (tmp_path / "ev2").exists()


def test_load_scores_and_summary_frames(tiny, tmp_path):
    "Before: no pandas view of the scores or the summary."
    from ragbench.eval import load_scores, summary_frame
    summ = evaluate(tiny["ds"], [Setup(name="bm25-2", retrieval="bm25", top_k=2)], tmp_path / "ev", db=tiny["db"], bertscore=False)
    df = load_scores(tmp_path / "ev")
    assert len(df) == 6 and {"item_id", "setup", "mode", "question", "recall@k", "mrr"} <= set(df.columns)
    assert df.set_index("item_id").loc["q1", "question"].startswith("Which magazine")
    wide = summary_frame(summ)
    assert list(wide.index) == ["bm25-2"] and "recall@k" in wide.columns
    long = summary_frame(summ, ["recall@k"], wide=False)
    assert long.iloc[0]["n"] == 4 and long.iloc[0]["mean"] == summ["setups"]["bm25-2"]["recall@k"]["mean"]


def _hf_hotpot(q):
    "A HotpotQA question in the Hugging Face `hotpot_qa` layout."
    return {"id": q["_id"], "question": q["question"], "answer": q["answer"], "type": q["type"], "level": q["level"],
            "supporting_facts": {"title": [t for t, _ in q["supporting_facts"]], "sent_id": [i for _, i in q["supporting_facts"]]},
            "context": {"title": [t for t, _ in q["context"]], "sentences": [s for _, s in q["context"]]}}


def test_static_reads_the_hugging_face_layout(tmp_path):
    "Before: the HF layout was rejected ('a hotpotqa corpus file' for JSON; JSONL and Parquet not read at all)."
    import pandas as pd
    orig = json.loads(HOTPOT.read_text())[:5]
    (tmp_path / "hot.json").write_text(json.dumps(orig))
    (tmp_path / "hf.jsonl").write_text("".join(json.dumps(_hf_hotpot(q)) + "\n" for q in orig))
    pd.DataFrame([_hf_hotpot(q) for q in orig]).to_parquet(tmp_path / "hf.parquet")
    mus = json.loads(MUSIQUE.read_text())[:5]
    pd.DataFrame(mus).to_parquet(tmp_path / "mus.parquet")
    out = {}
    for name, fmt in (("hot.json", "hotpotqa"), ("hf.jsonl", "hotpotqa"), ("hf.parquet", "hotpotqa"), ("mus.parquet", "musique")):
        assert static_cli(["--format", fmt, str(tmp_path / name), "--db", str(tmp_path / f"{name}_db"), "--out", str(tmp_path / f"{name}.out.jsonl"),
                           "--embedder", "hash:64", "--quiet"]) == 0, name
        out[name] = [it.model_dump() for it in Dataset.read(tmp_path / f"{name}.out.jsonl")]
    assert out["hf.jsonl"] == out["hot.json"] == out["hf.parquet"] and len(out["hot.json"]) == 5
    assert out["mus.parquet"] == [it.model_dump() for it in load_static(MUSIQUE, "musique", limit=5)]
    from ragbench.index import ChunkIndex
    assert missing_gold(Dataset.read(tmp_path / "hf.parquet.out.jsonl"), ChunkIndex.open(tmp_path / "hf.parquet_db")) == []


def test_hugging_face_export(tiny, tmp_path):
    "Before: no export with a fixed schema; `Dataset.write('x.parquet')` types a column by its data, so files differ."
    try: import datasets                                                    # a dev requirement (settings.ini): fail loudly, never skip
    except ImportError: pytest.fail("the Hugging Face export is tested with `datasets`: pip install datasets")
    from ragbench.eval import export_hf, read_hf
    from ragbench.eval.export import _to_hf
    a = Dataset([it for it in tiny["ds"] if it.method == "triad"])          # no style, no difficulty anywhere
    b = Dataset([it for it in tiny["ds"] if it.method == "dora"])           # styles set
    export_hf(a, tmp_path / "a.parquet"); export_hf(b, tmp_path / "b.parquet")
    hf = datasets.load_dataset("parquet", data_files=[str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")], split="train",
                               cache_dir=str(tmp_path / "hf_cache"))
    assert hf.num_rows == len(a) + len(b) and set(hf.column_names) == set(QAItem.model_fields)
    assert json.loads(hf[1]["meta"]) == {"variant_of": "q1", "partial_chunk_id": "c0"} and hf[1]["unanswerable_kind"] == "context"
    assert [it.model_dump() for it in read_hf(tmp_path / "a.parquet")] == [it.model_dump() for it in a]
    assert _to_hf(b).num_rows == 2 and _to_hf(b).features == hf.features


def test_answers_file_scored_at_the_ids_it_lists(tmp_path):
    "issue 25: an --answers file listing 3 ids per answer gets k = 3 (precision@3), not the old fixed k = 5."
    from ragbench.eval.run import answers_setup
    p = tmp_path / "mine.jsonl"
    p.write_text('{"item_id": "q1", "retrieved_chunk_ids": ["a", "b", "c"]}\n{"item_id": "q2", "retrieved_chunk_ids": ["a"]}\n')
    assert answers_setup(str(p)).top_k == 3
    assert answers_setup(f"x={p}", top_k=7).top_k == 7


def test_static_index_bar_has_a_total(tmp_path, capsys):
    "issue 25: `static`'s indexing bar shows N/TOTAL (it ran 9 minutes on 300 questions with no total)."
    from ragbench.embed import HashEmbedder
    ds = load_static(HOTPOT, "hotpotqa", limit=3)
    only = {c.chunk_id for it in ds for c in it.contexts}
    index_static(HOTPOT, "hotpotqa", tmp_path / "db", embedder=HashEmbedder(), only_ids=only, progress=True)
    assert f"{len(only)}/{len(only)}" in capsys.readouterr().err


# issue 42: evaluation at the speed of the LLM
from ragbench.embed import HashEmbedder


class _SlowHash(HashEmbedder):
    "The hashing embedder, `pause` seconds a call (an encoder on a busy CPU), noting each call's start, end and texts."
    def __init__(self, dim: int = 64, pause: float = 0.0):
        super().__init__(dim)
        self.pause, self.calls = pause, []

    def encode(self, texts):
        import time
        texts, t0 = list(texts), time.time()
        time.sleep(self.pause)
        self.calls.append((t0, time.time(), texts))
        return super().encode(texts)


def _opened_with(embedder):
    "An index factory opening each setup's table with `embedder`."
    from ragbench.index import ChunkIndex
    return lambda s: ChunkIndex.open(s.db, table=s.table, embedder=embedder)


def test_each_question_embedded_once_per_run_in_one_call_per_batch(tiny, tmp_path):
    "Before: a dense and a hybrid setup embedded the same question once each, one question per encoder call."
    emb = _SlowHash(64)
    setups = [Setup(name="dense", db=str(tiny["db"]), top_k=2), Setup(name="hybrid", db=str(tiny["db"]), top_k=2,
                                                                     retrieval="hybrid")]
    kw = dict(judge_llm=None, bertscore=False, similarity_model=None, batch_size=3)
    evaluate(tiny["ds"], setups, tmp_path / "once", index_factory=_opened_with(emb), **kw)
    searched = [it.question for it in tiny["ds"] if it.id != "q1-u"]          # q1-u: not applicable when retrieved
    assert sorted(t for *_, texts in emb.calls for t in texts) == sorted(searched)   # each once, dense and hybrid
    assert [len(texts) for *_, texts in emb.calls] == [2, 3]                    # a batch's questions in one call
    plain = evaluate(tiny["ds"], setups, tmp_path / "plain", **kw)             # the table's own embedder, unwrapped
    from ragbench.eval import read_scores
    scored = lambda out: {(r["item_id"], r["setup"]): (r["retrieved_chunk_ids"], r["metrics"]) for r in read_scores(out)}
    assert scored(tmp_path / "once") == scored(tmp_path / "plain") and len(scored(tmp_path / "plain")) == 12
    assert plain["setups"].keys() == {"dense", "hybrid"}


def test_local_cpu_work_leaves_the_llm_requests_going(tiny, tmp_path):
    "Before: a question's embedding ran on the event loop, so no LLM request was sent while the encoder worked."
    from ragbench.testing import FakeLLMServer
    emb = _SlowHash(64, pause=0.6)
    with FakeLLMServer(latency=0.3) as srv:
        spec = f"openai:{srv.url}/v1@fake"
        evaluate(tiny["ds"], [Setup(name="dense", db=str(tiny["db"]), top_k=2, llm=spec)], tmp_path / "ev",
                 index_factory=_opened_with(emb), judge_llm=spec, judges=("correctness",), bertscore=False,
                 similarity_model=None, batch_size=1)
        times = srv.stats()["times"]
    assert len(emb.calls) == 5                                    # one encoder call per batch of one question
    during = [t for t0, t1, _ in emb.calls for t in times if t0 + 0.1 < t < t1]
    assert during, (emb.calls, times)                             # requests went out while the encoder worked


def test_concurrency_is_the_requests_in_flight(tiny, tmp_path):
    "Before: evaluation kept at most the LLM layer's 8 requests in flight whatever --batch-size / --parallel-batches said."
    from ragbench.testing import FakeLLMServer
    with FakeLLMServer(latency=0.4) as srv:
        spec = f"openai:{srv.url}/v1@fake"
        argv = ["--dataset", str(tiny["path"]), "--setups", str(_setups_file(tmp_path, tiny["db"], spec)),
                "--judge-llm", spec, "--judges", "correctness,faithfulness", "--no-bertscore", "--quiet"]
        assert evaluate_cli(argv + ["--out", str(tmp_path / "two"), "--concurrency", "2"]) == 0
        two = srv.stats()["times"]
        srv.reset_stats()
        assert evaluate_cli(argv + ["--out", str(tmp_path / "many")]) == 0     # the default: 16
        many = srv.stats()["times"]
    most = lambda ts: max(sum(t <= u < t + 0.35 for u in ts) for t in ts)   # requests sent within one reply's time
    assert most(two) <= 2 < most(many), (most(two), most(many))


def test_bertscore_pass_gives_similarity_its_vectors(tiny):
    "Before: answer similarity encoded each answer and gold again after BERTScore's pass had encoded them."
    from ragbench.embed import make_embedder
    from ragbench.eval.run import _Remembered, _correctness_metrics, _text_metrics
    items = [it for it in tiny["ds"] if it.answerable]
    answers = [f"I think it is {it.answer}." for it in items]
    def scored(similarity):
        mets = [{"correct_score": 0.5} for _ in items]
        _text_metrics(items, answers, mets, list(range(len(items))), True, None, similarity)
        _correctness_metrics(items, answers, mets, list(range(len(items))), similarity)
        return [m["semantic_similarity"] for m in mets], [m["bertscore_recall"] for m in mets]
    model, encoded = make_embedder(), []
    class Counting:                        # the bundled MiniLM, noting what it is asked to encode
        spec, name = model.spec, model.name
        def encode(self, texts): encoded.extend(texts); return model.encode(texts)
    shared = scored(_Remembered(Counting(), {}))
    assert encoded == []                                                 # every vector came from BERTScore's pass
    class Other(Counting): spec = "another"                              # not the bundled model: it encodes them
    alone = scored(_Remembered(Other(), {}))
    assert sorted(encoded) == sorted(set(answers) | {it.answer for it in items})
    assert np.allclose(shared[0], alone[0], atol=1e-6) and shared[1] == alone[1]
