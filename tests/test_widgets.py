"""Review logic and widget views without a browser, on a real LanceDB index: seed ticks saved where TRIAD reads them,
the bridge inspector (TRIAD's choice, overrides, generation through validation into the run), review-queue persistence
across a re-open, the item table, live calibration, the unanswerable-edit guard, chunk texts from RUN/db, and
judge-calibration statistics against scikit-learn. The browser versions are in tests/test_browser.py."""
import json, os, random, subprocess, sys

from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.core import Dataset, RunDir
from ragbench.eval.calibration import rubric_agreement, weighted_kappa
from ragbench.review import JudgeCalibration, ReviewQueue, accept_reject_stats, write_reviewed
from ragbench.testing.demo import demo_chunks, demo_run_dir
from ragbench.widgets import BridgeInspector, SeedPicker, calibration_widget, review_widget, triad_planner
from ragbench.widgets.bridge import _BridgeInspectorView, _add_to_run
from ragbench.widgets.queue import _ReviewQueueView
from ragbench.widgets.seeds import _SeedPickerView


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from ragbench.index import ChunkIndex
    return ChunkIndex.build(tmp_path_factory.mktemp("db"), demo_chunks(), embedder="hash:256", progress=False)


@pytest.fixture
def run(tmp_path):
    return demo_run_dir(tmp_path / "run")


def doc_ids():
    return {c.doc_id: c.id for c in demo_chunks()}


def scripted(req):
    "TRIAD's stages by rule: shared ORIG_HEAD, a first question the judge finds single-hop, a revision that passes."
    if req.stage == "triad.entities":
        return {"entities_per_chunk": [["ORIG_HEAD", "git rebase"], ["ORIG_HEAD", "git reset"]], "shared": ["ORIG_HEAD"],
                "bridge_topic": "ORIG_HEAD", "why": "both name it"}
    if req.stage == "triad.generate":
        return {"question": "Which reference set by git rebase can git reset --hard return to?" if "one chunk is enough" in req.prompt
                else "Which reference does git rebase set?", "answer": "ORIG_HEAD"}
    if req.stage == "triad.judge":                # a reason, then a verdict, per criterion
        first = "Which reference does git rebase set?" in req.prompt
        v = {k: v for c in ("quality", "retrievable", "multi_hop", "unambiguous") for k, v in ((f"{c}_reason", "fine"), (c, True))}
        return {**v, "reason": "needs both", "temporal": False,
                **({"multi_hop": False, "multi_hop_reason": "one chunk is enough", "reason": "one chunk is enough"} if first else {})}
    if req.stage == "triad.sufficiency":          # is one passage (or group of passages) enough? no
        groups = {f"group_{i}": {"reason": "half the facts", "sufficient": False} for i in range(1, req.prompt.count("=== group ") + 1)}
        return {"sufficient": False, "reason": "half the facts", **groups}
    if req.stage == "triad.labels":                               # every candidate passage a distractor
        from ragbench.prompts import parse_chunks
        cands = parse_chunks(req.prompt.split("Candidate passages:")[-1])
        return {"labels": [{"chunk_id": i, "relevant": False, "reason": "other topic"} for i, _, _ in cands]}
    if req.stage == "triad.temporal": return {"temporal": False}
    return {"answers_question": False, "reason": "no"}


# --- seed picker ------------------------------------------------------------------------------------------------
def test_seed_picker_on_a_real_index(index, tmp_path):
    ids = doc_ids()
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
    for mode in ("dense", "bm25"):
        assert sp.search("reflog expire", mode=mode)


