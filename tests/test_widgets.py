"""Widget logic without a browser: seed selection on a real LanceDB index, bridge overrides, review-queue
persistence across a re-open, the reviewed dataset, and judge-calibration statistics against scikit-learn."""
import json, os, random

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Dataset, QAItem, RunDir
from ragbench.widgets import (BridgeInspector, JudgeCalibration, ReviewQueue, ReviewQueueView, SeedPicker,
                              accept_reject_stats, demo_chunks, demo_run_dir, quadratic_kappa, review_widget,
                              rubric_agreement, triad_planner, write_reviewed)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from ragbench.index import ChunkIndex
    return ChunkIndex.build(tmp_path_factory.mktemp("db"), demo_chunks(), embedder="hash:256", progress=False)


@pytest.fixture
def run(tmp_path):
    return demo_run_dir(tmp_path / "run")


def doc_ids(index):
    return {c.doc_id: c.id for c in demo_chunks()}


def test_seed_picker_on_a_real_index(index, tmp_path):
    ids = doc_ids(index)
    sp = SeedPicker(index, k=3, mode="hybrid")
    hits = sp.search("ORIG_HEAD rebase")
    assert 1 <= len(hits) <= 3 and hits[0].doc_id in ("git-rebase", "git-reset")
    for h in hits[:2]: sp.tick(h.chunk_id)
    sp.toggle(hits[0].chunk_id)                      # untick
    assert sp.seed_ids == [hits[1].chunk_id]
    sp.tick(ids["git-stash"])
    assert [c.id for c in sp.seeds()] == [hits[1].chunk_id, ids["git-stash"]]
    b = sp.browse(ids["git-stash"], k=2)
    assert b["chunk"].id == ids["git-stash"] and len(b["neighbours"]) == 2
    assert ids["git-stash"] not in {h.chunk_id for h in b["neighbours"]}
    sp.save(tmp_path)
    assert SeedPicker.load(tmp_path, index).seed_ids == sp.seed_ids
    for mode in ("dense", "bm25"):
        assert sp.search("reflog expire", mode=mode)


def test_bridge_inspector_choice_and_overrides(index):
    ids = doc_ids(index)
    bi = BridgeInspector(index, ids["git-rebase"], k=4)
    assert bi.auto_neighbour == ids["git-reset"] and "ORIG_HEAD" in bi.shared(ids["git-reset"])
    assert "ORIG_HEAD" in bi.why and not bi.overridden
    other = next(r["chunk_id"] for r in bi.rows() if r["chunk_id"] != ids["git-reset"])
    bi.choose_neighbour(other)
    assert bi.config()["chunk_ids"] == [ids["git-rebase"], other] and bi.overridden
    bi.set_topic("undoing a rebase")
    cfg = bi.config()
    assert cfg["bridge_topic"] == "undoing a rebase" and cfg["why"] == "topic typed by the user"
    got = bi.generate(lambda chunks, topic, n=1: ([c.id for c in chunks], topic, n), n=2)
    assert got == ([ids["git-rebase"], other], "undoing a rebase", 2)
    bi.set_topic("  "); bi.choose_neighbour(None)
    assert not bi.overridden and bi.topic == bi.auto_topic
    with pytest.raises(KeyError): bi.choose_neighbour("c-not-a-neighbour")


def test_bridge_inspector_with_triad_bridging(index):
    "The inspector shows TRIAD's own choice (find_bridge with the LLM's entity lists), and generates from an override."
    from ragbench.llm import make_llm
    from ragbench.triad import TriadConfig
    ids = doc_ids(index)
    def responder(req):
        if req.stage == "triad.entities":
            return {"entities_per_chunk": [["ORIG_HEAD", "git rebase"], ["ORIG_HEAD", "git reset"]], "shared": ["ORIG_HEAD"],
                    "bridge_topic": "ORIG_HEAD", "why": "both name it"}
        return {"question": "Which reference is set by git rebase and used by git reset to undo it?", "answer": "ORIG_HEAD"}
    llm = make_llm("fake", responder=responder)
    cfg = TriadConfig(neighbours_k=3, fallback_n=5)
    bi = BridgeInspector(index, ids["git-rebase"], k=3, planner=triad_planner(index, llm, cfg))
    assert bi.topic and bi.why.startswith("TRIAD bridge via") and bi.neighbour_id in {r["chunk_id"] for r in bi.rows()}
    bi.set_topic("undoing a rebase")
    from ragbench.triad import generate_qa
    qa = bi.generate(generate_qa, kind="intersection", binary=False, llm=llm, cfg=cfg)
    assert qa.answer == "ORIG_HEAD" and "undoing a rebase" in llm.backend.requests[-1].prompt


