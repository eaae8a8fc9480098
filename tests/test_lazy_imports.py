"""issue 42, warm where it can be: the commands that never embed (`--help`, `report`, `compare`, `validity`) import no
torch, sentence-transformers or transformers, so they start in about a second instead of paying 9-10 s of imports.

Each command runs for real in its own interpreter on a real evaluation folder and a real run folder; the check reads
that interpreter's `sys.modules` after the command returned."""
import json, subprocess, sys
from pathlib import Path

import pytest

from ragbench.core import Chunk, Context, Dataset, QAItem

HEAVY = ("torch", "sentence_transformers", "transformers", "bert_score")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    "An evaluation folder of two answers setups (text metrics only) and a TRIAD-like run folder of accepted items."
    from ragbench.eval import Setup, evaluate
    from ragbench.index import ChunkIndex
    root = tmp_path_factory.mktemp("lazy")
    texts = ["Paris is the capital of France.", "The Seine flows through Paris.", "Berlin is in Germany.",
             "The Spree flows through Berlin."]
    chunks = [Chunk(id=f"c{i}", doc_id=f"d{i}", text=t) for i, t in enumerate(texts)]
    ChunkIndex.build(root / "db", chunks, "hash:32", progress=False)
    ChunkIndex.build(root / "db", chunks, None, table="mini", progress=False)    # the bundled MiniLM model
    items = [QAItem(id=f"q{i}", method="triad", kind="composition", question=f"Which river flows through city {i}?",
                    answer=["The Seine", "The Spree"][i % 2], gold_chunk_ids=[f"c{2 * (i % 2) + 1}"], status="accepted",
                    contexts=[Context(chunk_id=f"c{2 * (i % 2) + 1}", relevant=True, source="gold")]) for i in range(6)]
    run = root / "run"
    run.mkdir()
    Dataset(items).write(run / "dataset.jsonl")
    setups = []
    for name, right in (("good", True), ("poor", False)):
        p = root / f"{name}.jsonl"
        p.write_text("".join(json.dumps({"item_id": it.id, "answer": it.answer if right or int(it.id[1:]) % 3 else "no idea",
                                         "retrieved_chunk_ids": it.gold_chunk_ids if right else ["c0"]}) + "\n" for it in items))
        setups.append(Setup(name=name, answers=str(p), db=str(root / "db"), top_k=1))
    evaluate(Dataset(items), setups, root / "eval", bertscore=False, similarity_model=None)
    return {"eval": root / "eval", "run": run, "root": root}


def imported_after(argv: list) -> tuple[int, list]:
    "(exit status, the heavy modules loaded) of `ragbench ARGV` run in a fresh interpreter."
    code = (f"import sys; from ragbench.cli import main; rc = main({argv!r}); "
            f"print(rc); print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    rc, heavy = p.stdout.splitlines()[-2:]
    return (0 if rc == "None" else int(rc)), eval(heavy)


@pytest.mark.parametrize("name", ["help", "report", "compare", "validity"])
def test_commands_that_never_embed_import_no_torch(folders, name):
    ev, root = str(folders["eval"]), folders["root"]
    argv = {"help": ["--help"], "report": ["report", ev, "--out", str(root / "report.html")],
            "compare": ["compare", "--baseline", "good", ev], "validity": ["validity", str(folders["run"])]}[name]
    rc, heavy = imported_after(argv)
    assert rc == 0 and heavy == [], (name, rc, heavy)


def test_the_check_sees_an_embedding_command_load_torch(folders):
    "The check can fail: `search` on a MiniLM table embeds its query, so it loads torch."
    rc, heavy = imported_after(["search", "--db", str(folders["root"] / "db"), "--table", "mini", "Paris"])
    assert rc == 0 and "torch" in heavy
