"""TRIAD integration tests: every branch of generation / validation / extraction driven by a scripted LLM on a
real (small) LanceDB index of HotpotQA paragraphs, plus resume after a kill and the budget stop through the CLI
against the fake LLM server.

    python -m pytest -q tests/test_triad.py
    RAGBENCH_SLOW=1 python -m pytest -q tests/test_triad.py -k local    # also a smoke run on the offline local model
"""
import contextlib, json, os, re, signal, subprocess, sys, time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Chunk, QAItem, RunDir
from ragbench.llm import Budget, make_llm
from ragbench.prompts import parse_chunks
from ragbench.triad_generate import (SeedPlan, TriadConfig, candidate_names, draft_item, find_bridge, hotpot_chunks,
                                     mentions)
from ragbench.triad_validate import validate
from ragbench.cli import main
from ragbench.triad import process_seed, run_triad

HOTPOT = ROOT.parent / "shared" / "data" / "hotpotqa" / "hotpotqa_train100.json"
LONELY = Chunk(id="c-lonely", doc_id="lonely", text="only lower case words here, about nothing in particular at all.", meta={})


# ---------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def corpus():
    if not HOTPOT.exists(): pytest.skip(f"HotpotQA sample not found at {HOTPOT}")
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


# ---------------------------------------------------------------------------------------------- scripted LLM

GOOD = {"reason": "Both passages are needed and there is one answer.", "quality": True, "multi_hop": True, "unambiguous": True}
NO = {"sufficient": False, "reason": "needs the other passage"}


def default_reply(req):
    "A model that does everything right: shared names, template question, accept, label every third candidate."
    cs = parse_chunks(req.prompt)
    if req.stage == "triad.entities":
        names = [candidate_names(x, t) for _, t, x in cs]
        shared = [n for n in names[0] if all(mentions(f"{t}\n{x}", n) for _, t, x in cs[1:])]
        return {"entities_per_chunk": names, "shared": shared[:2], "bridge_topic": (shared or [""])[0], "why": ""}
    if req.stage == "triad.generate":
        if 'exactly "yes" or "no"' in req.prompt:
            return {"question": f"Was {cs[0][1]} documented before {cs[1][1]}?", "answer": "yes"}
        return {"question": f"Which is older, {cs[0][1]} or {cs[1][1]}?", "answer": cs[0][1]}
    if req.stage == "triad.judge": return GOOD
    if req.stage == "triad.sufficiency": return NO
    if req.stage == "triad.temporal": return {"temporal": True}
    if req.stage == "triad.labels":
        cand = parse_chunks(req.prompt.split("Candidate passages:")[1])
        return {"labels": [{"chunk_id": i, "relevant": k % 3 == 0, "reason": ""} for k, (i, _, _) in enumerate(cand)]}
    if req.stage == "triad.unanswerable": return {"answers_question": False, "reason": "no"}
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


def _validate(lilu, script, kind="intersection", binary=False, bridge="Lilu"):
    from ragbench.triad_generate import BridgeConfig
    b = BridgeConfig(seed_id=lilu[0].id, chunk_ids=[c.id for c in lilu], bridge_topic=bridge)
    llm = fake(script)
    it = draft_item(b, SeedPlan(seed_id=lilu[0].id, kind=kind, binary=binary))
    return validate(it, list(lilu), gen_llm=llm, judge_llm=llm, cfg=TriadConfig()), llm


# ---------------------------------------------------------------------------------------------- generation

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
    s = Script(entities=[{"entities_per_chunk": [[ent], ["Nothing Shared"]], "shared": [], "bridge_topic": "", "why": ""}])
    b = find_bridge(seed.id, index, fake(s), TriadConfig(precheck=False))
    assert (b.via, b.bridge_topic, b.entity_calls) == ("fallback", ent, 1)
    assert b.chunk_ids[0] == seed.id and b.chunk_ids[1] != seed.id and mentions(index.get(b.chunk_ids[1]).text, ent)


