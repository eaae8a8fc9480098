"""TRIAD integration tests: every branch of the bridge / write / judge / contexts steps driven by a scripted LLM on a
real (small) LanceDB index of HotpotQA paragraphs, the run on the generation base (calls counted, plan order, resume
after a kill, budget across resumes) through the CLI against the fake LLM server, and `ragbench qualify`.

Tests marked "issue 10 #k" failed on the code before the fix (commit 9728da8).

    python -m pytest -q tests/test_triad.py
    RAGBENCH_SLOW=1 python -m pytest -q tests/test_triad.py -k local    # also a smoke run on the offline local model
"""
import contextlib, json, os, random, re, signal, subprocess, sys, time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Chunk, QAItem, RunDir, read_jsonl
from ragbench.corpus import hotpot_chunks, sample_corpus_path
from ragbench.llm import LLMError, make_llm
from ragbench.prompts import parse_chunks
from ragbench.text import candidate_names, mentions
from ragbench.triad import BridgeConfig, SeedPlan, TriadConfig, draft_item, find_bridge, run_triad, validate
from ragbench.triad.judge import CRITERIA
from ragbench.triad.run import _process_seed
from ragbench.triad.judge import _bridge_terms, judge_prompt, _leaks_bridge, _sufficiency_prompts
from ragbench.triad.write import QAPair, generation_prompt
from ragbench.cli import main

SHARED = ROOT.parent / "shared" / "data"
HOTPOT = SHARED / "hotpotqa" / "hotpotqa_train100.json"
MUSIQUE = SHARED / "musique" / "musique_train100.json"
GITDOCS = SHARED / "gitdocs" / "git_docs.jsonl"
LONELY = Chunk(id="c-lonely", doc_id="lonely", text="only lower case words here, about nothing in particular at all.", meta={})


# ---------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def corpus():
    if not HOTPOT.exists(): pytest.fail(f"HotpotQA sample not found at {HOTPOT} (../shared/data beside the checkout)")
    chunks = hotpot_chunks(HOTPOT, 12)
    return chunks, {c.meta["title"]: c for c in chunks}


@pytest.fixture(scope="module")
def index(corpus, tmp_path_factory):
    from ragbench.index import ChunkIndex
    chunks, _ = corpus
    return ChunkIndex.build(tmp_path_factory.mktemp("triad") / "db", [*chunks, LONELY], "hash", progress=False)


@pytest.fixture
def lilu(corpus):
    return corpus[1]["Lilu (mythology)"], corpus[1]["Alû"]


# ---------------------------------------------------------------------------------------------- a scripted LLM

def verdict(**fails) -> dict:
    "A judge reply in the schema's order: per criterion a reason, then the verdict; `fails` = {criterion: reason}."
    out = {}
    for c in CRITERIA:
        out[f"{c}_reason"] = fails.get(c, {"quality": "The premise holds and both passages state the facts used.",
                                           "retrievable": "Both entities are named, so a search finds both passages.",
                                           "multi_hop": "Each passage supplies one of the two facts compared.",
                                           "unambiguous": "Only one reading and one correct answer."}[c])
        out[c] = c not in fails
    return {**out, "temporal": False}


GOOD = verdict()


def groups(req, sufficient=lambda part: False, reason="It lacks the facts of the other passage.") -> dict:
    "A reply to the every-passage-needed check: the verdict on the one group of passages the prompt shows."
    return {"reason": reason, "sufficient": bool(sufficient(req.prompt))}


def entity_reply(cs):
    "The entity answer over one seed's passages: the names of each, the candidates naming passage 1's, what they share."
    names = [candidate_names(x, t) for _, t, x in cs]
    picked = [i + 1 for i in range(1, len(cs)) if any(mentions(f"{cs[i][1]}\n{cs[i][2]}", n) for n in names[0])]
    others = [cs[p - 1] for p in picked[:1]] or cs[1:]       # the candidate it picks (issue 19 #3), else all
    shared = [n for n in names[0] if all(mentions(f"{t}\n{x}", n) for _, t, x in others)]
    return {"entities_per_chunk": names, "partners": picked, "shared": shared[:2], "category": "", "bridge_topic": (shared or [""])[0]}


def default_reply(req):
    "A model that does everything right: shared names, template question, accept, label every third candidate."
    cs = parse_chunks(req.prompt)
    if req.stage == "triad.entities" and "separate tasks" in req.prompt:      # several seeds in one call (issue 42)
        sizes = [int(n) for n in re.findall(r"^Task \d+ \((\d+) passages\): ", re.sub(r"<chunk\s.*?</chunk>", "", req.prompt, flags=re.S), re.M)]
        return {"tasks": [entity_reply(cs[sum(sizes[:i]):sum(sizes[:i + 1])]) for i in range(len(sizes))]}
    if req.stage == "triad.entities": return entity_reply(cs)
    if req.stage == "triad.generate":
        if 'exactly "yes" or "no"' in req.prompt:
            return {"question": f"Was {cs[0][1]} documented before {cs[1][1]}?", "answer": "yes"}
        return {"question": f"Which is older, {cs[0][1]} or {cs[1][1]}?", "answer": cs[0][1]}
    if req.stage == "triad.judge": return {**GOOD, "temporal": True}
    if req.stage == "triad.sufficiency": return groups(req)
    if req.stage == "triad.labels":
        cand = parse_chunks(req.prompt.split("Candidate passages:")[1])
        out = {"labels": [{"chunk_id": i, "relevant": k % 3 == 0, "reason": ""} for k, (i, _, _) in enumerate(cand)]}
        if req.schema_name == "_LabelsAndTemporal": out |= {"temporal_reason": "it orders two dates", "temporal": True}
        return out
    if req.stage == "triad.unanswerable": return {"answers_question": False, "reason": "no"}
    if req.stage == "triad.temporal": return {"reason": "it orders two dates", "temporal": True}
    raise AssertionError(f"unexpected stage {req.stage}")


class Script:
    "Queued replies per stage (the last one repeats; callables are called); other stages use `default_reply`."
    def __init__(self, **queues):
        self.queues, self.requests = {k: list(v) for k, v in queues.items()}, []

    def __call__(self, req):
        self.requests.append(req)
        q = self.queues.get(req.stage.split(".")[-1])
        if not q: return default_reply(req)
        r = q.pop(0) if len(q) > 1 else q[0]
        return r(req) if callable(r) else r

    def calls(self, stage): return sum(r.stage == f"triad.{stage}" for r in self.requests)


def fake(script, **kw): return make_llm("fake", responder=script, **kw)


def _validate(chunks, script, kind="intersection", binary=False, bridge="Lilu", **cfg):
    b = BridgeConfig(seed_id=chunks[0].id, chunk_ids=[c.id for c in chunks], bridge_topic=bridge)
    llm = fake(script)
    it = draft_item(b, SeedPlan(seed_id=chunks[0].id, kind=kind, binary=binary))
    return validate(it, list(chunks), gen_llm=llm, judge_llm=llm, cfg=TriadConfig(**cfg)), llm


