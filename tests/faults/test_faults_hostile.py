"""Issue 24: a hostile OpenAI-compatible server, per stage (bad JSON, schema-breaking JSON, a reply missing every
required field, empty content, an HTML page, 429 with Retry-After, 5xx, slow replies, resets), and the silent wrong
results the battery found: an unusable reply is a failure (repaired, retried, counted), never an empty answer, never
cached, and an item whose labelling failed is not accepted.

The server picks the fault by a phrase of the stage's system prompt (`--stage-faults 'TEXT=FAULT'`).
"""
import json
from pathlib import Path

import pytest

from conftest import Server, ok, ragbench, read_lines, record

LABELS, ENTITIES = "label passages as relevant", "find what links passages"


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def cached_texts(out: Path) -> list:
    return [json.loads(p.read_text()).get("text", "") for p in (out / "cache").rglob("*.json")]


@pytest.mark.parametrize("fault", ["schema", "missing"])   # bad JSON and empty content: 24_triad.contexts
def test_unusable_labels_never_accept(work, hash_db, fault):
    "Every relevance-label reply unusable: no item is accepted with unlabelled contexts; the failures are counted."
    with Server("--stage-faults", f"{LABELS}={fault}") as s:
        out = work / f"hostile_labels_{fault}"
        p = ragbench("triad", "--db", hash_db, "--out", out, "--n", 1, "--concurrency", 2, "--max-seeds", 3, "--llm", s.spec)
        st = s.stats()
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    items = read_lines(out / "dataset.jsonl")[0]
    acc = [i for i in items if i["status"] == "accepted"]
    unlabelled = [c for i in acc for c in i["contexts"] if c["relevant"] is None]
    labels = summary(out)["usage_by_stage"].get("triad.labels", {})
    record(rc=p.returncode, accepted=len(acc), unlabelled=len(unlabelled), label_failures=labels.get("failures"),
           label_repairs=labels.get("repairs"), server_faults=sum(st["faults"].values()))
    assert not acc, f"{len(acc)} items accepted although every labelling reply was unusable"
    assert labels.get("failures", 0) >= 1 and labels.get("repairs", 0) >= 1, labels
    assert p.returncode != 0 and "triad.labels" in p.stderr, (p.returncode, p.stderr[-1500:])
    assert not any(t in ("{}", '{"unexpected": true}', "") for t in cached_texts(out)), "an unusable reply was cached"


def test_entity_reply_missing_fields_is_a_failure(work, hash_db):
    "An entity reply lacking every required field is repaired and counted as a failure, not read as 'nothing shared'."
    with Server("--stage-faults", f"{ENTITIES}=missing") as s:
        out = work / "hostile_entities_missing"
        p = ragbench("triad", "--db", hash_db, "--out", out, "--n", 1, "--concurrency", 2, "--max-seeds", 3, "--llm", s.spec)
    seeds = read_lines(out / "seeds.jsonl")[0]
    ents = summary(out)["usage_by_stage"].get("triad.entities", {})
    record(rc=p.returncode, via=sorted({s_.get("bridge_via") for s_ in seeds if s_.get("bridge_via")}), entity_failures=ents.get("failures"))
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert ents.get("failures", 0) >= 1 and ents.get("repairs", 0) >= 1, ents
    # the fallback follows a parsed entity reply only (issue 41: no pre-check skips the call), and none parses here
    assert not any(s_.get("bridge_via") == "fallback" for s_ in seeds), \
        "a seed whose entity call failed took the fallback bridge silently"
    assert "{}" not in cached_texts(out)