def test_fallback_fails_moves_to_next_seed(index, lilu, tmp_path):
    s = Script()
    cfg = TriadConfig(n=1, seeds=[LONELY.id, lilu[0].id], types=["comparison"], binary_share=0.0, neighbours_k=30)
    summary = run_triad(index, fake(s), cfg, tmp_path / "run", progress=False)
    seeds = [json.loads(l) for l in open(tmp_path / "run" / "seeds.jsonl")]
    assert [(r["seed"], r["outcome"]) for r in seeds] == [(LONELY.id, "no_bridge"), (lilu[0].id, "accepted")]
    assert seeds[0]["usage"]["calls"] == 0          # the pre-check skipped the entity call; nothing found
    assert summary["accepted"] == 1 and summary["seeds_by_outcome"] == {"no_bridge": 1, "accepted": 1}


# ---------------------------------------------------------------------------------------------- validation

def test_accepted_at_once_end_to_end(index, lilu):
    s = Script()
    cfg = TriadConfig(types=["comparison"], neighbours_k=30, binary_share=0.0)
    rec, keep, drop = process_seed(SeedPlan(seed_id=lilu[0].id, kind="comparison", binary=False), index, fake(s), cfg)
    item = keep[0]
    assert rec["outcome"] == "accepted" and item.status == "accepted" and len(item.attempts) == 1
    assert item.attempts[0].sufficiency == [False, False] and item.attempts[0].judge["multi_hop"] is True
    assert [c.source for c in item.contexts[:2]] == ["gold", "gold"] and item.difficulty in ("easy", "medium", "hard")
    assert len({c.chunk_id for c in item.contexts}) == len(item.contexts)
    assert item.temporal is True and item.models["judge"] == "fake"
    # calls: 1 entity + 1 generate + 1 judge + 2 sufficiency + 1 temporal + labels in batches of 10
    n_cand = len(item.contexts) - 2
    assert item.usage["calls"] == 6 + -(-n_cand // 10) == len(s.requests)
    if len(keep) > 1:
        v = keep[1]
        assert not v.answerable and v.meta["variant_of"] == item.id and all(c.relevant is False or c.source == "gold" for c in v.contexts)


def test_rejected_then_feedback_then_accepted(lilu):
    bad = {"reason": "Chunk Alû alone answers it; ask something that needs the Lilu passage.", "quality": True,
           "multi_hop": False, "unambiguous": True}
    q1 = {"question": "Which class of Akkadian demons includes the Alû?", "answer": "wind demons"}
    q2 = {"question": "Which Akkadian word for a spirit is related to the Alû demon?", "answer": "lilu"}
    s = Script(generate=[q1, q2], judge=[bad, GOOD])
    it, _ = _validate(lilu, s)
    assert it.status == "accepted" and [a.failed_check for a in it.attempts] == ["judge_multi_hop", None]
    assert it.question == q2["question"] and it.attempts[0].feedback.endswith(bad["reason"])
    revision = [r for r in s.requests if r.stage == "triad.generate"][1].prompt
    assert bad["reason"] in revision and q1["question"] in revision
    assert s.calls("sufficiency") == 2                # skipped on the rejected attempt


def test_rejected_twice_dropped_with_both_reasons(index, lilu, tmp_path):
    r1 = {"reason": "Two demons fit; ambiguous.", "quality": True, "multi_hop": True, "unambiguous": False}
    r2 = {"reason": "The premise is wrong about the Alû.", "quality": False, "multi_hop": True, "unambiguous": True}
    s = Script(judge=[r1, r2])
    cfg = TriadConfig(n=1, seeds=[lilu[0].id], types=["comparison"], binary_share=0.0, neighbours_k=30)
    summary = run_triad(index, fake(s), cfg, tmp_path / "run", progress=False)
    rej = list(RunDir(tmp_path / "run").read("rejected.jsonl", QAItem))
    assert summary["accepted"] == 0 and len(rej) == 1 and rej[0].status == "rejected"
    assert [a.judge["reason"] for a in rej[0].attempts] == [r1["reason"], r2["reason"]]
    assert [a.failed_check for a in rej[0].attempts] == ["judge_unambiguous", "judge_quality"]
    assert summary["failed_checks"] == {"judge_unambiguous": 1, "judge_quality": 1}
    assert summary["pass_rate_by_check"]["judge"] == {"reached": 2, "passed": 0, "rate": 0.0}
    assert (tmp_path / "run" / "dataset.jsonl").exists() is False or not (tmp_path / "run" / "dataset.jsonl").read_text().strip()


def test_single_chunk_sufficient_rejected(lilu):
    s = Script(sufficiency=[lambda req: {"sufficient": 'title="Alû"' in req.prompt, "reason": "states it"}])
    it, _ = _validate(lilu, s, kind="comparison")
    assert it.status == "rejected" and {a.failed_check for a in it.attempts} == {"sufficiency"}
    assert it.attempts[0].sufficiency == [False, True] and "'Alû' alone answers" in it.attempts[0].feedback


def test_unparseable_judge_counted_retried_never_accepted(lilu):
    s = Script(judge=["Looks great, accept it!"])
    it, llm = _validate(lilu, s, kind="comparison")
    assert it.status == "rejected" and [a.failed_check for a in it.attempts] == ["judge_unparseable"] * 2
    row = llm.usage.by_stage()["triad.judge"]
    assert row["failures"] == 2 and row["repairs"] == 4 and s.calls("judge") == 6 and s.calls("sufficiency") == 0
    # a reply that parses on the re-ask is used
    it, llm = _validate(lilu, Script(judge=["{broken", GOOD]), kind="comparison")
    assert it.status == "accepted" and llm.usage.by_stage()["triad.judge"]["repairs"] == 1


def test_judge_reason_contradicting_verdict_rejected(lilu):
    liar = {**GOOD, "reason": "This is not a multi-hop question: the Alû passage alone answers it."}
    it, _ = _validate(lilu, Script(judge=[liar]), kind="comparison")
    assert it.status == "rejected" and {a.failed_check for a in it.attempts} == {"judge_contradiction"}


def test_composition_leaking_bridge_rejected(lilu):
    leak = {"question": "Which Akkadian spirit is related to Lilu?", "answer": "Alû"}
    ok = {"question": "Which Mesopotamian demon is linked to an Akkadian word for a masculine spirit?", "answer": "Alû"}
    s = Script(generate=[leak, ok])
    it, _ = _validate(lilu, s, kind="composition", bridge="Lilu")
    assert [a.failed_check for a in it.attempts] == ["bridge_leak", None] and it.status == "accepted"
    assert s.calls("judge") == 1                      # the leak was caught without a judge call


def test_garbage_everywhere_is_rejection_not_crash(index, tmp_path):
    import random
    rng = random.Random(0)
    junk = ["", "not json", "{", '{"question": 3}', '{"labels": "x"}', '[]', '{"quality": "maybe"}', "null"]
    s = lambda req: rng.choice(junk)
    summary = run_triad(index, fake(s), TriadConfig(n=2, max_seeds=6, concurrency=3), tmp_path / "run", progress=False)
    assert summary["accepted"] == 0 and summary["seeds_tried"] == 6 and summary["session"]["errors"] == 0
    assert summary["session"]["stop_reason"] == "no seeds left"


# ---------------------------------------------------------------------------------------------- run level: fake server

@contextlib.contextmanager
def fake_rules(judge_pass: float = 1.0, sufficient_p: float = 0.0):
    "Template rules over TRIAD's own (registered by ragbench.triad_generate): a tunable judge and sufficiency (removed on exit)."
    from ragbench.llm.template import register_template_rules, unregister_template_rules
    register_template_rules({"multi_hop": lambda ctx: ctx.rng.random() < judge_pass,
                             "sufficient": lambda ctx: ctx.rng.random() < sufficient_p}, name="test_triad", priority=100)
    try: yield
    finally: unregister_template_rules("test_triad")


def triad_cli(argv):
    "`ragbench triad ARGV` in-process: its exit status."
    return main(["triad", *argv])


def _cli_cmd(db, out, url, *extra):
    return [sys.executable, "-m", "ragbench.cli", "triad", "--db", str(db), "--out", str(out), "--llm", f"openai:{url}/v1@fake-model", *extra]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}


