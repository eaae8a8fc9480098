"""Integration tests of the evaluation harness (ragbench.eval_metrics / eval_setups / eval_run / static).

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
from ragbench.eval_metrics import (precision_at_k, recall_at_k, hit_at_k, mrr, ndcg_at_k, retrieval_metrics,
                                   exact_match, token_f1, rouge_l_recall, bertscore_recall, default_bertscore_model,
                                   answer_metrics, yes_no)
from ragbench.stats import bootstrap_ci
from ragbench.eval_setups import Setup, SetupError, load_setups
from ragbench.eval_run import evaluate, summarize, compare, export_ragas, EvalError, metric_names
from ragbench.static import load_static, index_static, missing_gold
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
        "precision@{k}": precision_at_k, "recall@{k}": recall_at_k, "hit_rate@{k}": hit_at_k,
        "ndcg@{k}": ndcg_at_k, "mrr@{k}": lambda r, g, k: mrr(r, g, k),
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
    assert empty and all(recall_at_k([], qrels[q], 5) == 0.0 for q in empty)
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
    _, r, _ = score(preds, golds, model_type=default_bertscore_model(), num_layers=6, batch_size=64)
    np.testing.assert_allclose(mine, r.numpy().astype(float), rtol=0, atol=1e-9)
    assert bertscore_recall(["", "x"], ["a", ""]) == [0.0, 0.0]


def test_yes_no_rule():
    assert yes_no("No, because it was founded later.") == "no"
    assert yes_no("  YES!") == "yes" and yes_no("Nobody") is None and yes_no("I think no") is None
    m = answer_metrics("No, because the magazine started in 1844.", "no", binary=True)
    assert (m["exact_match"], m["token_f1"], m["token_recall"], m["yes_no_correct"]) == (1.0, 1.0, 1.0, 1.0)
    assert answer_metrics("Yes", "no", binary=True)["token_f1"] == 0.0
    assert answer_metrics("No, because", "no", binary=False)["yes_no_correct"] is None


def test_bootstrap_interval_matches_numpy_percentile_bootstrap():
    vals = [random.Random(5).random() for _ in range(100)]
    ci = bootstrap_ci(vals + [None] * 7, n_boot=500, seed=11)
    assert (ci["n"], ci["n_na"]) == (100, 7) and abs(ci["mean"] - np.mean(vals)) < 1e-12
    assert ci["lo"] < ci["mean"] < ci["hi"] and ci["hi"] - ci["lo"] < 0.25


# ---------------------------------------------------------------------------------------------------------
# End to end on the shared HotpotQA and MuSiQue samples

@pytest.fixture(scope="module")
def static_env(tmp_path_factory):
    "15 HotpotQA and 15 MuSiQue questions, each with a paragraph index built with all-MiniLM-L6-v2."
    import torch
    from ragbench.embed import Embedder
    torch.set_num_threads(1)  # on a busy 2-core machine two torch threads contend: 1 thread is ~7x faster per query
    root = tmp_path_factory.mktemp("static")
    emb = Embedder()
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
                    bertscore=False, n_boot=200)
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
                        judge_llm=judge, bertscore=False, n_boot=100)
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
                        llm_factory=lambda s: make_llm(s), judge_llm=judge, bertscore=False, n_boot=50)
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
    kw = dict(db=db, llm_factory=factory, judge_llm="fake", bertscore=False, n_boot=100)
    full = evaluate(ds, setups, out, **kw)
    rows = (out / "scores.jsonl").read_text().splitlines(keepends=True)
    assert len(rows) == 16
    # kill simulation: keep 5 rows and half of the 6th
    (out / "scores.jsonl").write_text("".join(rows[:5]) + rows[5][: len(rows[5]) // 2])
    made.clear()
    again = evaluate(ds, setups, out, **kw)
    assert again["new_rows"] == 11 and again["n_rows"] == 16
    assert len(RunDir(out).read("scores.jsonl")) == 16
    # every call of the resumed run came from the cache
    tot = again["usage"]["fake"]["total"]
    assert tot["calls"] == 0 and tot["cached"] > 0
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
                    llm_factory=lambda s: llm, bertscore=False, n_boot=50)
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
                       "--out", str(tmp_path / "e4"), "--no-bertscore", "--n-boot", "50", "--quiet"])
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
                             "--n-boot", "50", "--quiet", "--modes", "retrieved,oracle"]) == 0
    out = capsys.readouterr().out
    assert "dense5" in out and "recall@k" in out
    assert compare_cli([str(tmp_path / "ev_hot"), str(tmp_path / "ev_mus"), "--metric", "recall@5", "--n-boot", "100",
                        "--json", str(tmp_path / "cmp.json")]) == 0
    c = json.loads((tmp_path / "cmp.json").read_text())
    assert c["setups"] == ["dense5", "dense2", "bm25-5"] and -1 <= c["kendall_tau"] <= 1
    assert "Kendall tau" in capsys.readouterr().out
    assert export_ragas_cli(["--dataset", str(tmp_path / "hot.jsonl"), "--db", str(tmp_path / "hot_db"),
                             "--scores", str(tmp_path / "ev_hot"), "--setup", "dense2", "--out", str(tmp_path / "r.parquet")]) == 0
    import pandas as pd
    df = pd.read_parquet(tmp_path / "r.parquet")
    assert list(df.columns) == ["user_input", "reference", "reference_contexts", "retrieved_contexts", "response"]
    assert len(df) == 10 and all(len(x) == 2 for x in df["retrieved_contexts"]) and all(len(x) >= 2 for x in df["reference_contexts"])