def test_seed_picker_ticks_reach_the_triad_command(index, tmp_path):
    "Fix: ticks in the widget were never saved. Now each tick lands in RUN/seeds.txt and `ragbench triad --seeds-file` uses it."
    run = tmp_path / "run"
    view = _SeedPickerView(SeedPicker(index, k=4, run_dir=run))
    view.query.value = "ORIG_HEAD"
    view.results.children[0].children[0].value = True            # tick the first hit, as a click would
    ticked = view.p.results[0].chunk_id
    assert (run / "seeds.txt").exists() and "--seeds-file" in view.summary.value
    from ragbench.triad import read_seeds_file
    assert read_seeds_file(str(run / "seeds.txt"), index) == [ticked]
    assert SeedPicker(index, run_dir=run).seed_ids == [ticked]   # a re-opened picker has the tick back
    out = tmp_path / "triad"
    script = Path(sys.executable).with_name("ragbench")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "ragbench.cli"]
    p = subprocess.run(cli + ["triad", "--db", str(index.db_dir), "--out", str(out), "--n", "1",
                        "--llm", "template", "--seeds-file", str(run / "seeds.txt")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.returncode == 0, p.stderr[-2000:]
    seeds = [json.loads(l)["seed"] for l in (out / "seeds.jsonl").read_text().splitlines()]
    assert seeds and set(seeds) == {ticked}


# --- bridge inspector -----------------------------------------------------------------------------------------
def test_bridge_inspector_uses_triads_partner_rule(index):
    "issue 19 #3: the inspector's default pair is the one TRIAD's own rules give (pick_partners + shared_name), not its own count."
    from ragbench.triad import TriadConfig
    from ragbench.triad.bridge import hit_chunk, pick_partners, shared_name
    ids = doc_ids()
    bi = BridgeInspector(index, ids["git-rebase"], k=4)
    first = next(h for h in pick_partners(bi.seed, bi.neighbours, TriadConfig(offer_k=4, fallback_n=4)) if shared_name(bi.seed, hit_chunk(h)))
    assert (bi.auto_neighbour, bi.auto_topic) == (first.chunk_id, shared_name(bi.seed, hit_chunk(first)))
    assert "TRIAD's partner rule" in bi.why


def test_bridge_inspector_choice_and_overrides(index):
    ids = doc_ids()
    bi = BridgeInspector(index, ids["git-rebase"], k=4)
    assert bi.auto_neighbour == ids["git-reset"] and "ORIG_HEAD" in bi.shared(ids["git-reset"])
    assert "ORIG_HEAD" in bi.why and not bi.overridden
    other = next(r["chunk_id"] for r in bi.rows() if r["chunk_id"] != ids["git-reset"])
    bi.choose_neighbour(other)
    assert bi.config()["chunk_ids"] == [ids["git-rebase"], other] and bi.overridden
    bi.set_topic("undoing a rebase")
    cfg = bi.config()
    assert cfg["bridge_topic"] == "undoing a rebase" and cfg["why"] == "topic typed by the user"
    bi.set_topic("  "); bi.choose_neighbour(None)
    assert not bi.overridden and bi.topic == bi.auto_topic
    with pytest.raises(KeyError): bi.choose_neighbour("c-not-a-neighbour")
    assert all("§" in r["label"] for r in bi.rows())            # neighbours named by document and position


def test_bridge_view_starts_on_the_chosen_neighbour(index):
    "Fix: the neighbour dropdown started blank."
    ids = doc_ids()
    view = _BridgeInspectorView(BridgeInspector(index, ids["git-rebase"], k=4))
    assert view.neighbour.value == ids["git-reset"] and view.neighbour.label.startswith("▶ git-reset §1")
    view.neighbour.value = next(v for _, v in view.neighbour.options if v != ids["git-reset"])
    assert view.bi.overridden and "(overridden)" in view.view.value


def test_bridge_inspector_generates_into_the_run(index, tmp_path):
    "Fix: Generate printed a raw repr. Now the item is validated by TRIAD and appended to the run."
    from ragbench.llm import make_llm
    from ragbench.triad import TriadConfig
    ids = doc_ids()
    llm = make_llm("fake", responder=scripted)
    cfg = TriadConfig(neighbours_k=3, fallback_n=5)
    bi = BridgeInspector(index, ids["git-rebase"], k=3, planner=triad_planner(index, llm, cfg))
    assert bi.why.startswith("TRIAD bridge via") and bi.neighbour_id == ids["git-reset"]
    run = tmp_path / "run"
    view = _BridgeInspectorView(bi, run_dir=run, llms=llm, cfg=cfg)
    view.kind.value = "intersection"
    view.generate.click()
    assert "validator: accepted" in view.result.value and "inspected.jsonl" in view.result.value
    items = Dataset.read(run / "inspected.jsonl").items
    main = items[0]
    assert main.status == "accepted" and main.answer == "ORIG_HEAD" and main.kind == "intersection"
    assert [a.failed_check for a in main.attempts] == ["judge_multi_hop", None]     # the judge's verdicts, one revision
    assert main.gold_chunk_ids == [ids["git-rebase"], ids["git-reset"]] and main.meta["bridge_from"] == "inspector"
    assert [i.answerable for i in items] == [True, False]            # the unanswerable variant rides along
    assert any(c.relevant is False for c in main.contexts)           # contexts labelled
    assert main.id in {i.id for i in ReviewQueue(run).items}
    again = _add_to_run(bi, run, llm, cfg, kind="intersection")          # the same configuration twice: no duplicate
    assert again.id == main.id and len(Dataset.read(run / "inspected.jsonl").items) == len(items)
    # a resumed TRIAD run rewrites dataset.jsonl from its own journal: the inspected items live apart, still reviewed
    (run / "dataset.jsonl").write_text("")
    write_reviewed(run)
    assert main.id in {i.id for i in Dataset.read(run / "dataset.reviewed.jsonl")}


# --- review queue ---------------------------------------------------------------------------------------------
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
    assert all(not it.review for it in Dataset.read(run / "dataset.jsonl"))   # the source dataset is never touched


def test_reviewed_dataset_exists_before_any_decision(run):
    "Fix (tour step 7): the reviewed dataset only existed after a human decision."
    ReviewQueue(run)
    assert len(Dataset.read(run / "dataset.reviewed.jsonl")) == 4


def test_review_filters_shortcuts_and_table(run):
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
    t = q.filter().table()
    assert list(t.columns) == ["id", "status", "type", "failed check", "decision", "question"]
    assert t["decision"].tolist()[2:4] == ["accept", "edit"] and t.loc[6, "failed check"] == "sufficiency"


def test_unanswerable_item_keeps_its_abstention(run):
    "Fix: editing an unanswerable item could save answerable: false with a real answer."
    ds = Dataset.read(run / "dataset.jsonl")
    ds.items[0] = ds.items[0].model_copy(update={"answerable": False, "answer": "The contexts do not say."})
    ds.write(run / "dataset.jsonl")
    q = ReviewQueue(run, reviewer="ana")
    with pytest.raises(ValueError, match="unanswerable variant"): q.edit(answer="90 days")
    assert not (run / "reviews.jsonl").exists()
    q.edit(question="A sharper question?")
    got = {i.id: i for i in Dataset.read(run / "dataset.reviewed.jsonl")}[ds.items[0].id]
    assert (got.answerable, got.answer, got.question) == (False, "The contexts do not say.", "A sharper question?")
    view = _ReviewQueueView(ReviewQueue(run))
    view.q.goto(0); view.refresh()
    assert view.answer.disabled                                      # the view locks the field


def test_chunk_texts_from_the_run_index(run, tmp_path):
    "Fix: a run whose index sits in RUN/db showed '(chunk text not available)'."
    from ragbench.index import ChunkIndex
    (run / "chunks.jsonl").unlink()
    ChunkIndex.build(run / "db", demo_chunks(), embedder="hash:64", progress=False)
    q = ReviewQueue(run)
    assert all(ch is not None and ch.text for _, ch in q.contexts())
    assert "not found" not in _ReviewQueueView(q).body.value
    run2 = demo_run_dir(tmp_path / "run2"); (run2 / "chunks.jsonl").unlink()      # the manifest names the index instead
    RunDir(run2).write_manifest(corpus={"db": str(run / "db"), "table": "chunks"})
    assert all(ch is not None for _, ch in ReviewQueue(run2).contexts())


def test_view_is_compact_and_calibration_is_live(run):
    "Target: question, answer, action bar and gold chunks first; others collapsed; table; calibration after each decision."
    v = _ReviewQueueView(ReviewQueue(run, reviewer="cy"))
    kids = list(v.widget.children)
    order = [kids.index(x) for x in (v.table, v.actions, v.edit_box, v.calibration)]
    assert order == sorted(order)                                   # table, then the action bar, before the chunks
    body = v.body.value
    assert body.index("rb-gold") < body.index("<details class='rb-others'>") < body.index("rb-attempts")
    assert len(v.table.options) == 6 and v.table.value == v.q.current.id
    assert "all (n=0)" in v.calibration.value
    cur = v.q.current.id
    v.b_accept.click()
    v2 = v.q.current.id
    v.question.value = "Rewritten by a human?"; v.b_edit.click()
    rows = RunDir(run).read("reviews.jsonl")
    assert [(x["item_id"], x["decision"]) for x in rows] == [(cur, "accept"), (v2, "edit")]
    assert "all (n=2)" in v.calibration.value and "<svg" in v.calibration.value
    v.table.value = v.q.order[5]                                    # a click on the table opens that item
    assert v.q.current.id == v.q.order[5] and v.q.current.question in v.head.value
    v.answer.value = v.q.current.answer; v.question.value = v.q.current.question
    v.b_edit.click()                                                # nothing changed: refused, shown in the view
    assert "changed question or answer" in v.message.value and len(RunDir(run).read("reviews.jsonl")) == 2
    live = calibration_widget(v.q, headless=False)
    v.b_reject.click()
    assert "all (n=3)" in live.value                                # another cell's calibration follows the queue
    assert "Static view" in review_widget(v.q, headless=True).data


# --- calibration statistics -------------------------------------------------------------------------------------
def test_calibration_matches_sklearn():
    from sklearn.metrics import cohen_kappa_score, precision_score, recall_score
    rng = random.Random(1)
    for _ in range(25):
        n = rng.randint(5, 60)
        h = [rng.randint(1, 5) for _ in range(n)]
        j = [min(5, max(1, x + rng.choice([-3, -1, 0, 0, 0, 1, 2]))) for x in h]
        ref = cohen_kappa_score(h, j, weights="quadratic", labels=[1, 2, 3, 4, 5])
        assert weighted_kappa(h, j) == pytest.approx(ref, abs=1e-9)
        r = rubric_agreement(h, j)
        assert r["kappa_w"] == pytest.approx(ref, abs=1e-9)
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
    assert cal.rubrics() == {}                                      # no judge rubric scores in the demo items
    assert write_reviewed(run) == {"accepted": 4, "rejected": 2, "reviewed": 6, "unknown_item_reviews": 0}


def test_old_import_paths_still_work():
    from ragbench.widgets import ReviewQueue as RQ
    assert RQ is ReviewQueue