# ---------------------------------------------------------------------------------------------- bridge

def test_shared_entity_found(index, lilu):
    s = Script()
    b = find_bridge(lilu[0].id, index, fake(s), TriadConfig(neighbours_k=30))
    assert b.via == "shared" and b.entity_calls == 1 and b.chunk_ids[0] == lilu[0].id and len(set(b.chunk_ids)) == 2
    assert any(mentions(b.bridge_topic, n) or mentions(n, b.bridge_topic) for n in ("Lilu", "Alû", "Akkadian"))
    assert s.calls("entities") == 1


def test_no_shared_entity_fallback_finds_chunk(index, lilu):
    seed = lilu[0]
    hits = [h for h in index.neighbours(seed.id, k=50)]
    ent = next(n for n in candidate_names(seed.text) if any(mentions(h.text, n) for h in hits))
    s = Script(entities=[{"entities_per_chunk": [[ent], ["Nothing Shared"]], "shared": [], "category": "", "bridge_topic": ""}])
    b = find_bridge(seed.id, index, fake(s), TriadConfig())
    assert (b.via, b.bridge_topic, b.entity_calls) == ("fallback", ent, 1)
    assert b.chunk_ids[0] == seed.id and b.chunk_ids[1] != seed.id and mentions(index.get(b.chunk_ids[1]).text, ent)


def test_fallback_fails_moves_to_next_seed(index, lilu, tmp_path):
    s = Script()
    cfg = TriadConfig(n=1, seeds=[LONELY.id, lilu[0].id], types=["comparison"], binary_share=0.0, neighbours_k=30)
    summary = run_triad(index, fake(s), cfg, tmp_path / "run", progress=False)
    seeds = [json.loads(l) for l in open(tmp_path / "run" / "seeds.jsonl")]
    assert [(r["seed"], r["outcome"]) for r in seeds] == [(LONELY.id, "no_bridge"), (lilu[0].id, "accepted")]
    # one entity request (issue 41: no pre-check), nothing found; issue 42: the two seeds share it, counted in the task
    # of the seed that sent it (either may get there first)
    sent = [r for r in s.requests if r.stage == "triad.entities"]
    assert len(sent) == 1 and all(c in sent[0].prompt for c in (LONELY.id, lilu[0].id))
    assert sum(r["usage"]["calls"] for r in seeds) == len(s.requests)          # each request counted in one task
    assert summary["accepted"] == 1 and summary["seeds_by_outcome"] == {"no_bridge": 1, "accepted": 1}


def test_comparison_pair_reaches_the_entity_call_and_bridges_by_kind(index):
    "issue 10 #1: two magazines with no shared name reach the LLM, whose shared kind bridges a comparison."
    a = Chunk(id="m1", doc_id="m1", text="The Woman's Viewpoint was a woman's magazine founded in Texas in 1923.", meta={"title": "The Woman's Viewpoint"})
    b = Chunk(id="m2", doc_id="m2", text="Pick Me Up! is a British weekly women's magazine published by IPC Media.", meta={"title": "Pick Me Up!"})
    class Two:
        def get(self, cid): return {"m1": a, "m2": b}[cid]
        def neighbours(self, cid, k=10):
            from ragbench.index import Hit
            o = b if cid == "m1" else a
            return [Hit(chunk_id=o.id, doc_id=o.doc_id, text=o.text, score=0.5, meta=o.meta)]
    s = Script(entities=[{"entities_per_chunk": [["The Woman's Viewpoint", "Texas"], ["Pick Me Up!", "IPC Media"]],
                          "shared": [], "category": "women's magazine", "bridge_topic": "women's magazine"}])
    got = find_bridge("m1", Two(), fake(s), TriadConfig(neighbours_k=1), kind="comparison")
    assert s.calls("entities") == 1 and got.via == "category" and got.bridge_topic == "women's magazine"


def test_comparison_candidates_come_from_other_documents(tmp_path):
    """issue 41: a comparison seed of a Git page is offered `comparison_offer_k` chunks of other pages, none of its own
    (the 4 nearest, offered before, were mostly of the seed's own page: 13 of 17 seeds here)."""
    from ragbench.corpus import chunk_documents, load_documents
    from ragbench.index import ChunkIndex
    from ragbench.triad.bridge import neighbourhood
    chunks = list(chunk_documents(list(load_documents(GITDOCS))[:20]))
    idx, cfg = ChunkIndex.build(tmp_path / "db", chunks, "hash", progress=False), TriadConfig()
    hoods = [neighbourhood(c.id, idx, cfg, "comparison") for c in chunks[::5]]
    own = [h.chunk_id for hood in hoods for h in hood.partners if h.doc_id == hood.seed.doc_id]
    assert len(hoods) >= 15 and not own, f"{len(own)} candidates of the seed's own page"
    assert all(len(hood.partners) == cfg.comparison_offer_k for hood in hoods)


def test_the_entity_call_sees_several_candidates_and_its_pick_is_the_pair(index, lilu):
    "issue 19 #3: the index's candidates reach the LLM (offer_k of them), and the partner it picks is the configuration."
    s = Script(entities=[lambda req: {"entities_per_chunk": [], "partners": [3], "shared": ["Lilu"], "category": "", "bridge_topic": "Lilu"}])
    b = find_bridge(lilu[0].id, index, fake(s), TriadConfig(), kind="composition")
    asked = [r.prompt for r in s.requests if r.stage == "triad.entities"]
    shown = [cid for cid, _, _ in parse_chunks(asked[0])]
    assert len(asked) == 1 and len(shown) == 1 + TriadConfig().offer_k            # the seed and 4 candidates, not one partner
    assert b.chunk_ids == [lilu[0].id, shown[2]] and b.via == "shared"          # passage 3, as the LLM picked


def test_comparison_candidates_are_other_things_not_those_sharing_a_name(index, lilu):
    """issue 19 #3, issue 41: a comparison's candidates are its nearest neighbours (by the vectors) that are other
    things: pages naming the seed (Lilu) come last, and no candidate is chosen for sharing a capitalised name."""
    from ragbench.triad.bridge import chunk_text, neighbourhood
    cfg = TriadConfig()
    others = [h.chunk_id for h in neighbourhood(lilu[0].id, index, cfg).distinct if not mentions(chunk_text(h), "Lilu")]
    got = [h.chunk_id for h in neighbourhood(lilu[0].id, index, cfg, "comparison").partners]
    assert got == others[: cfg.comparison_offer_k] and len(got) == cfg.comparison_offer_k


