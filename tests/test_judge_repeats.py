"""issue 37: judge self-consistency (`ragbench evaluate --judge-repeats K`).

Through the fake OpenAI server, scripted so that the correctness judge answers differently across re-asks for
some items and the same for the others (the faithfulness judge is the template's, always the same): the flipped
items and the flip rate with its Wilson interval, the server's request count against the run's meter, resume from
the cache, re-asks that reached the server (not the cache of the first ask), and `--estimate`.

Run: pytest tests/test_judge_repeats.py -q -p no:xdist   (about 15 seconds)
"""
import json, os, re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.cli import main
from ragbench.core import Chunk, Context, Dataset, QAItem

from test_eval import TEXTS   # the same eight passages as the evaluation tests
QUESTIONS = ["When was Arthur's Magazine started?", "Who publishes First for Women?", "What is the capital of France?",
             "Where does the Seine flow to?", "Where do the Rhone and the Saone meet?", "Which French port is on the Mediterranean?",
             "What does git stash do?", "What does git bisect use?"]
FLIP = {"i1", "i4", "i6"}          # their correctness verdict changes on a re-ask; the others never change
N, K = len(TEXTS), 2


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    "A hash-embedded index of 8 chunks and 8 answerable items, one per chunk."
    from ragbench.index import ChunkIndex
    root = tmp_path_factory.mktemp("rep")
    ChunkIndex.build(root / "db", [Chunk(id=f"c{i}", doc_id=f"d{i}", text=t, meta={"title": f"T{i}"}) for i, t in enumerate(TEXTS)],
                     "hash:64", progress=False)
    items = [QAItem(id=f"i{i}", method="triad", kind="composition", question=q, answer=TEXTS[i].split(" ", 3)[-1],
                    gold_chunk_ids=[f"c{i}"], contexts=[Context(chunk_id=f"c{i}", relevant=True, source="gold")])
             for i, q in enumerate(QUESTIONS)]
    Dataset(items).write(root / "ds.jsonl")
    return root


class Judge:
    "The server's script: correctness says correct, except that the FLIP items' re-ask number 1 says not; records every request."
    def __init__(self): self.seen = []

    def __call__(self, req):
        self.seen.append(req)
        if not req["prompt"].startswith("Decide whether an answer to a question is correct"): return None   # the template's
        item = next(f"i{i}" for i, q in enumerate(QUESTIONS) if f"Question: {q}\n" in req["prompt"])
        flip = item in FLIP and "re-check number 1" in (req["system"] or "")
        return {"correct": not flip, "answer_claims": [], "reference_claims": [], "reason": "scripted"}

    def reasks(self, n=None):
        "The requests that were re-asks (number `n`, or any)."
        return [r for r in self.seen if re.search(rf"re-check number {n or '[0-9]+'}\b", r["system"] or "")]


def evaluate_cli(data, out, spec, *extra):
    f = out.parent / "setups.yaml"
    f.write_text(f"defaults: {{db: '{data / 'db'}', llm: '{spec}'}}\nbaseline: {{name: dense2, top_k: 2}}\n")
    argv = ["evaluate", "--dataset", data / "ds.jsonl", "--setups", f, "--out", out, "--judge-llm", spec,
            "--judges", "correctness,faithfulness", "--no-bertscore", "--quiet", *extra]
    return main([str(a) for a in argv])


