"""Issue 22 scenario: a corpus that changes under a dataset. On the Git docs sample: index, generate with the fake
server, then edit 3 documents, delete 1 and add 2; the re-index embeds only the changed chunks, `ragbench refresh`
marks exactly the items touching them, re-checks and replaces them, and the card shows the diff; a refresh killed
half-way resumes without loss or duplicates.

    python -m pytest -q tests/test_refresh.py
"""
import json, os, shutil, signal, subprocess, sys, time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragbench.cli import main
from ragbench.core import QAItem, read_jsonl
from ragbench.corpus import Document, chunk_documents
from ragbench.gen.refresh import _item_chunk_ids

GITDOCS = ROOT.parent / "shared" / "data" / "gitdocs" / "git_docs.jsonl"
N_DOCS, N = 30, 8


def _docs():
    if not GITDOCS.exists(): pytest.fail(f"Git docs sample not found at {GITDOCS} (../shared/data beside the checkout)")
    return [json.loads(l) for l in GITDOCS.open()][: N_DOCS + 2]


def _write(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs)); return path


def _chunks(path):
    "The chunks `ragbench index` makes of a JSONL (what the test expects, computed apart from the index)."
    from ragbench.corpus import load_documents
    return list(chunk_documents(load_documents(path)))


def _items(run, name="dataset.jsonl"):
    p = run / name
    return list(read_jsonl(p, QAItem)) if p.exists() else []


def _journal(run):
    "The refresh journal of a run (refresh/r-ID.jsonl; not its .before or .calls files)."
    return [p for p in (run / "refresh").glob("r-*.jsonl") if p.name.count(".") == 1] if (run / "refresh").exists() else []


