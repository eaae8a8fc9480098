"""`--db s3://bucket/db` end to end (index on the Ray cluster, search, triad, evaluate) against a local S3-compatible
server (moto's server mode on 127.0.0.1, started here): nothing is written to a local folder named after the URI, and
the table, its sidecar and the runs' manifests live in the bucket."""
import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3(monkeypatch):
    "The endpoint of a moto S3 server on 127.0.0.1 holding an empty bucket 'ragbench'; the AWS_* variables point at it."
    from moto.server import ThreadedMotoServer
    import boto3
    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    try:
        host, port = srv.get_host_and_port()
        url = f"http://{host}:{port}"
        for k, v in dict(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1",
                         AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=url, AWS_ENDPOINT=url, AWS_ALLOW_HTTP="true").items():
            monkeypatch.setenv(k, v)
        client = boto3.client("s3", endpoint_url=url)
        client.create_bucket(Bucket="ragbench")
        yield client
    finally:
        srv.stop()


def _ragbench(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "RAGBENCH_RAY_ADDRESS"}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
    r = subprocess.run([str(Path(sys.executable).parent / "ragbench"), *map(str, args)], capture_output=True, text=True,
                       timeout=600, cwd=cwd, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


def test_s3_db_end_to_end(cluster, s3, tmp_path):
    db = "s3://ragbench/corpus/db"
    docs = tmp_path / "docs"; docs.mkdir()
    for i in range(8): (docs / f"page{i}.md").write_text(f"# Page {i}\n\n" + f"Item {i} weighs {i * 7} grams. " * 60)
    out = _ragbench("index", "docs", "--db", db, "--embedder", "hash", "--quiet", "--ray", cluster, cwd=tmp_path)
    assert "8 documents" in out, out
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="ragbench")["Contents"]}
    assert "corpus/db/chunks.ragbench.json" in keys and any(k.startswith("corpus/db/chunks.lance/") for k in keys)
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "s3:").is_symlink()     # no local folder named after the URI
    again = _ragbench("index", "docs", "--db", db, "--embedder", "hash", "--quiet", cwd=tmp_path)   # one process: resumes
    assert "(0 new, " in again, again
    hits = json.loads(_ragbench("search", "how much does item 3 weigh", "--db", db, "--mode", "hybrid", "--json", cwd=tmp_path))
    assert len(hits) == 5 and any(h["doc_id"].startswith("page3") or "Item 3" in h["text"] for h in hits)
    _ragbench("triad", "--db", db, "--out", "gen", "--llm", "fake", "--n", "3", "--seed", "1", cwd=tmp_path)
    items = [json.loads(l) for l in (tmp_path / "gen" / "dataset.jsonl").read_text().splitlines() if l.strip()]
    assert sum(i.get("answerable", True) for i in items) == 3      # plus their unanswerable variants
    (tmp_path / "setups.yaml").write_text("setups:\n  - {name: dense-top3, retrieval: dense, top_k: 3}\n")
    _ragbench("evaluate", "--dataset", "gen/dataset.jsonl", "--db", db, "--setups", "setups.yaml", "--out", "eval",
              "--llm", "template", "--judges", "none", "--no-bertscore", "--quiet", cwd=tmp_path)
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert "dense-top3" in json.dumps(summary)
    assert not (tmp_path / "s3:").exists()