def test_review_queue_persists_across_reopen(run):
    q = ReviewQueue(run, reviewer="ana")
    assert len(q) == 6 and q.progress()["decided"] == 0
    a = q.current.id; q.accept(note="good")
    r = q.current.id; q.reject(note="vague")
    e = q.current.id; q.edit(question="Edited question?", note="tightened")
    lines = (run / "reviews.jsonl").read_text().splitlines()
    assert len(lines) == 3                                        # written at once, one line per decision
    assert [json.loads(l)["decision"] for l in lines] == ["accept", "reject", "edit"]
    assert all(json.loads(l)["by"] == "ana" and json.loads(l)["at"].endswith("Z") for l in lines)
    del q                                                         # "close the notebook"
    q2 = ReviewQueue(run, reviewer="bo")
    assert q2.progress() == {"items": 6, "shown": 6, "decided": 3, "accept": 1, "reject": 1, "edit": 1}
    assert q2.decision(a) == "accept" and q2.decision(r) == "reject" and q2.decision(e) == "edit"
    assert q2.current.id not in (a, r, e)                         # resumes at the first undecided item
    q2.accept(item=r, note="second look")                         # a later decision wins
    ds = {it.id: it for it in Dataset.read(run / "dataset.reviewed.jsonl")}
    assert r in ds and [x.by for x in ds[r].review] == ["ana", "bo"]
    assert ds[e].question == "Edited question?" and ds[e].review[-1].note == "tightened"
    # the source dataset is never touched
    assert all(not it.review for it in Dataset.read(run / "dataset.jsonl"))


def test_review_filters_and_shortcuts(run):
    q = ReviewQueue(run, reviewer="ana")
    assert len(q.filter(verdict="rejected")) == 2
    assert len(q.filter(verdict="rejected", failed_check="quality")) == 1
    assert len(q.filter(kind="intersection")) == 1
    q.filter()
    first = q.current.id
    assert q.key("a") == "accept" and q.decision(first) == "accept"
    assert q.key("n") == "next" and q.key("p") == "prev"
    cur = q.current.id
    assert q.key("e", answer="a better answer", note="n") == "edit"
    assert q.reviewed_item(cur).answer == "a better answer"
    assert q.key("?") is None
    assert len(q.filter(decision="decided")) == 2 and len(q.filter(decision="undecided")) == 4


def test_view_buttons_write_to_run_dir(run):
    v = ReviewQueueView(ReviewQueue(run, reviewer="cy"))
    cur = v.q.current.id
    v.b_accept.click()
    v2 = v.q.current.id
    v.question.value = "Rewritten by a human?"; v.b_edit.click()
    rows = RunDir(run).read("reviews.jsonl")
    assert [(x["item_id"], x["decision"]) for x in rows] == [(cur, "accept"), (v2, "edit")]
    v.answer.value = v.q.current.answer; v.question.value = v.q.current.question
    v.b_edit.click()                                              # nothing changed: refused, shown in the view
    assert "changed question or answer" in v.message.value and len(RunDir(run).read("reviews.jsonl")) == 2
    os.environ["RAGBENCH_HEADLESS"] = "1"
    try: assert "Static view" in review_widget(v.q).data
    finally: os.environ.pop("RAGBENCH_HEADLESS")


def test_calibration_matches_sklearn():
    from sklearn.metrics import cohen_kappa_score, precision_score, recall_score
    rng = random.Random(1)
    for _ in range(25):
        n = rng.randint(5, 60)
        h = [rng.randint(1, 5) for _ in range(n)]
        j = [min(5, max(1, x + rng.choice([-3, -1, 0, 0, 0, 1, 2]))) for x in h]
        ref = cohen_kappa_score(h, j, weights="quadratic", labels=[1, 2, 3, 4, 5])
        assert quadratic_kappa(h, j) == pytest.approx(ref, abs=1e-9)
        r = rubric_agreement(h, j)
        assert r["within_1"] == pytest.approx(sum(abs(a - b) <= 1 for a, b in zip(h, j)) / n)
        assert r["mad"] == pytest.approx(sum(abs(a - b) for a, b in zip(h, j)) / n)
        judge = [rng.random() < 0.7 for _ in range(n)]; human = [rng.random() < 0.8 for _ in range(n)]
        s = accept_reject_stats(judge, human)
        if any(judge): assert s["accept_precision"] == pytest.approx(precision_score(human, judge, zero_division=0))
        if any(human): assert s["accept_recall"] == pytest.approx(recall_score(human, judge, zero_division=0))
        neg_h, neg_j = [not x for x in human], [not x for x in judge]
        if any(neg_j): assert s["reject_precision"] == pytest.approx(precision_score(neg_h, neg_j, zero_division=0))
        if any(neg_j): assert s["false_rejection_rate"] == pytest.approx(1 - s["reject_precision"])


def test_calibration_from_a_reviewed_run(run):
    q = ReviewQueue(run, reviewer="ana")
    q.filter(verdict="accepted")
    for _ in range(3): q.accept(scores={"clarity": 4})
    q.reject(scores={"clarity": 2})
    q.filter(verdict="rejected"); q.goto(0)
    q.accept(); q.reject()
    cal = JudgeCalibration.from_run(run)
    s = cal.accept_reject()
    assert s["confusion"] == {"judge_accept_human_accept": 3, "judge_accept_human_reject": 1,
                              "judge_reject_human_accept": 1, "judge_reject_human_reject": 1}
    assert s["false_rejection_rate"] == pytest.approx(0.5) and s["accept_precision"] == pytest.approx(0.75)
    assert set(cal.by_kind()) == {"comparison", "composition", "intersection"}
    # no judge rubric scores in the demo items: rubric table empty, not NaN
    assert cal.rubrics() == {}
    assert write_reviewed(run) == {"accepted": 4, "rejected": 2, "reviewed": 6, "unknown_item_reviews": 0}