def _triad(db, out, url, *extra):
    return main(["triad", "--db", str(db), "--out", str(out), "--llm", f"openai:{url}/v1@fake-model", "--n", str(N),
                 "--seed", "3", "--concurrency", "4", *extra])


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    "Index v0, generate, derive v1 (3 edited, 1 deleted, 2 added), re-index; the expected sets, computed by the test."
    from ragbench.testing import FakeLLMServer
    tmp = tmp_path_factory.mktemp("refresh"); docs = _docs()
    v0, extra = docs[:N_DOCS], docs[N_DOCS:]
    src = _write(tmp / "docs.jsonl", v0); db = tmp / "db"; run = tmp / "run"
    assert main(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"]) == 0
    with FakeLLMServer() as srv: assert _triad(db, run, srv.url) == 0
    items = _items(run)
    old = {c.id: c for c in _chunks(src)}
    answerable = [i for i in items if i.answerable]
    gold_docs = list(dict.fromkeys(old[g].doc_id for it in answerable for g in it.gold_chunk_ids))
    assert len(gold_docs) >= 4, gold_docs
    edited, deleted = gold_docs[:3], gold_docs[3]
    by_id = {d["id"]: d for d in v0}
    for d in edited:                   # one sentence added to the first gold chunk of that document
        g = next(old[g] for it in answerable for g in it.gold_chunk_ids if old[g].doc_id == d)
        by_id[d] = {**by_id[d], "text": by_id[d]["text"].replace(g.text, g.text + " This sentence was added in the new release.", 1)}
    v1 = [by_id[d["id"]] for d in v0 if d["id"] != deleted] + extra
    _write(src, v1)
    new = {c.id: c for c in _chunks(src)}
    gone = set(old) - set(new)
    expected_stale = {it.id for it in items if set(_item_chunk_ids(it)) & gone}
    expected_embedded = len({c.text for i, c in new.items() if i not in old} - {c.text for c in old.values()})
    return dict(tmp=tmp, src=src, db=db, run=run, items=items, old=old, new=new, gone=gone, edited=edited,
                deleted=deleted, expected_stale=expected_stale, expected_embedded=expected_embedded)


def test_reindex_embeds_only_changed_chunks_and_keeps_the_old_version(scenario, capsys):
    from ragbench.index import ChunkIndex
    s = scenario
    capsys.readouterr()
    assert main(["index", str(s["src"]), "--db", str(s["db"]), "--embedder", "hash:64", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "changes: documents 2 added, 3 changed, 1 removed" in out, out
    assert f"; {s['expected_embedded']} embedded;" in out, out
    idx = ChunkIndex.open(s["db"])
    assert set(idx._all_ids()) == set(s["new"])                        # the table is the new corpus, no more, no less
    st = json.loads((s["db"] / "chunks.ragbench.json").read_text())["versions"][-1]
    assert st["embedded"] == s["expected_embedded"] and st["documents"]["removed"] == 1
    assert set(idx.at_version(st["previous"])._all_ids()) == set(s["old"])   # the previous version stays readable
    assert s["expected_embedded"] < len(s["new"]) / 4
    print(f"\nre-index: {st['embedded']} of {len(s['new'])} chunks embedded; {st['documents']} {st['chunks']}")


def test_refresh_marks_exactly_the_touched_items_and_shows_the_diff(scenario, capsys):
    from ragbench.testing import FakeLLMServer
    s = scenario; run = s["run"]
    assert s["expected_stale"], "the edits must touch some items"
    capsys.readouterr()
    with FakeLLMServer() as srv:
        assert main(["refresh", str(run), "--db", str(s["db"]), "--llm", f"openai:{srv.url}/v1@fake-model", "--estimate"]) == 0
        est = json.loads(capsys.readouterr().out)
        assert srv.stats()["requests"] == 0 and est["items"] == len(s["items"])     # --estimate sends nothing
        shutil.copytree(run, s["tmp"] / "run_copy")                                # for the kill test
        shutil.copytree(run, s["tmp"] / "run_budget")                              # for the budget test
        assert main(["refresh", str(run), "--db", str(s["db"]), "--llm", f"openai:{srv.url}/v1@fake-model"]) == 0
        served = srv.stats()["requests"]
    rid = json.loads((run / "manifest.json").read_text())["refreshes"][-1]["refresh"]
    summary = json.loads((run / "refresh" / f"{rid}.json").read_text())
    assert set(summary["stale"]) == s["expected_stale"], (set(summary["stale"]) ^ s["expected_stale"])
    assert summary["llm"]["calls"] == served                                      # counted = what the server received
    after, dropped = _items(run), _items(run, "rejected.jsonl")
    by_id = {i.id: i for i in after}; rechecked_variants = set()
    for it in s["items"]:
        if it.id in s["expected_stale"]:                   # every stale item: kept / revised / dropped, the trail says why
            now = by_id.get(it.id) or next(d for d in dropped if d.id == it.id)
            assert now.meta["refresh"][-1]["stale"] or now.meta["refresh"][-1]["outcome"] == "dropped"
        elif it.meta.get("variant_of") in s["expected_stale"]: continue      # a variant follows its parent
        elif not it.answerable and by_id.get(it.id) != it:  # unanswerable: re-checked because a new chunk is among its hits
            now = by_id.get(it.id) or next(d for d in dropped if d.id == it.id)
            assert "new chunk" in now.meta["refresh"][-1]["stale"][0]; rechecked_variants.add(it.id)
        else: assert by_id[it.id] == it                     # untouched items are byte-for-byte the same
    deleted_gold = {it.id for it in s["items"] if it.answerable and any(s["old"][g].doc_id == s["deleted"] for g in it.gold_chunk_ids)}
    assert deleted_gold and not deleted_gold & set(by_id)                          # gold document deleted: dropped
    assert all(g in s["new"] for it in after for g in it.gold_chunk_ids)           # every gold id is in the new corpus
    card = json.loads((run / "card.json").read_text())
    followers = {it.id for it in s["items"] if it.meta.get("variant_of") in s["expected_stale"] and it.id not in s["expected_stale"]}
    untouched = len(s["items"]) - len(s["expected_stale"]) - len(followers) - len(rechecked_variants)
    assert untouched <= card["diff"]["unchanged"] <= untouched + len(followers) + len(rechecked_variants)
    assert card["diff"]["dropped"] >= len(deleted_gold) and card["diff"]["added"] == len(card["diff_ids"]["added"])
    assert card["version"] != card["previous_version"]
    added = [by_id[i] for i in card["diff_ids"]["added"]]
    assert all(set(i.gold_chunk_ids) & (set(s["new"]) - set(s["old"])) for i in added if i.answerable)   # seeded from new chunks
    # the calls of a full regeneration of the same dataset on the new corpus, for the issue note
    with FakeLLMServer() as srv:
        assert _triad(s["db"], s["tmp"] / "full", srv.url) == 0
        full = srv.stats()["requests"]
    print(f"\nrefresh: {served} calls; full regeneration: {full} calls; stale {len(s['expected_stale'])}/{len(s['items'])}; "
          f"diff {card['diff']}")
    assert served < full


def test_refresh_killed_resumes_without_loss_or_duplicates(scenario):
    from ragbench.testing import FakeLLMServer
    s = scenario; run = s["tmp"] / "run_copy"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    with FakeLLMServer(latency=0.15) as srv:
        cmd = [sys.executable, "-m", "ragbench.cli", "refresh", str(run), "--db", str(s["db"]), "--llm", f"openai:{srv.url}/v1@fake-model",
               "--concurrency", "2"]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            js = _journal(run)
            if js and sum(1 for _ in js[0].open()) >= 2: break
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGKILL); p.wait()
        journal = [json.loads(l)["task_id"] for l in _journal(run)[0].open() if l.endswith("\n")]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    tasks = [json.loads(l)["task_id"] for l in _journal(run)[0].open()]
    assert len(tasks) == len(set(tasks)) and set(journal) <= set(tasks)          # nothing redone, nothing lost
    ids = [i.id for i in _items(run)]
    assert len(ids) == len(set(ids))
    assert {i.id for i in _items(run) if i.id in {x.id for x in s["items"]}} == \
           {i.id for i in _items(s["run"]) if i.id in {x.id for x in s["items"]}}    # the same kept items as the refresh never killed


def test_refresh_stops_at_its_budget_and_the_next_run_finishes_it(scenario):
    "A refresh's re-checks are tasks of the one runner: --max-calls stops it after the tasks in flight, naming why; run again, it ends where an unbudgeted refresh ends."
    from ragbench.testing import FakeLLMServer
    s = scenario; run = s["tmp"] / "run_budget"
    with FakeLLMServer() as srv:
        cmd = ["refresh", str(run), "--db", str(s["db"]), "--llm", f"openai:{srv.url}/v1@fake-model", "--concurrency", "2"]
        assert main(cmd + ["--max-calls", "3"]) == 0
        first = srv.stats()["requests"]
        journal = _journal(run)[0]
        stopped = json.loads(journal.with_suffix(".json").read_text())
        assert stopped["stop_reason"].startswith("budget spent") and stopped["llm"]["calls"] == first <= 3
        assert not (run / "card.json").exists() or "refresh" not in json.loads((run / "card.json").read_text())
        assert main(cmd) == 0
        total = srv.stats()["requests"]
    tasks = [json.loads(l)["task_id"] for l in journal.open()]
    assert len(tasks) == len(set(tasks))                                          # nothing re-checked twice
    ended = json.loads(journal.with_suffix(".json").read_text())
    assert ended["stop_reason"] == "done" and ended["llm"]["calls"] == total > first
    ids = {x.id for x in s["items"]}
    assert {i.id for i in _items(run) if i.id in ids} == {i.id for i in _items(s["run"]) if i.id in ids}


def test_whole_corpus_checks_over_a_run_counted_and_in_the_card(scenario, capsys):
    "`ragbench check` on the refreshed run: every call counted (= what the server received), per-type findings in the card, a re-run costs nothing."
    from ragbench.testing import FakeLLMServer
    s = scenario; run = s["run"]
    with FakeLLMServer() as srv:
        args = ["check", str(run), "--db", str(s["db"]), "--llm", f"openai:{srv.url}/v1@fake-model", "-k", "3"]
        assert main(args) == 0
        served = srv.stats()["requests"]
        assert main(args) == 0 and srv.stats()["requests"] == served                 # resumed from the journal: no new call
    card = json.loads((run / "card.json").read_text())
    cc = card["corpus_checks"]
    assert cc["llm"]["calls"] == served > 0
    kinds = {i.kind for i in _items(run) if i.answerable}
    assert set(cc["by_type"]) == kinds and all(v["checked"] >= 1 for v in cc["by_type"].values())
    assert all("corpus_checks" in i.meta for i in _items(run) if i.answerable)


# ------------------------------------------------------------------------------------------------ DoRA runs
# The same change on a DoRA run: the items whose evidence chunks changed or vanished are stale; the changed ones are gated
# again by DoRA's own checks against the new text (kept and renamed, or dropped), the vanished ones dropped, and every
# dropped item is replaced, style for style, from the new chunks.

def _journal_tasks(run):
    "The task ids of a run's refresh journals."
    return [json.loads(l)["task_id"] for j in _journal(run) for l in j.open()]


def _dora(db, out, url, *extra):
    return main(["dora", "--db", str(db), "--out", str(out), "--llm", f"openai:{url}/v1@fake-model", "--per-style", "2",
                 "--seed", "3", "--no-progress", "--workers", "2", *extra])


@pytest.fixture(scope="module")
def dora_scenario(tmp_path_factory):
    """Index v0, a DoRA run, then v1: the document of a `find` item loses that item's answer (its verbatim check must
    fail), two other evidence documents gain a sentence, a fourth is deleted, two are added; re-index."""
    from ragbench.testing import FakeLLMServer
    tmp = tmp_path_factory.mktemp("dora_refresh"); docs = _docs()
    v0, extra = docs[:N_DOCS], docs[N_DOCS:]
    src = _write(tmp / "docs.jsonl", v0); db = tmp / "db"; run = tmp / "run"
    assert main(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"]) == 0
    with FakeLLMServer() as srv: assert _dora(db, run, srv.url) == 0
    items = _items(run)
    assert {i.style for i in items} == {"find", "explain", "summarize", "generate", "provide"}
    old = {c.id: c for c in _chunks(src)}
    lost = next(i for i in items if i.style == "find")                        # its answer leaves its document
    docs_ev = [d for d in dict.fromkeys(old[g].doc_id for it in items for g in it.gold_chunk_ids) if d != lost.meta["doc_id"]]
    assert len(docs_ev) >= 3, docs_ev
    grown, deleted = docs_ev[:2], docs_ev[2]
    by_id = {d["id"]: d for d in v0}
    d = lost.meta["doc_id"]; assert lost.answer in by_id[d]["text"]
    by_id[d] = {**by_id[d], "text": by_id[d]["text"].replace(lost.answer, "a phrase that is no longer there")}
    for d in grown:
        g = next(old[g] for it in items for g in it.gold_chunk_ids if old[g].doc_id == d)
        by_id[d] = {**by_id[d], "text": by_id[d]["text"].replace(g.text, g.text + " This sentence was added in the new release.", 1)}
    _write(src, [by_id[d["id"]] for d in v0 if d["id"] != deleted] + extra)
    assert main(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"]) == 0
    new = {c.id: c for c in _chunks(src)}
    gone = set(old) - set(new)
    stale = {it.id for it in items if set(it.gold_chunk_ids) & gone}
    vanished = {it.id for it in items if any(old[g].doc_id == deleted for g in it.gold_chunk_ids)}
    shutil.copytree(run, tmp / "run_copy")                                     # for the kill test
    return dict(tmp=tmp, src=src, db=db, run=run, items=items, old=old, new=new, stale=stale, vanished=vanished, lost=lost)


def test_dora_refresh_regates_drops_and_replaces_only_the_touched_items(dora_scenario, capsys):
    from ragbench.testing import FakeLLMServer
    s = dora_scenario; run = s["run"]
    assert s["vanished"] and s["lost"].id in s["stale"] and s["stale"] - s["vanished"] - {s["lost"].id}
    capsys.readouterr()
    llm = f"openai:{{}}/v1@fake-model"
    with FakeLLMServer() as srv:
        assert main(["refresh", str(run), "--db", str(s["db"]), "--llm", llm.format(srv.url), "--estimate"]) == 0
        est = json.loads(capsys.readouterr().out)
        assert srv.stats()["requests"] == 0 and est["items"] == len(s["items"])               # --estimate sends nothing
        assert est["actions"]["drop"] == len(s["vanished"]) and est["actions"]["recheck"] == len(s["stale"] - s["vanished"])
        assert main(["refresh", str(run), "--db", str(s["db"]), "--llm", llm.format(srv.url)]) == 0
        served = srv.stats()["requests"]
    m = json.loads((run / "manifest.json").read_text())
    rid = m["refreshes"][-1]["refresh"]
    summary = json.loads((run / "refresh" / f"{rid}.json").read_text())
    assert set(summary["stale"]) == s["stale"], set(summary["stale"]) ^ s["stale"]
    assert summary["llm"]["calls"] == served                                                  # counted = what the server received
    after, rejected = _items(run), _items(run, "rejected.jsonl")
    by_id, rej = {i.id: i for i in after}, {i.id: i for i in rejected}
    for it in s["items"]:
        if it.id not in s["stale"]: assert by_id[it.id] == it; continue                      # untouched: byte-for-byte the same
        now = by_id.get(it.id) or rej[it.id]
        ev = now.meta["refresh"][-1]
        assert ev["stale"] and ev["outcome"] in ("kept", "dropped")
        if it.id in s["vanished"]: assert ev["outcome"] == "dropped" and len(now.attempts) == len(it.attempts)   # no call
        else: assert len(now.attempts) == len(it.attempts) + 1 and now.attempts[-1].judge["refresh"]            # gated again
    lost = rej[s["lost"].id].meta["refresh"][-1]
    assert lost["outcome"] == "dropped" and lost["why"] == "verbatim"                         # its answer left the evidence
    kept = [by_id[i] for i in s["stale"] - s["vanished"] - {s["lost"].id} if i in by_id]
    assert kept, "an item that only gained a sentence passes DoRA's gate again"
    for it in kept:
        assert set(it.gold_chunk_ids) <= set(s["new"]) and set(it.gold_chunk_ids) & (set(s["new"]) - set(s["old"]))   # renamed
        assert [c.chunk_id for c in it.contexts] == it.gold_chunk_ids and it.meta["refresh"][-1]["score"] >= it.attempts[-1].judge["tau"]
    card = json.loads((run / "card.json").read_text())
    dropped = [i for i in s["items"] if i.id not in by_id]
    added = [by_id[i] for i in card["diff_ids"]["added"]]
    assert card["diff"] == {"added": len(added), "revised": len(kept), "dropped": len(dropped),
                            "unchanged": len(s["items"]) - len(s["stale"])}
    assert sorted(i.style for i in added) == sorted(i.style for i in dropped)                 # the per-style targets kept
    assert Counter(i.style for i in after) == Counter(i.style for i in s["items"])
    for it in added:                                                                          # seeded from new chunks, gated
        assert it.meta["seed_chunk_id"] in set(s["new"]) - set(s["old"]) and set(it.gold_chunk_ids) <= set(s["new"])
        assert it.status == "accepted" and it.meta["refresh"][-1]["outcome"] == "added"
    assert card["version"] != card["previous_version"]
    assert m["dataset_version"] == card["version"] and m["refresh_in_progress"] is None
    assert m["index"]["version"] == summary["table_version"]["now"] != summary["table_version"]["before"]
    with FakeLLMServer() as srv:                                                              # a second refresh: nothing left to do
        assert main(["refresh", str(run), "--db", str(s["db"]), "--llm", llm.format(srv.url)]) == 0
        assert srv.stats()["requests"] == 0
    assert [i.id for i in _items(run)] == [i.id for i in after]
    with FakeLLMServer() as srv:                                                              # a full regeneration, for the issue note
        assert _dora(s["db"], s["tmp"] / "full", srv.url) == 0
        full = srv.stats()["requests"]
    print(f"\nDoRA refresh: {served} calls; full regeneration: {full} calls; stale {len(s['stale'])}/{len(s['items'])}; "
          f"diff {card['diff']}; outcomes {summary['outcomes']}; replacements {summary['replacements']}")
    assert served < full


def test_dora_refresh_killed_resumes_without_loss_or_duplicates(dora_scenario):
    from ragbench.testing import FakeLLMServer
    s = dora_scenario; run = s["tmp"] / "run_copy"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    with FakeLLMServer(latency=0.15) as srv:
        cmd = [sys.executable, "-m", "ragbench.cli", "refresh", str(run), "--db", str(s["db"]), "--llm", f"openai:{srv.url}/v1@fake-model",
               "--concurrency", "2"]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            js = _journal(run)
            if js and sum(1 for _ in js[0].open()) >= len(s["vanished"]) + 1: break        # the drops and one re-gate
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGKILL); p.wait()
        journal = [json.loads(l)["task_id"] for l in _journal(run)[0].open() if l.endswith("\n")]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
    tasks = [json.loads(l)["task_id"] for l in _journal(run)[0].open()]
    assert len(tasks) == len(set(tasks)) and set(journal) <= set(tasks)                  # nothing redone, nothing lost
    ids = [i.id for i in _items(run)]
    assert len(ids) == len(set(ids))
    orig = {i.id for i in s["items"]}                       # the same dataset as the refresh never killed (a replacement's id
    assert [i for i in ids if i in orig] == [i.id for i in _items(s["run"]) if i.id in orig]      # names its generator's URL:
    assert sorted(tasks) == sorted(t for t in _journal_tasks(s["run"]))                            # the same seeds instead)
    assert [(i.style, i.meta["seed_chunk_id"]) for i in _items(run) if i.id not in orig] == \
           [(i.style, i.meta["seed_chunk_id"]) for i in _items(s["run"]) if i.id not in orig]


def test_dora_split_run_refreshes_both_splits_and_rebuilds_the_combined_outputs(tmp_path):
    "A train/test DoRA run refreshed from its top folder: each split refreshed within its own documents, then the combined dataset, leakage report and SFT export written again."
    from ragbench.testing import FakeLLMServer
    docs = _docs(); v0, extra = docs[:N_DOCS], docs[N_DOCS:]
    src = _write(tmp_path / "docs.jsonl", v0); db = tmp_path / "db"; run = tmp_path / "run"
    assert main(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"]) == 0
    with FakeLLMServer() as srv: assert _dora(db, run, srv.url, "--split", "train,test", "--test-fraction", "0.3") in (0, 3)
    old = {c.id: c for c in _chunks(src)}
    halves = {h: _items(run / h) for h in ("train", "test")}
    assert halves["train"] and halves["test"]
    test_docs = {old[g].doc_id for it in halves["test"] for g in it.gold_chunk_ids}
    gone_doc = {h: next(old[g].doc_id for it in halves[h] for g in it.gold_chunk_ids) for h in halves}   # one evidence doc per split
    _write(src, [d for d in v0 if d["id"] not in gone_doc.values()] + extra)
    assert main(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"]) == 0
    new = {c.id: c for c in _chunks(src)}
    stale = {h: {it.id for it in halves[h] if set(it.gold_chunk_ids) - set(new)} for h in halves}
    assert stale["train"] and stale["test"]
    llm = f"openai:{{}}/v1@fake-model"
    with FakeLLMServer() as srv:
        assert main(["refresh", str(run), "--db", str(db), "--llm", llm.format(srv.url), "--estimate"]) == 0
        assert srv.stats()["requests"] == 0                                                   # --estimate sends nothing
        rc = main(["refresh", str(run), "--db", str(db), "--llm", llm.format(srv.url)])
        served = srv.stats()["requests"]
    assert rc in (0, 3)                                                                        # 3: the leakage check failed (it says so)
    after = {h: _items(run / h) for h in halves}
    for h in halves:
        summary = json.loads((run / h / "refresh" / f"{json.loads((run / h / 'manifest.json').read_text())['refreshes'][-1]['refresh']}.json").read_text())
        assert set(summary["stale"]) == stale[h], (h, set(summary["stale"]) ^ stale[h])
        assert not {i.id for i in after[h]} & stale[h] - {i.id for i in after[h] if i.meta.get("refresh")}
    added_test = [i for i in after["test"] if i.meta.get("refresh") and i.meta["refresh"][-1]["outcome"] == "added"]
    added_train = [i for i in after["train"] if i.meta.get("refresh") and i.meta["refresh"][-1]["outcome"] == "added"]
    assert all(new[g].doc_id in test_docs for it in added_test for g in it.gold_chunk_ids)           # test draws from its own documents
    assert not any(new[g].doc_id in test_docs for it in added_train for g in it.gold_chunk_ids)      # train never from the test's
    combined = [i.id for i in _items(run)]
    assert combined == [i.id for i in after["train"] + after["test"]]                               # the combined dataset again
    leak = json.loads((run / "leakage.json").read_text())
    assert (rc == 0) == leak["passed"]
    chat = [json.loads(l)["id"] for l in (run / "sft" / "train.chat.jsonl").open()]
    assert chat == [i.id for i in after["train"]]                                                  # the SFT export of the refreshed train split
    m = json.loads((run / "manifest.json").read_text())
    assert m["split_refresh"] is None and sum(m["refreshes"][-1]["calls"].values()) == served        # counted = received
    with FakeLLMServer() as srv:                                                              # a second refresh: nothing left to do
        assert main(["refresh", str(run), "--db", str(db), "--llm", llm.format(srv.url)]) in (0, 3)
        assert srv.stats()["requests"] == 0


# ------------------------------------------------------------------------------------------------ issue 41: planted edits
# A new export of the Git docs with three planted edits, re-indexed with `index NEW --prune` and refreshed through the one
# shared refresh (gen.refresh), on a TRIAD and on a DoRA run: a gold page deleted (its item dropped and its slot refilled),
# a contradicting near-duplicate page added (the items whose question retrieves it are sent to the uniqueness check, the
# others are not; a scripted "two answers" verdict drops the item it was planted for), a number changed in a gold chunk
# (the free check drops the item before any judge call: TRIAD's token check, DoRA's hard checks).
import re
from ragbench.text import words

UNIQUE_SYSTEM = "still has exactly one answer in a changed corpus"


def _digit_token(it, text):
    "A number among the answer's words whose words appear, in order, in `text` (else None)."
    a, w = words(it.answer), words(text)
    if not any(w[i:i + len(a)] == a for i in range(len(w) - len(a) + 1)): return None
    return next((t for t in a if t.isdigit()), None)


def _plant(tmp, method, run_fn, review_deleted=False):
    """Index v0, a run, then the export v1 with the three edits; `index v1 --prune --yes`; the refresh with a scripted
    judge. Returns what the assertions need."""
    from ragbench.index import ChunkIndex
    from ragbench.testing import FakeLLMServer
    docs = _docs()[:N_DOCS]
    src = _write(tmp / "export-v0.jsonl", docs); db = tmp / "db"; run = tmp / "run"
    assert main(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"]) == 0
    with FakeLLMServer() as srv: assert run_fn(db, run, srv.url) == 0
    items = _items(run)
    idx = ChunkIndex.open(db)
    chunks = {c.id: c for c in _chunks(src)}
    answerable = [i for i in items if i.answerable]
    docs_of = lambda it: {chunks[g].doc_id for g in it.gold_chunk_ids}
    # the number change: an item whose answer holds a number found in its gold text
    changed = next(((it, g, d) for it in answerable for g in it.gold_chunk_ids
                    if (d := _digit_token(it, chunks[g].text))), None)
    assert changed, "no item whose answer holds a number of its gold text"
    c_item, c_chunk, digit = changed
    # the near-duplicate: an item whose question finds its own gold chunk in the top 10, on other documents
    def finds_own(it):
        hits = [h.chunk_id for h in idx.search(it.question, k=10)]
        return next((g for g in it.gold_chunk_ids if g in hits), None)
    b_item = next(it for it in answerable if not docs_of(it) & docs_of(c_item) and finds_own(it))
    # the deleted page: a gold page of a third item
    a_item = next(it for it in answerable if not docs_of(it) & (docs_of(c_item) | docs_of(b_item)))
    deleted = sorted(docs_of(a_item))[0]
    by_id = {d["id"]: d for d in docs}
    old_text = chunks[c_chunk].text
    new_text = re.sub(rf"\b{digit}\b", str(int(digit) + 7), old_text)
    assert new_text != old_text
    cdoc = chunks[c_chunk].doc_id
    by_id[cdoc] = {**by_id[cdoc], "text": by_id[cdoc]["text"].replace(old_text, new_text, 1)}
    twin = chunks[finds_own(b_item)].text
    twin = re.sub(r"\b(\d+)\b", lambda m: str(int(m.group(1)) + 7), twin, count=1) if re.search(r"\d", twin) else \
        twin + " In this copy the opposite is true."
    near = {"id": "near-duplicate.txt", "title": "near duplicate", "text": twin}
    v1 = [by_id[d["id"]] for d in docs if d["id"] != deleted] + [near]
    if review_deleted:                                              # a person accepted the item of the deleted page
        (run / "reviews.jsonl").write_text(json.dumps({"item_id": a_item.id, "decision": "accept", "by": "tester"}) + "\n")
    new_src = _write(tmp / "export-v1.jsonl", v1)                   # the new export: a file of its own
    assert main(["index", str(new_src), "--db", str(db), "--embedder", "hash:64", "--prune", "--yes", "--quiet"]) == 0
    idx = ChunkIndex.open(db)
    assert not any(c.doc_id == deleted for c in idx.iter_chunks())   # --prune removed the deleted page
    sent = []
    def judge(req):
        "The scripted judge: 'two answers' for the planted item's question only; a log of the uniqueness requests."
        if UNIQUE_SYSTEM not in (req.get("system") or ""): return None
        sent.append(req["prompt"])
        return {"reason": "the new page gives another number", "two_answers": b_item.question in req["prompt"]}
    with FakeLLMServer(responder=judge) as srv:
        rc = main(["refresh", str(run), "--db", str(db), "--llm", f"openai:{srv.url}/v1@fake-model", "--fail-if-stale"])
        again = main(["refresh", str(run), "--db", str(db), "--llm", f"openai:{srv.url}/v1@fake-model", "--fail-if-stale"])
    m = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "refresh" / f"{m['refreshes'][-2]['refresh']}.json").read_text())
    new_ids = set(idx._all_ids()) - set(chunks)
    return dict(items=items, after=_items(run), rejected=_items(run, "rejected.jsonl"), summary=summary, rc=rc, idx=idx,
                again=again,
                a=a_item, b=b_item, c=c_item, sent=sent, new_ids=new_ids)


def _check_planted(s, slot):
    "The assertions both methods share."
    summ, rej = s["summary"], {i.id: i for i in s["rejected"]}
    after = {i.id: i for i in s["after"]}
    assert s["rc"] == 1 and s["again"] == 0          # --fail-if-stale: items were stale; a second refresh finds none
    # 1. the deleted gold page: dropped, and its slot refilled (the per-type targets hold again)
    assert s["a"].id not in after and rej[s["a"].id].meta["refresh"][-1]["outcome"] == "dropped"
    assert summ["report"][s["a"].id]["outcome"] == "dropped"
    assert summ["replacements"]["added"] == summ["replacements"]["slots"] >= 3 and summ["replacements"]["empty"] == []
    assert Counter(slot(i) for i in s["after"] if i.answerable) == Counter(slot(i) for i in s["items"] if i.answerable)
    # 2. the near-duplicate: sent to the uniqueness check and dropped by the scripted verdict; only items whose question
    # retrieves a new or changed chunk were sent
    ev = rej[s["b"].id].meta["refresh"][-1]
    assert ev["outcome"] == "dropped" and ev["why"].startswith("two answers") and set(ev["chunks"]) <= s["new_ids"]
    assert summ["neighbourhood"]["two_answers"] == 1 and summ["neighbourhood"]["sent"] == len(s["sent"])
    unchanged = [i for i in s["items"] if i.answerable and summ["stale"].get(i.id, {"action": "none"})["action"] in
                 ("none", "remap")]                                  # kept by phase 1 with their gold ids (no context)
    sent = {i.id for i in unchanged if any(i.question in p for p in s["sent"])}
    near = {i.id for i in unchanged if {h.chunk_id for h in s["idx"].search(i.question, k=10, exclude_ids=i.gold_chunk_ids)}
            & s["new_ids"]}
    assert s["b"].id in sent and sent == near and set(i.id for i in unchanged) - near   # some were not sent
    # 3. the number changed in a gold chunk: dropped by the free check, no judge call spent on it
    assert s["c"].id not in after and s["c"].id in summ["stale"] and summ["report"][s["c"].id]["outcome"] == "dropped"
    return rej[s["c"].id]


def test_planted_edits_on_a_triad_run(tmp_path):
    s = _plant(tmp_path, "triad", _triad)
    c = _check_planted(s, lambda i: (i.kind, i.binary))
    why = c.meta["refresh"][-1]
    assert why["outcome"] == "dropped" and why["why"].startswith("free check"), why
    assert len(c.attempts) == len(s["c"].attempts)                                 # no judge call: no new attempt
    print(f"\nplanted edits, TRIAD: {s['summary']['outcomes']}; neighbourhood {s['summary']['neighbourhood']}; "
          f"replacements {s['summary']['replacements']}; calls {s['summary']['llm'].get('calls')}")


def test_planted_edits_on_a_dora_run(tmp_path):
    s = _plant(tmp_path, "dora", _dora)
    c = _check_planted(s, lambda i: i.style)
    why = c.meta["refresh"][-1]
    assert why["outcome"] == "dropped" and why["why"] in ("verbatim", "numbers_in_evidence"), why   # DoRA's hard checks
    judged = c.attempts[-1].judge                                              # gated again with no judge call:
    assert judged["refresh"] and judged["answer_check"] is None and judged["entailment"] is None    # no LLM verdict
    print(f"\nplanted edits, DoRA: {s['summary']['outcomes']}; neighbourhood {s['summary']['neighbourhood']}; "
          f"replacements {s['summary']['replacements']}; calls {s['summary']['llm'].get('calls')}")


def test_a_human_decided_item_that_goes_stale_is_flagged_never_dropped(tmp_path):
    "issue 41: the item of the deleted page was accepted by a person: it stays, flagged for re-review, and is not replaced."
    s = _plant(tmp_path, "triad", _triad, review_deleted=True)
    a = next(i for i in s["after"] if i.id == s["a"].id)
    ev = a.meta["refresh"][-1]
    assert ev["outcome"] == "flagged" and "re-review" in ev["why"] and a.meta["needs_review"] == ev["stale"]
    assert (a.question, a.answer, a.gold_chunk_ids) == (s["a"].question, s["a"].answer, s["a"].gold_chunk_ids)
    assert s["summary"]["report"][a.id]["outcome"] == "flagged" and s["summary"]["replacements"]["slots"] == 2


def test_a_page_deleted_in_place_is_refilled_from_unchanged_chunks(tmp_path):
    """issue 41: the export re-indexed from the same path with one gold page gone and nothing added: the item is dropped
    and its slot refilled from the seed plan's unchanged chunks (it was 'replacements 0/1 (0 seeds tried)')."""
    from ragbench.testing import FakeLLMServer
    docs = _docs()[:N_DOCS]
    src = _write(tmp_path / "docs.jsonl", docs); db = tmp_path / "db"; run = tmp_path / "run"
    assert main(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"]) == 0
    with FakeLLMServer() as srv: assert _triad(db, run, srv.url) == 0
    items, old = _items(run), {c.id: c for c in _chunks(src)}
    gone = next(old[g].doc_id for it in items if it.answerable for g in it.gold_chunk_ids)
    _write(src, [d for d in docs if d["id"] != gone])
    assert main(["index", str(src), "--db", str(db), "--embedder", "hash:64", "--quiet"]) == 0
    with FakeLLMServer() as srv:
        assert main(["refresh", str(run), "--db", str(db), "--llm", f"openai:{srv.url}/v1@fake-model"]) == 0
    m = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "refresh" / f"{m['refreshes'][-1]['refresh']}.json").read_text())
    r = summary["replacements"]
    assert r["slots"] >= 1 and r["added"] == r["slots"] and r["empty"] == [], r
    added = [i for i in _items(run) if i.meta.get("refresh") and i.meta["refresh"][-1]["outcome"] == "added"]
    assert added and all(set(i.gold_chunk_ids) <= set(old) for i in added)       # seeded from unchanged chunks
    slot = lambda its: Counter((i.kind, i.binary) for i in its if i.answerable)
    assert slot(_items(run)) == slot(items)                                        # the per-type targets hold again
