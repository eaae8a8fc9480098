"""Issue 42, TRIAD's cost per accepted question: seeds next to each other in the plan share one entity call, and the
unanswerable check does not re-send the hits the label call already judged. Real LanceDB index (hash embedder), the
fake LLM server through the real OpenAI client, the template model's replies.

    python -m pytest -q tests/test_triad_cost.py
"""
import json, os, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Context, QAItem
from ragbench.corpus import hotpot_chunks
from ragbench.llm import arun, make_llm
from ragbench.llm.template import template_reply
from ragbench.prompts import format_chunks, parse_chunks, render_prompt
from ragbench.triad import TriadConfig, run_triad
from ragbench.triad.bridge import _BridgeEntities, _EntityTasks, _link, _tasks_text, hit_chunk, neighbourhood
from ragbench.triad.contexts import acheck_unanswerable, unanswerable_variant
from ragbench.testing import FakeLLMServer
from test_triad import HOTPOT, fake_rules


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from ragbench.index import ChunkIndex
    return ChunkIndex.build(tmp_path_factory.mktemp("cost") / "db", hotpot_chunks(HOTPOT, 30), "hash", progress=False)


def _tasks(index, n=9):
    "(chunks offered, kind, k) of n seeds, the types in turn, as a run makes them."
    cfg, out = TriadConfig(), []
    for i, sid in enumerate(index.sample_ids(len(index), seed=0, first=3 * n)):
        kind = ("comparison", "intersection", "composition")[i % 3]
        hood = neighbourhood(sid, index, cfg, kind)
        if len(hood.partners) >= 1: out.append(([hood.seed, *map(hit_chunk, hood.partners)], kind, 1))
    return out[:n]


def test_the_fake_answers_each_task_of_a_grouped_entity_call_as_its_single_call(index):
    "The template model's grouped answer, task by task, equals its answer to each seed's own entity prompt."
    tasks = _tasks(index)
    single = []
    for ch, kind, k in tasks:
        system, prompt = render_prompt("triad.entities", n=len(ch), k=k, link=_link(kind), chunks=format_chunks(ch))
        single.append(json.loads(template_reply(prompt, system, _BridgeEntities.model_json_schema())))
    system, prompt = render_prompt("triad.entities_tasks", m=len(tasks), tasks=_tasks_text(tasks))
    grouped = json.loads(template_reply(prompt, system, _EntityTasks.model_json_schema()))["tasks"]
    assert len(tasks) == 9 and grouped == single
    assert any(s["partners"] for s in single) and any(not s["partners"] for s in single)   # both branches are seen


def _run(index, out, entity_group, responder=None, n=8):
    "A fake-server run of n questions: (summary, dataset rows, the server's request count, entity prompts sent)."
    sent = []
    def spy(req):
        if "find what links passages" in (req.get("system") or ""): sent.append(req["prompt"])
        return responder(req) if responder else None
    with fake_rules(judge_pass=0.81, sufficient_p=0.09), FakeLLMServer(responder=spy) as srv:
        llm = make_llm(f"openai:{srv.url}/v1@fake-model", max_concurrency=8, cache_dir=out / "cache")
        cfg = TriadConfig(n=n, concurrency=8, entity_group=entity_group, seed=1)
        s = run_triad(index, llm, cfg, out, progress=False, log=lambda m: None).summary
        served = srv.stats()["requests"]
    rows = [json.loads(l) for l in open(out / "dataset.jsonl")]
    return s, rows, served, sent


def _items(rows):
    return [(r["id"], r["question"], r["answer"], r["difficulty"], r["temporal"],
             [(c["chunk_id"], c["source"], c["relevant"]) for c in r["contexts"]]) for r in rows]