def test_resume_after_kill_no_duplicates_cache_hits(index, tmp_path):
    from ragbench.testing import FakeLLMServer
    out = tmp_path / "run"
    with fake_rules(), FakeLLMServer(latency=0.05) as srv:
        cmd = _cli_cmd(index.db_dir, out, srv.url, "--n", "6", "--concurrency", "4", "--binary-share", "0",
                       "--types", "comparison,intersection")
        p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seeds = out / "seeds.jsonl"
        t0 = time.time()
        while time.time() - t0 < 120 and p.poll() is None:
            if seeds.exists() and len(seeds.read_text().splitlines()) >= 3: break
            time.sleep(0.05)
        assert p.poll() is None, f"finished before the kill: {p.communicate()}"
        p.send_signal(signal.SIGKILL); p.wait()
        before = len(seeds.read_text().splitlines())
        assert 3 <= before
        r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "dataset:" in r.stdout and str(out / "dataset.jsonl") in r.stdout
    items = [json.loads(l) for l in open(out / "dataset.jsonl")]
    ids = [i["id"] for i in items]
    seed_ids = [json.loads(l)["seed"] for l in open(seeds)]
    assert len(ids) == len(set(ids)) and len(seed_ids) == len(set(seed_ids))
    assert sum(i["answerable"] for i in items) == 6
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accepted"] == 6 and summary["session"]["new_seeds"] == len(seed_ids) - before
    assert sum(u["cached"] for u in summary["session"]["usage_by_llm"].values()) > 0   # killed seeds' calls came from the cache


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
        assert s["session"]["stop_reason"].startswith("budget spent") and s["llm"]["calls"] <= 7
        assert triad_cli(args) == 0
        s = json.loads((out / "summary.json").read_text())
        assert s["accepted"] == 3 and s["session"]["stop_reason"] == "target reached"