def test_judge_repeats_report_the_flipped_items(data, tmp_path, capsys):
    from ragbench.testing import FakeLLMServer
    from ragbench.eval import judge_noise
    from statsmodels.stats.proportion import proportion_confint
    judge, out = Judge(), tmp_path / "ev"
    with FakeLLMServer(responder=judge) as srv:
        spec = f"openai:{srv.url}/v1@fake"
        # the estimate sends nothing and writes nothing, and counts the re-asks apart
        assert evaluate_cli(data, out, spec, "--judge-repeats", K, "--estimate") == 0
        est = json.loads(capsys.readouterr().out)
        assert srv.stats()["requests"] == 0 and not out.exists()
        assert est["calls"] == {"answer": N, "judges": 2 * N, "judge_repeats": K * 2 * N, "total": N + 2 * N + K * 2 * N}

        assert evaluate_cli(data, out, spec, "--judge-repeats", K) == 0
        printed = capsys.readouterr().out
        sent = srv.stats()["requests"]
        summ = json.loads((out / "summary.json").read_text())
        # every request reached the server once, and the meter counted each (re-asks included); the estimate was exact here
        assert sent == summ["usage"]["run"]["calls"] == len(judge.seen) == est["calls"]["total"]
        assert srv.stats()["repeats"] == 0                      # no request was sent twice
        # the re-asks were sent (not served from the first ask's cache entry): K per judge and row
        assert len(judge.reasks()) == K * 2 * N and len(judge.reasks(1)) == len(judge.reasks(2)) == 2 * N

        jc = summ["judge_consistency"]
        assert (jc["repeats"], jc["rows"], sorted(jc["sampled_items"])) == (K, N, sorted(f"i{i}" for i in range(N)))
        c = jc["metrics"]["correct"]
        lo, hi = proportion_confint(len(FLIP), N, method="wilson")
        assert (c["flipped"], c["k"], c["n"]) == (sorted(FLIP), len(FLIP), N)
        assert c["flip_rate"] == len(FLIP) / N and abs(c["lo"] - lo) < 1e-12 and abs(c["hi"] - hi) < 1e-12
        assert jc["metrics"]["faithful"]["k"] == 0 and jc["metrics"]["faithful"]["flipped"] == []
        assert judge_noise(out) == jc["metrics"]
        assert f"correct: 3/{N} flipped = 38% [{lo:.0%}, {hi:.0%}]; items: i1, i4, i6" in printed
        recs = [json.loads(l) for l in (out / "judge_repeats.jsonl").read_text().splitlines()]
        assert len(recs) == N and all([a["repeat"] for a in r["asks"]] == [0, 1, 2] for r in recs)
        i1 = next(r for r in recs if r["item_id"] == "i1")
        assert [a["metrics"]["correct"] for a in i1["asks"]] == [1.0, 0.0, 1.0]
        # the first ask is the row's verdict
        rows = {json.loads(l)["item_id"]: json.loads(l) for l in (out / "scores.jsonl").read_text().splitlines()}
        assert all(rows[r["item_id"]]["metrics"]["correct"] == r["asks"][0]["metrics"]["correct"] for r in recs)
        assert "judge_repeats" not in rows["i1"]

        # the same command again: nothing left, nothing sent
        assert evaluate_cli(data, out, spec, "--judge-repeats", K) == 0
        assert srv.stats()["requests"] == sent
        assert json.loads((out / "summary.json").read_text())["judge_consistency"] == jc
        # the re-asks' file lost (a kill before it was written): rewritten from the cache, nothing sent
        (out / "judge_repeats.jsonl").unlink()
        assert evaluate_cli(data, out, spec, "--judge-repeats", K) == 0
        assert srv.stats()["requests"] == sent and judge_noise(out) == jc["metrics"]
        # one more re-ask: the estimate counts it, and only it is sent
        capsys.readouterr()
        assert evaluate_cli(data, out, spec, "--judge-repeats", K + 1, "--estimate") == 0
        assert json.loads(capsys.readouterr().out)["calls"] == {"answer": 0, "judges": 0, "judge_repeats": 2 * N, "total": 2 * N}
        assert evaluate_cli(data, out, spec, "--judge-repeats", K + 1) == 0
        assert srv.stats()["requests"] == sent + 2 * N == len(judge.seen) and len(judge.reasks(3)) == 2 * N
        summ = json.loads((out / "summary.json").read_text())
        assert summ["usage"]["run"]["calls"] == sent + 2 * N
        assert summ["judge_consistency"]["metrics"]["correct"]["flipped"] == sorted(FLIP)


def test_judge_repeat_sample_and_no_repeats(data, tmp_path, capsys):
    "--judge-repeat-sample N re-asks the rows of N items (seeded); without --judge-repeats nothing is re-asked."
    from ragbench.testing import FakeLLMServer
    judge = Judge()
    with FakeLLMServer(responder=judge) as srv:
        spec = f"openai:{srv.url}/v1@fake"
        assert evaluate_cli(data, tmp_path / "none", spec) == 0
        summ = json.loads((tmp_path / "none" / "summary.json").read_text())
        assert summ["judge_consistency"] is None and not judge.reasks() and not (tmp_path / "none" / "judge_repeats.jsonl").exists()
        assert "judge self-consistency" not in capsys.readouterr().out
        assert evaluate_cli(data, tmp_path / "three", spec, "--judge-repeats", 1, "--judge-repeat-sample", 3, "--seed", 5) == 0
        jc = json.loads((tmp_path / "three" / "summary.json").read_text())["judge_consistency"]
        assert len(jc["sampled_items"]) == 3 and jc["rows"] == 3 and len(judge.reasks()) == 3 * 2
        assert jc["metrics"]["correct"]["flipped"] == sorted(FLIP & set(jc["sampled_items"]))
        assert evaluate_cli(data, tmp_path / "three-b", spec, "--judge-repeats", 1, "--judge-repeat-sample", 3, "--seed", 5) == 0
        assert json.loads((tmp_path / "three-b" / "summary.json").read_text())["judge_consistency"]["sampled_items"] == jc["sampled_items"]
        conf = tmp_path / "eval.yaml"                              # the same options from a config file
        conf.write_text("judge_repeats: 1\njudge_repeat_sample: 3\nseed: 5\n")
        assert evaluate_cli(data, tmp_path / "three-c", spec, "--config", conf) == 0
        assert json.loads((tmp_path / "three-c" / "summary.json").read_text())["judge_consistency"]["sampled_items"] == jc["sampled_items"]