def test_boilerplate_names_never_bridge_and_partners_can_come_from_other_documents(git_index):
    "issue 19 #3: on the Git docs 'Git'/'NAME' (in most documents) link nothing; other_documents keeps the seed's own document out."
    from ragbench.triad.bridge import boilerplate_names, shared_name
    common = boilerplate_names(git_index)
    assert {"NAME", "DESCRIPTION"} <= common or "Git" in common, sorted(common)
    llm = make_llm("template")
    seeds = git_index.sample_ids(24, seed=3)
    cfg = TriadConfig(other_documents=True)
    found = [b for i, sid in enumerate(seeds) if (b := find_bridge(sid, git_index, llm, cfg, ("comparison", "composition")[i % 2]))]
    assert found and all(len({c.doc_id for c in b.chunks}) == len(b.chunks) for b in found)
    assert not any(b.bridge_topic.lower() in {n.lower() for n in common} for b in found)
    a, b = git_index.get_many(seeds[:2])
    assert shared_name(a, b, common) not in common


# ---------------------------------------------------------------------------------------------- write + judge

def test_accepted_at_once_end_to_end(index, lilu):
    s = Script()
    cfg = TriadConfig(types=["comparison"], neighbours_k=30, binary_share=0.0)
    rec, keep, drop = _process_seed(SeedPlan(seed_id=lilu[0].id, kind="comparison", binary=False), index, fake(s), cfg)
    item = keep[0]
    assert rec["outcome"] == "accepted" and item.status == "accepted" and len(item.attempts) == 1
    assert item.attempts[0].sufficiency == [False, False] and item.attempts[0].judge["multi_hop"] is True
    assert [c.source for c in item.contexts[:2]] == ["gold", "gold"] and item.difficulty in ("easy", "medium", "hard")
    assert len({c.chunk_id for c in item.contexts}) == len(item.contexts)
    assert item.temporal is True and item.models["judge"] == "fake"
    # calls: 1 entity + 1 generate + 1 judge + 1 check per group (2) + labels in batches of 32, the first also asking
    # the temporal label (issue 42) + the whole-index check of the unanswerable variant (on by default since issue 19)
    n_cand = len(item.contexts) - 2
    assert [r.stage for r in s.requests][:5] == ["triad.entities", "triad.generate", "triad.judge", "triad.sufficiency", "triad.sufficiency"]
    assert s.calls("temporal") == 0 and "temporal" not in item.attempts[0].judge
    assert item.meta["temporal_reason"] == "it orders two dates"
    assert len(s.requests) == 5 + -(-n_cand // 32) + s.calls("unanswerable")
    if len(keep) > 1:
        v = keep[1]
        assert not v.answerable and v.meta["variant_of"] == item.id and all(c.relevant is False or c.source == "gold" for c in v.contexts)


def test_rejected_then_feedback_then_accepted(lilu):
    bad = verdict(multi_hop="The Alû passage alone answers it; ask something that needs the Lilu passage.")
    q1 = {"question": "Which class of Akkadian demons includes the Alû?", "answer": "wind demons"}
    q2 = {"question": "Which Akkadian word for a spirit is related to the Alû demon?", "answer": "lilu"}
    s = Script(generate=[q1, q2], judge=[bad, GOOD])
    it, _ = _validate(lilu, s)
    assert it.status == "accepted" and [a.failed_check for a in it.attempts] == ["judge_multi_hop", None]
    assert it.question == q2["question"] and it.attempts[0].feedback.endswith(bad["multi_hop_reason"])
    revision = [r for r in s.requests if r.stage == "triad.generate"][1].prompt
    assert bad["multi_hop_reason"] in revision and q1["question"] in revision
    assert s.calls("sufficiency") == 2                # one call per group (issue 19 #2), skipped on the rejected attempt


def test_rejected_twice_dropped_with_both_reasons(index, lilu, tmp_path):
    r1 = verdict(unambiguous="Two demons fit the description.")
    r2 = verdict(quality="The premise is wrong about the Alû.")
    s = Script(judge=[r1, r2])
    cfg = TriadConfig(n=1, seeds=[lilu[0].id], types=["comparison"], binary_share=0.0, neighbours_k=30)
    summary = run_triad(index, fake(s), cfg, tmp_path / "run", progress=False)
    rej = list(RunDir(tmp_path / "run").read("rejected.jsonl", QAItem))
    assert summary["accepted"] == 0 and len(rej) == 1 and rej[0].status == "rejected"
    assert [a.feedback for a in rej[0].attempts] == [f"unambiguous: {r1['unambiguous_reason']}", f"quality: {r2['quality_reason']}"]
    assert [a.failed_check for a in rej[0].attempts] == ["judge_unambiguous", "judge_quality"]
    assert summary["failed_checks"] == {"judge_unambiguous": 1, "judge_quality": 1}
    assert summary["pass_rate_by_check"]["judge"] == {"reached": 2, "passed": 0, "rate": 0.0}
    assert summary["by_type"]["comparison"]["attempts"] == 2 and summary["by_type"]["comparison"]["accepted"] == 0
    assert not (tmp_path / "run" / "dataset.jsonl").read_text().strip()


def test_approving_reasons_are_not_vetoed(lilu):
    "issue 10 #2: plausible approving reasons (once vetoed by a regex) no longer reject the question."
    for reason in ("One passage contains the birth year of Lilu, the other that of the Alû.",
                   "It is impossible to answer from a single passage: each gives one of the two facts.",
                   "Unlike a single-hop question, this needs both passages; it avoids vague references."):
        it, _ = _validate(lilu, Script(judge=[{**GOOD, "multi_hop_reason": reason, "quality_reason": reason}]), kind="comparison")
        assert it.status == "accepted", reason


def test_judge_reply_puts_each_reason_before_its_verdict():
    "issue 10 #2: the judge's schema asks, for each criterion, its reason first and then its verdict."
    from ragbench.triad.judge import _JudgeVerdict
    keys = list(_JudgeVerdict.model_json_schema()["properties"])
    assert all(keys.index(f"{c}_reason") + 1 == keys.index(c) for c in CRITERIA), keys
    assert "reason" not in keys                        # no single free-text reason to second-guess


def test_a_judge_that_echoes_the_placeholder_is_no_verdict(lilu):
    "Demo honesty: a reply copying the prompt's placeholder ('one short sentence') is a parse failure, never an approval."
    echo = {**GOOD, **{f"{c}_reason": "one short sentence" for c in CRITERIA}}
    it, llm = _validate(lilu, Script(judge=[echo]), kind="comparison")
    assert it.status == "rejected" and {a.failed_check for a in it.attempts} == {"judge_unparseable"}
    assert llm.usage.by_stage()["triad.judge"]["failures"] == 2
    echo_groups = lambda req: {**groups(req), "reason": "one short sentence"}
    it, _ = _validate(lilu, Script(sufficiency=[echo_groups]), kind="comparison")
    assert it.status == "rejected" and {a.failed_check for a in it.attempts} == {"sufficiency_unparseable"}


def test_both_prompts_carry_the_type_rule_and_the_new_criteria(lilu):
    "issue 10 #3: generator and judge get the question type and its rule; retrievability and 'do not resolve ambiguity'."
    qa = QAPair(question="Which demon class includes the spirit linked to the Akkadian word for a masculine spirit?", answer="wind demons")
    _, gen = generation_prompt(list(lilu), "Lilu", "composition", False, TriadConfig())
    _, jud = judge_prompt(qa, list(lilu), "composition", False, "Lilu")
    for p in (gen, jud):
        assert "Question type: COMPOSITION" in p and '(here "Lilu") must NOT appear' in p
    assert "What the question type says must stay hidden stays hidden" in gen
    assert "An entity that the question type keeps hidden is not a defect" in jud
    assert "retrievable" in jud and "do not resolve an ambiguity by reading the passages" in jud


def test_bridge_terms_flag_the_entity_not_common_words():
    "issue 10 #3: 'United' of the bridge 'United States' must not block a question about United Airlines."
    texts = ["The airline moved its hub within the United States.", "United Airlines is based in Chicago."]
    assert _bridge_terms("United States", texts) == ["United States"]
    assert _leaks_bridge("Which airline is based in the city where United Airlines was founded?", "United States", texts) is None
    assert _leaks_bridge("Which airline is based in the United States?", "United States", texts) == "United States"


def test_composition_leaking_bridge_rejected(lilu):
    leak = {"question": "Which Akkadian spirit is related to Lilu?", "answer": "Alû"}
    ok = {"question": "Which Mesopotamian demon is linked to an Akkadian word for a masculine spirit?", "answer": "Alû"}
    s = Script(generate=[leak, ok])
    it, _ = _validate(lilu, s, kind="composition", bridge="Lilu")
    assert [a.failed_check for a in it.attempts] == ["bridge_leak", None] and it.status == "accepted"
    assert s.calls("judge") == 1                      # the leak was caught without a judge call


def test_three_chunk_question_answerable_from_two_is_rejected(corpus):
    "issue 10 #4: with 3 chunks, a question that two of them answer without the third is rejected."
    _, by = corpus
    three = [by["Lilu (mythology)"], by["Alû"], by["Maha Sona"]]
    two_suffice = lambda part: 'title="Lilu (mythology)"' in part and 'title="Alû"' in part
    s = Script(sufficiency=[lambda req: groups(req, two_suffice, "Lilu and Alû together state it.")])
    it, _ = _validate(three, s, kind="comparison", bridge="Lilu")
    assert it.status == "rejected" and {a.failed_check for a in it.attempts} == {"sufficiency"}
    assert it.attempts[0].sufficiency == [True]             # issue 42: the first pair answers, the others are not asked
    assert "without 'Maha Sona'" in it.attempts[0].feedback
    assert "every one of the 3 passages" in [r for r in s.requests if r.stage == "triad.generate"][0].prompt
    last_two = lambda part: 'title="Alû"' in part and 'title="Maha Sona"' in part
    s = Script(sufficiency=[lambda req: groups(req, last_two, "Alû and Maha Sona together state it.")])
    it, _ = _validate(three, s, kind="comparison", bridge="Lilu", max_rounds=1)
    assert it.status == "rejected" and it.attempts[0].sufficiency == [False, False, True]
    assert "without 'Lilu (mythology)'" in it.attempts[0].feedback
    asked = [r.prompt for r in s.requests if r.stage == "triad.sufficiency"]
    assert [p.count("<chunk id=") for p in asked] == [2, 2, 2]                  # the 3 pairs, each in its own call


def test_single_chunk_sufficient_rejected(lilu):
    s = Script(sufficiency=[lambda req: groups(req, lambda part: 'title="Alû"' in part, "It states the class.")])
    it, _ = _validate(lilu, s, kind="comparison")
    assert it.status == "rejected" and {a.failed_check for a in it.attempts} == {"sufficiency"}
    assert it.attempts[0].sufficiency == [False, True] and "'Alû' alone answers" in it.attempts[0].feedback


def test_each_group_is_judged_in_its_own_call_seeing_only_its_passages(lilu):
    "issue 19 #2: check 2 asks once per group, and each prompt holds that group's passages and no other."
    s = Script()
    it, _ = _validate(lilu, s, kind="comparison")
    asked = [r.prompt for r in s.requests if r.stage == "triad.sufficiency"]
    assert it.status == "accepted" and len(asked) == 2
    assert [[c.id in p for c in lilu] for p in asked] == [[True, False], [False, True]]
    assert [[c.id in p for c in lilu] for _, p in _sufficiency_prompts("Q?", list(lilu))] == [[True, False], [False, True]]


def test_unparseable_judge_counted_retried_never_accepted(lilu):
    s = Script(judge=["Looks great, accept it!"])
    it, llm = _validate(lilu, s, kind="comparison")
    assert it.status == "rejected" and [a.failed_check for a in it.attempts] == ["judge_unparseable"] * 2
    row = llm.usage.by_stage()["triad.judge"]
    assert row["failures"] == 2 and row["repairs"] == 4 and s.calls("judge") == 6 and s.calls("sufficiency") == 0
    it, llm = _validate(lilu, Script(judge=["{broken", GOOD]), kind="comparison")
    assert it.status == "accepted" and llm.usage.by_stage()["triad.judge"]["repairs"] == 1


def test_garbage_everywhere_is_rejection_not_crash(index, tmp_path):
    rng = random.Random(0)
    junk = ["", "not json", "{", '{"question": 3}', '{"labels": "x"}', '[]', '{"quality": "maybe"}', "null"]
    summary = run_triad(index, fake(lambda req: rng.choice(junk)), TriadConfig(n=2, max_seeds=6, concurrency=3), tmp_path / "run", progress=False)
    # issue 24: a model whose replies never parse stops the run early, naming the cause (it used to spend every seed
    # and end with "plan exhausted"); unparseable replies are failed seeds, never a crash and never accepted
    assert summary["accepted"] == 0 and summary["seeds_tried"] + summary["tasks"]["errors"] <= 6
    assert summary["stop_reason"].startswith("the model's replies never parse"), summary["stop_reason"]


def test_one_question_written_for_several_seeds_is_in_the_dataset_once(index, tmp_path):
    "issue 25: a model that writes the same question for every seed gives one dataset item; the repeats go to duplicates.jsonl and do not count."
    same = lambda req: {"question": "Which of the two was written first?", "answer": "the first"}
    cfg = TriadConfig(types=["comparison"], n=3, max_seeds=6, binary_share=0.0, unanswerable=False)
    summary = run_triad(index, fake(Script(generate=[same])), cfg, tmp_path / "run", progress=False).summary
    ds = [QAItem.model_validate_json(l) for l in open(tmp_path / "run" / "dataset.jsonl")]
    assert [i.question for i in ds] == ["Which of the two was written first?"]          # before: three identical items
    dups = [QAItem.model_validate_json(l) for l in open(tmp_path / "run" / "duplicates.jsonl")]
    # issue 42: a seed whose draft repeats the question of a finished seed before it pays for no check ("repeat")
    rej = [QAItem.model_validate_json(l) for l in open(tmp_path / "run" / "rejected.jsonl")]
    repeats = [i for i in rej if i.attempts and i.attempts[-1].failed_check == "repeat"]
    assert summary["accepted"] == 1 and summary["duplicates"] == len(dups) and len(dups) + len(repeats) >= 2
    assert summary["stop_reason"] != "target reached"                                  # one distinct question is not three
    seeds = [json.loads(l) for l in open(tmp_path / "run" / "seeds.jsonl")]
    assert sum(r["outcome"] == "duplicate" for r in seeds) == len(dups)

# ---------------------------------------------------------------------------------------------- the run: fake server

@contextlib.contextmanager
def fake_rules(judge_pass: float = 1.0, sufficient_p: float = 0.0):
    "Stand-in rules over TRIAD's own: a tunable judge and sufficiency (the prompts restored on exit)."
    from ragbench.prompts import PROMPTS, register_prompt, set_stand_in
    saved = [PROMPTS["triad.judge"], PROMPTS["triad.sufficiency"]]
    set_stand_in("triad.judge", {"multi_hop": lambda ctx: ctx.rng.random() < judge_pass})
    set_stand_in("triad.sufficiency", {"sufficient": lambda ctx: ctx.rng.random() < sufficient_p})
    try: yield
    finally:
        for t in saved: register_prompt(t)


def fake_script_hash() -> str:
    """The hash of what decides the fake server's TRIAD replies: `fake_rules`, the server's reply path, the template
    model, and the stand-in rules of the stages that decide acceptance (entities, generate, judge, sufficiency)."""
    import hashlib, inspect
    import ragbench.llm.template as template
    from ragbench.prompts import PROMPTS
    from ragbench.testing.server import FakeLLMServer
    parts = [inspect.getsource(fake_rules), inspect.getsource(FakeLLMServer._reply),
             inspect.getsource(FakeLLMServer._scripted), inspect.getsource(template)]
    for name in ("triad.entities", "triad.generate", "triad.judge", "triad.sufficiency"):
        parts += [f"{name}.{k}:" + inspect.getsource(f) for k, f in sorted((PROMPTS[name].stand_in or {}).items())]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# issue 42: bench_triad.py's requests and tokens per accepted question are measured against these replies; a fake that
# accepts more would lower them without a cheaper pipeline. Change this pin only with a new "before" measured on it.
FAKE_SCRIPT_HASH = "24319e874a6f938b"   # the same on main at dfbff06 (the "before")

def test_the_fake_script_is_pinned():
    "issue 42: the fake's scripted TRIAD replies are the ones the cost figures were measured against."
    assert fake_script_hash() == FAKE_SCRIPT_HASH, "the fake's replies changed: re-measure bench_triad.py's before"


def triad_cli(argv): return main(["triad", *argv])


def _cli_cmd(db, out, url, *extra):
    return [sys.executable, "-m", "ragbench.cli", "triad", "--db", str(db), "--out", str(out), "--llm", f"openai:{url}/v1@fake-model", *extra]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def git_index(tmp_path_factory):
    "The bundled Git docs sample, hash embedder (what the CLI contract and the measurements use)."
    from ragbench.corpus import chunk_documents, load_documents
    from ragbench.index import ChunkIndex
    return ChunkIndex.build(tmp_path_factory.mktemp("git") / "db", chunk_documents(load_documents(sample_corpus_path())), "hash", progress=False)


def test_config_file_and_role_reach_the_run(git_index, tmp_path):
    "issue 18: --config FILE sets any TriadConfig field, --role the generator's persona; a flag given overrides the file."
    from ragbench.testing import FakeLLMServer
    cfg = tmp_path / "triad.yaml"
    cfg.write_text("role: a release engineer\nmax_rounds: 1\nlabel_batch: 4\nn_chunks: 4\n")
    with FakeLLMServer() as srv:
        out = tmp_path / "run"
        assert triad_cli(["--db", str(git_index.db_dir), "--out", str(out), "--llm", f"openai:{srv.url}/v1@fake-model", "--n", "1",
                          "--config", str(cfg), "--role", "a Git maintainer", "--no-unanswerable", "--n-chunks", "3"]) == 0
    c = json.loads((out / "manifest.json").read_text())["config"]
    assert (c["role"], c["max_rounds"], c["label_batch"], c["unanswerable"], c["n_chunks"]) == ("a Git maintainer", 1, 4, False, 3)
    cfg.write_text("max_rounds: 0\n")
    assert triad_cli(["--db", str(git_index.db_dir), "--out", str(tmp_path / "bad"), "--n", "1", "--config", str(cfg)]) == 2
    assert not (tmp_path / "bad").exists()                                      # refused: no run directory


def test_summary_counts_every_request_and_keeps_plan_order(git_index, tmp_path):
    "issue 10 #5: without kills, the summary's calls equal the server's request count; the dataset is the plan's first n."
    from ragbench.testing import FakeLLMServer
    runs = []
    for k in range(2):
        with FakeLLMServer(latency=0.02) as srv:
            out = tmp_path / f"run{k}"
            assert triad_cli(["--db", str(git_index.db_dir), "--out", str(out), "--llm", f"openai:{srv.url}/v1@fake-model",
                              "--n", "8", "--concurrency", "8", "--seed", "3"]) == 0
            s = json.loads((out / "summary.json").read_text())
            assert s["llm"]["calls"] == srv.stats()["requests"], (s["llm"]["calls"], srv.stats())
            # issue 42: requests and tokens per accepted question and per attempt, by stage
            assert s["usage_per_accepted"]["calls"] == round(s["llm"]["calls"] / s["accepted"], 2)
            assert set(s["usage_per_attempt"]["by_stage"]) == set(s["usage_by_stage"])
            runs.append(out)
    ids = [[json.loads(l)["id"] for l in open(o / "dataset.jsonl")] for o in runs]
    assert ids[0] == ids[1]                                                     # same seed, same items, in plan order
    seeds = [json.loads(l) for l in open(runs[0] / "seeds.jsonl")]
    accepted = [r["position"] for r in seeds if r["outcome"] == "accepted"]
    assert len(accepted) == 8 and all(r["outcome"] in ("overflow", "duplicate", "rejected", "no_bridge") for r in seeds if r["position"] > max(accepted))
    s = json.loads((runs[0] / "summary.json").read_text())
    finished_q = s["by_type"]; acc = sum(v["accepted"] for v in finished_q.values())
    assert acc == 8 + s["seeds_by_outcome"].get("overflow", 0) + s["seeds_by_outcome"].get("duplicate", 0)  # acceptance counts every finished seed


def test_real_calls_per_accepted_question_at_most_8(git_index, tmp_path):
    "issue 10 #6: against the fake server's own counter, at most 10 requests per accepted question."
    from ragbench.testing import FakeLLMServer
    with FakeLLMServer(latency=0.02) as srv:
        assert triad_cli(["--db", str(git_index.db_dir), "--out", str(tmp_path / "run"), "--llm", f"openai:{srv.url}/v1@fake-model",
                          "--n", "12", "--concurrency", "8"]) == 0
        served = srv.stats()["requests"]
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    # pin changed from 8 to 10 (issue 19 #2): check 2 now asks once per group, each alone (99 -> 115 requests here);
    # and (issue 19 #4/#5) the temporal label (its own classifier call) and the whole-index check of the unanswerable
    # variant (on by default) cost about one call each per accepted question on top: counted apart
    extra = sum((s["usage_by_stage"].get(k) or {}).get("calls", 0) for k in ("triad.temporal", "triad.unanswerable"))
    # and (issue 24) a labelling reply that leaves candidates out is asked again, never read as "not relevant": with the
    # fake server's labels that adds about one call per accepted question (measured after the merges: 147-150 requests,
    # 10.1-10.6 core and 12.3-12.5 in all per accepted; labels 30 calls for 12 items): pins 10 -> 12 and 12 -> 14
    assert s["accepted"] == 12 and (served - extra) / 12 <= 12 and served / 12 <= 14, (served, s["usage_by_stage"])
    assert set(s["by_type"]["comparison"]) >= {"bridge_via", "same_document_share"} and "same_document_share" in s


def test_resume_after_kill_no_duplicates_cache_hits(index, tmp_path):
    from ragbench.testing import FakeLLMServer
    out = tmp_path / "run"
    with fake_rules(), FakeLLMServer(latency=0.05) as srv:
        cmd = _cli_cmd(index.db_dir, out, srv.url, "--n", "6", "--concurrency", "4", "--binary-share", "0",
                       "--types", "comparison,intersection")
        p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tasks = out / "tasks.jsonl"
        t0 = time.time()
        while time.time() - t0 < 120 and p.poll() is None:
            if tasks.exists() and len(list(read_jsonl(tasks))) >= 3: break
            time.sleep(0.05)
        assert p.poll() is None, f"finished before the kill: {p.communicate()}"
        p.send_signal(signal.SIGKILL); p.wait()
        done = list(read_jsonl(tasks))          # the kill may tear the line being written: as a resume, drop it
        before = len(done)
        # replies the killed run received for seeds it had not finished: those, and only those, the resume can hit in the cache
        finished = sum(r["usage"]["calls"] for r in done)
        replied = sum('"e":"reply"' in l for l in (out / "calls.jsonl").read_text().splitlines())
        assert 3 <= before
        r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
        served = srv.stats()["requests"]
    assert r.returncode == 0, r.stderr
    assert "dataset:" in r.stdout and str(out / "dataset.jsonl") in r.stdout
    items = [json.loads(l) for l in open(out / "dataset.jsonl")]
    ids = [i["id"] for i in items]
    seed_ids = [json.loads(l)["seed"] for l in open(out / "seeds.jsonl")]
    assert len(ids) == len(set(ids)) and len(seed_ids) == len(set(seed_ids))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accepted"] == sum(i["answerable"] for i in items) == 6
    # killed seeds' calls come from the cache when the kill caught replies of unfinished seeds (timing: under load the
    # kill can land when every unfinished seed is still waiting for its first reply)
    assert summary["llm"]["cached"] > 0 or replied <= finished, (replied, finished)
    assert summary["llm"]["calls"] >= served                   # counted before sending: may over-count a kill, never under


def test_budget_stops_cleanly_then_continues(index, tmp_path, capsys):
    from ragbench.testing import FakeLLMServer
    out = tmp_path / "run"
    with fake_rules(), FakeLLMServer() as srv:
        args = ["--db", str(index.db_dir), "--out", str(out), "--llm", f"openai:{srv.url}/v1@fake-model", "--n", "3",
                "--binary-share", "0", "--types", "comparison", "--concurrency", "2"]
        assert triad_cli([*args, "--max-calls", "7"]) == 0
        err = capsys.readouterr().err
        assert "budget spent" in err and "re-run the same command" in err
        s = json.loads((out / "summary.json").read_text())
        assert s["stop_reason"].startswith("budget spent") and s["llm"]["calls"] <= 7
        assert triad_cli(args) == 0
        s = json.loads((out / "summary.json").read_text())
        assert s["accepted"] == 3 and s["stop_reason"] == "target reached"


def test_max_calls_holds_across_resumes(index, tmp_path, capsys):
    "The run's meter is persisted (calls.jsonl): re-running the same --max-calls N command never sends more than N in all."
    from ragbench.testing import FakeLLMServer
    out = tmp_path / "run"
    with fake_rules(judge_pass=0.3), FakeLLMServer() as srv:
        args = ["--db", str(index.db_dir), "--out", str(out), "--llm", f"openai:{srv.url}/v1@fake-model", "--n", "20",
                "--binary-share", "0", "--types", "comparison", "--concurrency", "2", "--max-calls", "9"]
        for _ in range(3): assert triad_cli(args) == 0
        assert srv.stats()["requests"] <= 9
    assert "budget spent" in capsys.readouterr().err
    journal = [json.loads(l) for l in open(out / "calls.jsonl")]
    assert sum(e["e"] == "send" for e in journal) == srv.stats()["requests"]


# ---------------------------------------------------------------------------------------------- errors a user can act on

def test_every_seed_failing_exits_1_with_the_error(index, tmp_path, capsys, monkeypatch):
    "issue 12 #8: an unusable LLM is exit status 1 with its first error, not 'raise --max-seeds'."
    import ragbench.spine as spine    # issue 18: every run's LLMs are made by the spine's LLMPool
    monkeypatch.setattr(spine, "make_llm", lambda spec, **k: fake(lambda req: LLMError("connection refused (scripted)")))
    assert triad_cli(["--db", str(index.db_dir), "--out", str(tmp_path / "run"), "--n", "3", "--llm", "fake"]) == 1
    err = capsys.readouterr().err
    assert "every seed failed; first error:" in err and "connection refused" in err and "--max-seeds" not in err


def test_empty_index_and_unknown_spec_are_user_errors(tmp_path, capsys):
    "issue 12 #8: an empty index, and --estimate with an unknown spec, exit 2 naming the problem."
    import lancedb, pyarrow as pa
    from ragbench.index import ChunkIndex
    db = tmp_path / "db"
    ChunkIndex.build(db, [Chunk(id="c1", doc_id="d", text="One chunk about Git.", meta={})], "hash", progress=False)
    tbl = lancedb.connect(str(db)).open_table("chunks"); tbl.delete("true")
    assert triad_cli(["--db", str(db), "--out", str(tmp_path / "o"), "--n", "2", "--llm", "fake"]) == 2
    assert "is empty" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert triad_cli(["--db", str(db), "--out", str(tmp_path / "o"), "--n", "2", "--estimate", "--llm", "foo:bar"]) == 2
    assert "unknown LLM spec 'foo:bar'" in capsys.readouterr().err


def test_estimate_spends_nothing(index, tmp_path, capsys):
    assert triad_cli(["--db", str(index.db_dir), "--out", str(tmp_path / "est"), "--n", "20", "--estimate",
                      "--llm", "gemini:gemini-2.5-flash", "--judge-llm", "gemini:gemini-2.5-flash-lite"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["total"]["calls"] > 20 and est["total"]["cost_usd"] > 0 and not (tmp_path / "est").exists()
    assert "triad.temporal" in est["by_stage"]              # its own classifier call since issue 19 (before: folded into the judge)


def test_estimate_prices_every_role_from_the_dated_table(index, tmp_path, capsys):
    "issue 42: each stage has a role and a price from the dated table, a config's `prices` over it; stand-ins: no price."
    from ragbench.llm.usage import PRICES_AS_OF
    cfg = tmp_path / "triad.yaml"
    cfg.write_text("prices:\n  gemini-2.5-flash-lite: [1.0, 2.0]\n")
    assert triad_cli(["--db", str(index.db_dir), "--out", str(tmp_path / "est"), "--n", "20", "--estimate", "--config",
                      str(cfg), "--llm", "gemini:gemini-2.5-flash", "--classify-llm", "gemini:gemini-2.5-flash-lite"]) == 0
    out = capsys.readouterr()
    est, rows = json.loads(out.out), json.loads(out.out)["by_stage"]
    assert {s: r["role"] for s, r in rows.items()} == {
        "triad.entities": "classify", "triad.generate": "generate", "triad.judge": "judge", "triad.sufficiency": "classify",
        "triad.labels": "extract", "triad.temporal": "classify", "triad.unanswerable": "classify"}
    assert rows["triad.sufficiency"]["price_per_1m"] == [1.0, 2.0] and rows["triad.judge"]["price_per_1m"] == [0.3, 2.5]
    assert rows["triad.temporal"]["calls"] > 0               # the classifier is not the labeller: its own call
    assert est["prices_as_of"] == PRICES_AS_OF and f"prices as of {PRICES_AS_OF}" in out.err
    assert {"calls_per_accepted", "tokens_per_accepted", "calls_per_attempt", "tokens_per_attempt"} <= set(est)
    assert {"calls_per_accepted", "tokens_per_accepted", "calls_per_attempt"} <= set(rows["triad.labels"])
    assert triad_cli(["--db", str(index.db_dir), "--out", str(tmp_path / "est"), "--n", "20", "--estimate",
                      "--llm", "template"]) == 0
    out = capsys.readouterr()
    est = json.loads(out.out)
    assert est["total"]["cost_usd"] is None and {r["price_per_1m"] for r in est["by_stage"].values()} == {"no price"}
    assert "no price (a stand-in model)" in out.err
    assert est["by_stage"]["triad.temporal"]["calls"] == 0   # one model labels and classifies: it rides in the label call
    assert triad_cli(["--db", str(index.db_dir), "--out", str(tmp_path / "est"), "--n", "20", "--estimate",
                      "--llm", "gemini:gemini-2.5-flash", "--judge-llm", "gemini:gemini-2.5-flash-lite"]) == 0
    rows = json.loads(capsys.readouterr().out)["by_stage"]  # without --classify-llm the checks stay on the judge's model
    assert rows["triad.sufficiency"]["llm"] == rows["triad.unanswerable"]["llm"] == "gemini:gemini-2.5-flash-lite"


def test_classifier_stages_go_to_the_classify_role(index, lilu):
    "issue 42: entities, sufficiency, the temporal label and the unanswerable check go to `classify`; the rest stay."
    main_s, cls_s = Script(), Script()
    cfg = TriadConfig(types=["comparison"], neighbours_k=30, binary_share=0.0)
    rec, keep, _ = _process_seed(SeedPlan(seed_id=lilu[0].id, kind="comparison", binary=False), index,
                                 {"generate": fake(main_s), "classify": fake(cls_s)}, cfg)
    assert rec["outcome"] == "accepted" and keep[0].temporal is True
    assert {r.stage for r in cls_s.requests} == {"triad.entities", "triad.sufficiency", "triad.temporal",
                                                 "triad.unanswerable"}
    assert {r.stage for r in main_s.requests} == {"triad.generate", "triad.judge", "triad.labels"}
    assert {r.schema_name for r in main_s.requests if r.stage == "triad.labels"} == {"_RelevanceLabels"}
    from ragbench.triad.run import normalise_llms
    gen, judge = fake(Script()), fake(Script())
    assert normalise_llms({"generate": gen, "judge": judge})["classify"] is judge   # the checks' model by default
    assert normalise_llms(gen)["classify"] is gen


def test_a_draft_the_run_already_keeps_pays_for_no_check(lilu):
    "issue 42: a draft repeating a question an earlier seed of the plan brought is not judged, and ends the seed."
    from ragbench.core import QAItem
    from ragbench.gen.base import TaskResult
    from ragbench.llm import arun
    from ragbench.triad.judge import avalidate
    from ragbench.triad.run import TriadMethod, _note_kept, _repeats
    s = Script()
    b = BridgeConfig(seed_id=lilu[0].id, chunk_ids=[c.id for c in lilu], bridge_topic="Lilu")
    it = draft_item(b, SeedPlan(seed_id=lilu[0].id, kind="comparison", binary=False))
    llm = fake(s)
    out = arun(avalidate(it, list(lilu), gen_llm=llm, judge_llm=llm, cfg=TriadConfig(), repeats=lambda q: True))
    assert [a.failed_check for a in out.attempts] == ["repeat"] and out.status == "rejected"
    assert (s.calls("generate"), s.calls("judge"), s.calls("sufficiency")) == (1, 0, 0)
    m = TriadMethod(llm, TriadConfig(n=3))
    kept = QAItem(id="q1", method="triad", kind="comparison", question="Which is older, A or B?", answer="A",
                  status="accepted")
    _note_kept(m, TaskResult(task_id="s", position=5, outcome="accepted", items=[kept]))
    assert _repeats(m, 6, "which is older, A or B") and not _repeats(m, 4, "Which is older, A or B?")
    assert not _repeats(TriadMethod(llm, TriadConfig(n_per_type={"comparison": 2})), 6, "Which is older, A or B?")


# ---------------------------------------------------------------------------------------------- qualify

def test_qualify_against_the_fake_server(tmp_path, capsys):
    "`ragbench qualify` runs TRIAD's two checks on the shipped cases; the fake server approves everything: not qualified."
    from ragbench.testing import FakeLLMServer
    with FakeLLMServer() as srv:
        assert main(["qualify", "--judge-llm", f"openai:{srv.url}/v1@fake-judge", "--n", "12", "--out", str(tmp_path / "q")]) == 0
        served = srv.stats()["requests"]
    out = capsys.readouterr().out
    s = json.loads((tmp_path / "q" / "summary.json").read_text())
    # the judge and one call per group of check 2 (issue 19 #2: each group alone)
    from ragbench.triad.qualify import load_qualify_set
    assert served == s["llm"]["calls"] == sum(1 + len(c.passages) for c in load_qualify_set(n=12)) and s["cases"] == 12
    assert s["verdict"].startswith("not qualified") and out.strip().splitlines()[-1] == s["verdict"]
    assert {"precision", "recall", "false_rejection"} <= set(s["metrics"]["multi_hop"])
    # issue 19 #1: a floor beside it (issue 41: the surface classifier, out of fold, replaces the string baseline),
    # false acceptance per flaw and type, the paper's quantity by its name
    assert s["floor"]["line"].startswith("the surface classifier") and f"floor (no model): {s['floor']['line']}" in out
    assert "lets a flaw kind through above the 20% bar" in s["verdict"]      # 1 of 1 accepted: over the bar, however few
    assert (tmp_path / "q" / "floor.jsonl").exists() and not (tmp_path / "q" / "baseline.jsonl").exists()
    d = s["metrics"]["decision"]
    assert {"false_acceptance_by_flaw", "false_acceptance_by_type", "false_rejection_by_type", "wrong_rejection_share"} <= set(d)
    assert all({"lo", "hi", "n"} <= set(x) for x in d["false_acceptance_by_flaw"].values())
    assert "of its rejections were valid questions (the paper's judge: 10–15% of its rejections)" in s["verdict"]
    assert len((tmp_path / "q" / "qualify.jsonl").read_text().splitlines()) == 12


def _decides(accept, cases):
    "A scripted judge (no model) that accepts a case when `accept(case)` says so; check 2 finds no group sufficient."
    def judge(req):
        if req.stage == "triad.sufficiency": return {"reason": "scripted", "sufficient": False}
        q, a = (re.search(rf"{k}: (.*)\n", req.prompt) for k in ("Question", "Answer"))
        texts = {x for _, _, x in parse_chunks(req.prompt)}
        case = next(c for c in cases if c.question == q.group(1) and a.group(1) == c.answer
                    and texts <= {p["text"] for p in c.passages})
        ok = bool(accept(case))
        return {**{f"{k}_reason": "scripted" for k in CRITERIA}, **{k: ok for k in CRITERIA}, "temporal": False}
    return judge


def test_qualify_bar_has_teeth():
    """issue 41: on the whole shipped set, a judge that lets half the false premises through and one whose decisions
    copy the surface classifier's out-of-fold verdicts are not qualified; a perfect judge is."""
    from ragbench.testing import FakeLLM
    from ragbench.triad.qualify import load_qualify_set, run_qualify, _surface_floor
    cases = load_qualify_set()
    premises = [c.id for c in cases if c.case == "false_premise"]
    floor = dict(zip((c.id for c in cases), _surface_floor(cases)))    # what the classifier says of each case, unseen
    judges = {
        # "perfect" means the known verdicts: this judge alone reads the case's label, and only to answer it right
        "perfect": lambda c: c.expected["valid"],
        # perfect, except that every second false premise passes: 22 of 45 (the old bar, at most half, let it through)
        "half premises": lambda c: c.expected["valid"] or (c.case == "false_premise" and premises.index(c.id) % 2 == 1),
        # no label at all: the floor's own out-of-fold verdict for the case
        "copies the floor": lambda c: floor[c.id],
    }
    runs = {k: run_qualify(FakeLLM(_decides(j, cases))) for k, j in judges.items()}
    assert {k: r["verdict"].split(":")[0] for k, r in runs.items()} == {
        "perfect": "qualified", "half premises": "not qualified", "copies the floor": "not qualified"}
    assert "lets a flaw kind through above the 20% bar: false_premise 49%" in runs["half premises"]["verdict"]
    copy = runs["copies the floor"]
    assert copy["margin"] == pytest.approx(copy["floor"]["margin"]) and 0.3 <= copy["floor"]["margin"] <= 0.6
    assert f"margin {copy['margin']:+.2f} vs {copy['floor']['margin']:+.2f}" in copy["verdict"]
    assert runs["perfect"]["margin"] == 1.0 and "qualifying needs" in runs["perfect"]["verdict"]


def test_qualify_on_too_few_cases_is_uninformative():
    "issue 41: with under 30 cases of a flaw kind, a perfect judge gets no pass: the verdict says so for each kind."
    from ragbench.testing import FakeLLM
    from ragbench.triad.qualify import load_qualify_set, run_qualify
    cases = load_qualify_set(n=84)
    s = run_qualify(FakeLLM(_decides(lambda c: c.expected["valid"], cases)), cases=cases)   # the known verdicts
    assert s["verdict"].startswith("uninformative: ") and "uninformative for that kind (under 30 cases): " in s["verdict"]
    assert "bridge_named (12 cases)" in s["verdict"] and s["floor"]["margin"] is not None

@pytest.mark.skipif(not os.environ.get("RAGBENCH_SLOW"), reason="slow: runs the offline local model (set RAGBENCH_SLOW=1)")
def test_local_model_smoke_run(index, tmp_path):
    "The tiny offline model writes poor questions: the run must end cleanly with rejections, not crash."
    r = subprocess.run([sys.executable, "-m", "ragbench.cli", "triad",
                        "--db", str(index.db_dir), "--out", str(tmp_path / "local"), "--n", "1", "--max-seeds", "2",
                        "--concurrency", "1", "--max-calls", "30"], env=_env(), capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert s["seeds_tried"] == 2 or s["stop_reason"].startswith("budget")
    assert "dataset:" in r.stdout


def test_plan_numbers_become_the_target_per_type(git_index, tmp_path):
    "issue 20: `ragbench triad --n-from-plan PLAN.json` takes `ragbench plan --json`'s n per type as its target per type."
    from ragbench.eval.paired import plan_questions
    from ragbench.testing import FakeLLMServer
    row = plan_questions(1.4, by=None)[0]                       # worst case, one group: the same n for every type
    (tmp_path / "all.json").write_text(json.dumps([row]))
    by_kind = [{**row, "group": "composition", "n_needed": 3}, {**row, "group": "comparison", "n_needed": 1}]
    (tmp_path / "kinds.json").write_text(json.dumps(by_kind))
    with FakeLLMServer() as srv:
        llm = f"openai:{srv.url}/v1@fake-model"
        out = tmp_path / "run"
        assert triad_cli(["--db", str(git_index.db_dir), "--out", str(out), "--llm", llm, "--n-from-plan", str(tmp_path / "kinds.json"),
                          "--no-unanswerable", "--seed", "2"]) == 0
        items = [json.loads(l) for l in open(out / "dataset.jsonl")]
        assert sorted(i["kind"] for i in items) == ["comparison", "composition", "composition", "composition"], [i["kind"] for i in items]
        c = json.loads((out / "manifest.json").read_text())["config"]
        assert c["n_per_type"] == {"composition": 3, "comparison": 1} and c["types"] == ["composition", "comparison"]
        from ragbench.commands.triad import _plan_targets
        assert _plan_targets(tmp_path / "all.json") == {t: row["n_needed"] for t in ("comparison", "intersection", "composition")}
        assert triad_cli(["--db", str(git_index.db_dir), "--out", str(tmp_path / "both"), "--llm", llm, "--n", "2",
                          "--n-from-plan", str(tmp_path / "kinds.json")]) == 2
        (tmp_path / "styles.json").write_text(json.dumps([{**row, "group": "summarize"}]))
        assert triad_cli(["--db", str(git_index.db_dir), "--out", str(tmp_path / "styles"), "--llm", llm,
                          "--n-from-plan", str(tmp_path / "styles.json")]) == 2