def test_seeds_next_in_the_plan_share_an_entity_call_and_the_items_stay_the_same(index, tmp_path):
    "issue 42: entity_group 2 sends fewer entity requests than 1, counted as sent, and the run's items are identical."
    one, rows1, served1, sent1 = _run(index, tmp_path / "one", 1)
    two, rows2, served2, sent2 = _run(index, tmp_path / "two", 2)
    assert _items(rows1) == _items(rows2) and len(rows1) >= 8
    e1, e2 = one["usage_by_stage"]["triad.entities"]["calls"], two["usage_by_stage"]["triad.entities"]["calls"]
    # counted before sending: a request cancelled in flight at the target may never reach the responder
    assert e1 >= len(sent1) and e2 >= len(sent2) and e2 < 0.7 * e1, (e1, e2, len(sent1), len(sent2))
    assert one["llm"]["calls"] == served1 and two["llm"]["calls"] == served2       # the meter equals the server
    assert not any("Task 2 (" in p for p in sent1) and any("Task 2 (" in p for p in sent2)
    shown = {c[0] for p in sent2 for c in parse_chunks(p)}             # every bridged seed was shown to an entity call
    seeds = [json.loads(l) for l in open(tmp_path / "two" / "seeds.jsonl")]
    assert all(r["seed"] in shown for r in seeds if r.get("chunk_ids"))


def test_a_grouped_reply_that_cannot_be_used_sends_each_seed_its_own_call(index, tmp_path):
    "A grouped entity reply with the wrong number of answers is not guessed from: each seed asks on its own, as before."
    bad = lambda req: {"tasks": []} if "separate tasks" in req["prompt"] else None
    base, rows1, _, _ = _run(index, tmp_path / "one", 1, n=4)
    s, rows2, served, sent = _run(index, tmp_path / "bad", 2, responder=bad, n=4)
    assert _items(rows1) == _items(rows2)
    grouped = [p for p in sent if "separate tasks" in p]
    assert grouped and s["usage_by_stage"]["triad.entities"]["calls"] >= len(sent) and s["llm"]["calls"] == served
    assert len(sent) - len(grouped) >= base["usage_by_stage"]["triad.entities"]["calls"] - 2


def _parent(index, question="Which city hosts the Lilu archive?"):
    "An accepted item and its labelled candidates: the question's first 6 hits, every second labelled relevant."
    hits = index.search(question, k=6, mode="dense")
    ctxs = [Context(chunk_id=h.chunk_id, relevant=i % 2 == 1, source="question") for i, h in enumerate(hits)]
    return QAItem(id="q1", method="triad", kind="intersection", question=question, answer="Nippur",
                  gold_chunk_ids=[], contexts=ctxs, status="accepted")


def _check(index, parent, cfg, answers=lambda ids: False):
    "acheck_unanswerable against the fake server: (the variant, the chunk ids each check request showed)."
    shown = []
    def spy(req):
        if "check whether passages answer" not in (req.get("system") or ""): return None
        ids = [c[0] for c in parse_chunks(req["prompt"])]
        shown.append(ids)
        return {"answers_question": answers(ids), "reason": "scripted"}
    variant = unanswerable_variant(parent, cfg)
    judged = [c.chunk_id for c in parent.contexts if c.relevant is False]
    with FakeLLMServer(responder=spy) as srv:
        llm = make_llm(f"openai:{srv.url}/v1@fake-model")
        v = arun(acheck_unanswerable(variant, parent, index, llm, cfg, judged=judged))
    return v, shown


def test_the_unanswerable_check_sends_only_hits_the_labels_did_not_judge(index):
    "issue 42: a hit the label call judged not relevant to the question is not shown again; the others still are."
    cfg, parent = TriadConfig(unanswerable_k=6), _parent(index)
    v, shown = _check(index, parent, cfg)
    judged = {c.chunk_id for c in parent.contexts if c.relevant is False}
    relevant = {c.chunk_id for c in parent.contexts if c.relevant}
    check = v.meta["index_check"]
    assert v.status == "accepted" and len(shown) == 1 and check["answers_question"] is False
    assert set(check["labelled"]) == judged and not set(shown[0]) & (judged | relevant)
    assert set(shown[0]) | judged == set(check["checked"]) and len(check["checked"]) == 6
    # the check can still fail: a hit outside the labelled candidates that answers rejects the variant
    v, _ = _check(index, parent, cfg, answers=lambda ids: True)
    assert v.status == "rejected" and v.meta["index_check"]["answers_question"] is True