def test_max_calls_holds_across_resumes(index, tmp_path, capsys):
    "The run's meter is persisted (llm_calls.jsonl): re-running the same --max-calls N command never sends more than N in all."
    from ragbench.testing import FakeLLMServer
    out = tmp_path / "run"
    with fake_rules(judge_pass=0.3), FakeLLMServer() as srv:
        args = ["--db", str(index.db_dir), "--out", str(out), "--llm", f"openai:{srv.url}/v1@fake-model", "--n", "20",
                "--binary-share", "0", "--types", "comparison", "--concurrency", "2", "--max-calls", "9"]
        for _ in range(3): assert triad_cli(args) == 0
        assert srv.stats()["requests"] <= 9
    assert "budget spent" in capsys.readouterr().err
    journal = [json.loads(l) for l in open(out / "llm_calls.jsonl")]
    assert sum(e["e"] == "send" for e in journal) == srv.stats()["requests"]


def test_estimate_spends_nothing(index, tmp_path, capsys):
    assert triad_cli(["--db", str(index.db_dir), "--out", str(tmp_path / "est"), "--n", "20", "--estimate",
                      "--llm", "gemini:gemini-2.5-flash", "--judge-llm", "gemini:gemini-2.5-flash-lite"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["total"]["calls"] > 20 and est["total"]["cost_usd"] > 0 and not (tmp_path / "est").exists()


@pytest.mark.skipif(not os.environ.get("RAGBENCH_SLOW"), reason="slow: runs the offline local model (set RAGBENCH_SLOW=1)")
def test_local_model_smoke_run(index, tmp_path):
    "The tiny offline model writes poor questions: the run must end cleanly with rejections, not crash."
    r = subprocess.run([sys.executable, "-m", "ragbench.cli", "triad",
                        "--db", str(index.db_dir), "--out", str(tmp_path / "local"), "--n", "1", "--max-seeds", "2",
                        "--concurrency", "1", "--max-calls", "30"], env=_env(), capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert s["seeds_tried"] == 2 or s["session"]["stop_reason"].startswith("budget")
    assert "dataset:" in r.stdout
