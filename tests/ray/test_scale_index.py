"""Indexing on the Ray cluster gives the one-process table: same chunk ids, texts, meta, and vectors of the bundled
all-MiniLM-L6-v2 model to 1e-5; a partial table is completed without embedding its chunks again; and the
`index` command takes --ray."""
from itertools import islice
import numpy as np
from ragbench.corpus import LoadReport, chunk_documents, load_documents, sample_corpus_path
from ragbench.index import ChunkIndex
from ragbench.scale.index import build_index_on_ray


def _rows(idx):
    return {r["id"]: r for r in idx.tbl.to_arrow().to_pylist()}


def test_same_table_as_one_process_with_the_real_model(cluster, tmp_path):
    src = sample_corpus_path()
    one = ChunkIndex.build(tmp_path / "one", chunk_documents(load_documents(src), mode="auto"), progress=False)
    rep = LoadReport()
    on_ray = build_index_on_ray(src, tmp_path / "ray", address=cluster, report=rep, batch_chunks=8, progress=False)
    a, b = _rows(one), _rows(on_ray)
    assert sorted(a) == sorted(b) and len(a) > 50
    assert all((a[k]["doc_id"], a[k]["text"], a[k]["meta"]) == (b[k]["doc_id"], b[k]["text"], b[k]["meta"]) for k in a)
    worst = max(float(np.abs(np.asarray(a[k]["vector"]) - np.asarray(b[k]["vector"])).max()) for k in a)
    assert worst < 1e-5, worst
    assert rep.documents == 20 and on_ray.last_build == {"chunks": len(a), "added": len(a), "existing": 0, "repeated": 0, "duplicates_removed": 0}
    assert on_ray.embedder.name == one.embedder.name == "all-MiniLM-L6-v2"          # the sidecar is the same
    q = "how do I undo the last commit"
    assert [h.chunk_id for h in on_ray.search(q, k=5)] == [h.chunk_id for h in one.search(q, k=5)]


def test_a_partial_build_resumes_without_embedding_again(cluster, tmp_path):
    src = sample_corpus_path()
    first = ChunkIndex.build(tmp_path / "db", chunk_documents(islice(load_documents(src), 7), mode="auto"), "hash:64", progress=False)
    stored = len(first)
    idx = build_index_on_ray(src, tmp_path / "db", embedder="hash:64", address=cluster, progress=False)
    full = ChunkIndex.build(tmp_path / "full", chunk_documents(load_documents(src), mode="auto"), "hash:64", progress=False)
    assert idx.last_build["existing"] == stored and idx.last_build["added"] == len(full) - stored
    ids = idx._all_ids()
    assert len(ids) == len(set(ids)) == len(full)


def _ragbench(*args, cwd=None, with_err=False):
    import subprocess, sys
    from pathlib import Path
    import os
    env = {k: v for k, v in os.environ.items() if k != "RAGBENCH_RAY_ADDRESS"}   # on Ray only when ARGS say so
    r = subprocess.run([str(Path(sys.executable).parent / "ragbench"), *map(str, args)], capture_output=True, text=True,
                       timeout=900, cwd=cwd, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return (r.stdout, r.stderr) if with_err else r.stdout


def test_index_command_with_ray_reports_what_one_process_reports(cluster, tmp_path):
    """A folder given by a relative path (the workers read its files and have their own working directory): the
    same summary, skipped files included, and the same chunks, meta (source paths) included."""
    docs = tmp_path / "docs"; (docs / "sub").mkdir(parents=True)
    for i in range(6): (docs / "sub" / f"page{i}.md").write_text(f"# Page {i}\n\n" + f"Paragraph about topic {i}. " * 80)
    (docs / "notes.txt").write_text("Short notes on commits and branches.")
    (docs / "image.bin").write_bytes(b"\x00\x01\x02")
    one, one_err = _ragbench("index", "docs", "--db", "one", "--embedder", "hash", "--quiet", cwd=tmp_path, with_err=True)
    on_ray, ray_err = _ragbench("index", "docs", "--db", "ray", "--embedder", "hash", "--quiet", "--ray", cluster, cwd=tmp_path,
                                with_err=True)
    assert on_ray.replace(" in ray:", " in DB:") == one.replace(" in one:", " in DB:"), (one, on_ray)
    assert "7 documents" in one and "image.bin" in one_err and "image.bin" in ray_err   # issue 40: the skip list on stderr
    a, b = _rows(ChunkIndex.open(tmp_path / "one")), _rows(ChunkIndex.open(tmp_path / "ray"))
    assert sorted(a) == sorted(b) and all(a[k]["meta"] == b[k]["meta"] for k in a)


def test_pipeline_passes_ray_to_the_index_step(cluster, tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text("steps:\n  - name: index\n    parameters: {embedder: hash}\n")
    _ragbench("pipeline", cfg, "--out", tmp_path / "run", "--ray", cluster)
    nb = (tmp_path / "run" / "notebooks" / "index.ipynb").read_text()
    assert f'ray = \\"{cluster}\\"' in nb                                     # papermill injected the parameter
    idx = ChunkIndex.open(tmp_path / "run" / "db")
    one = ChunkIndex.build(tmp_path / "one", chunk_documents(load_documents(sample_corpus_path()), mode="auto"), "hash", progress=False)
    assert sorted(idx._all_ids()) == sorted(one._all_ids())