def test_the_unanswerable_check_makes_no_call_when_the_labels_judged_every_hit(index):
    "Every hit among the labelled candidates: no request, the record says why."
    cfg, parent = TriadConfig(unanswerable_k=3), _parent(index)
    parent = parent.model_copy(update={"contexts": [c.model_copy(update={"relevant": False}) for c in parent.contexts]})
    v, shown = _check(index, parent, cfg)
    assert shown == [] and v.status == "accepted" and len(v.meta["index_check"]["labelled"]) == 3
    assert "labelled not relevant" in v.meta["index_check"]["reason"]


def test_a_question_an_earlier_running_seed_drafted_waits_instead_of_paying_for_contexts(tmp_path):
    """issue 42: on the Git docs the stand-in writes the same question for seeds of the same two pages; the later seed
    waits for the earlier one, still running, and pays no label call or check for a question the run will not keep
    (before: 2 duplicates with 30 and 19 labelled candidates and their variants, 199 requests; after 179)."""
    from ragbench.corpus import chunk_documents, load_documents
    from ragbench.index import ChunkIndex
    from test_triad import GITDOCS
    index = ChunkIndex.build(tmp_path / "db", list(chunk_documents(load_documents(GITDOCS))), "hash", progress=False)
    with fake_rules(judge_pass=0.81, sufficient_p=0.09), FakeLLMServer(latency=0.2) as srv:
        llm = make_llm(f"openai:{srv.url}/v1@fake-model", max_concurrency=16)
        s = run_triad(index, llm, TriadConfig(n=20, concurrency=16), tmp_path / "run", progress=False,
                      log=lambda m: None).summary
    dups = [json.loads(l) for l in open(tmp_path / "run" / "duplicates.jsonl")]
    assert s["accepted"] == 20 and s["seeds_by_outcome"].get("duplicate", 0) >= 1
    assert dups and all(d["meta"].get("contexts_skipped") == "repeat" and not d["contexts"] for d in dups), \
        [(d["meta"].get("contexts_skipped"), len(d["contexts"])) for d in dups]


def test_the_estimate_counts_grouped_entity_calls_and_the_checks_unjudged_hits(index):
    "The estimate follows the run: entity calls / entity_group (their tokens unchanged), the check's smaller prompts."
    from ragbench.triad import estimate_triad
    one, two = (estimate_triad(index, TriadConfig(n=20, entity_group=g)) for g in (1, 2))
    e1, e2 = one["by_stage"]["triad.entities"], two["by_stage"]["triad.entities"]
    assert e2["calls"] == pytest.approx(e1["calls"] / 2, abs=0.1) and e2["input_tokens"] == pytest.approx(e1["input_tokens"], rel=0.01)
    assert one["assumed"]["relevant_share"] == 0.3 and two["calls_per_accepted"] < one["calls_per_accepted"]
    u = one["by_stage"]["triad.unanswerable"]
    assert u["input_tokens"] / u["calls"] < one["by_stage"]["triad.labels"]["input_tokens"] / one["by_stage"]["triad.labels"]["calls"] / 3


def test_a_run_resumes_with_any_entity_group(index, tmp_path):
    "entity_group packs requests, not answers: a run started with one value (or before the option) resumes with another."
    from ragbench.triad.run import TriadMethod
    configs = [TriadMethod(make_llm("template"), TriadConfig(entity_group=g)).config() for g in (1, 2, 3)]
    assert configs[0] == configs[1] == configs[2] and "entity_group" not in configs[0]
    _run(index, tmp_path / "run", 1, n=2)
    s, rows, _, _ = _run(index, tmp_path / "run", 2, n=4)                      # the same folder, more questions
    assert s["accepted"] == 4 and s["stop_reason"] == "target reached"


def test_seeds_sharing_an_entity_call_are_dealt_to_one_shard(index):
    "The plan's tasks carry their entity group: `plan_shards` keeps a group in one shard, so a cluster asks it once."
    from ragbench.scale.gen import plan_shards
    from ragbench.triad.run import TriadMethod
    tasks = TriadMethod(make_llm("template"), TriadConfig(n=4, entity_group=2)).plan(index, [])
    shard_of = {t.position: i for i, s in enumerate(plan_shards(tasks, 2, 2)) for t in s}
    assert len(tasks) >= 4 and len(set(shard_of.values())) > 1
    assert all(shard_of[t.position] == shard_of[t.position // 2 * 2] for t in tasks)
