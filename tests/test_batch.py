"""Provider batch mode (issue 42): TRIAD and evaluate runs whose LLM requests go out as OpenAI or Gemini batch jobs,
through the real SDK clients against the fake server's batch endpoints; counted, budgeted, resumed after a kill.

    python -m pytest -q tests/test_batch.py
"""
import json, os, signal, subprocess, sys, time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ragbench.cli import main
from ragbench.corpus import hotpot_chunks
from ragbench.llm import make_llm
from ragbench.testing import FakeLLMServer

HOTPOT = ROOT.parent / "shared" / "data" / "hotpotqa" / "hotpotqa_train100.json"
POLL = "0.05"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from ragbench.index import ChunkIndex
    if not HOTPOT.exists(): pytest.fail(f"HotpotQA sample not found at {HOTPOT} (../shared/data beside the checkout)")
    return ChunkIndex.build(tmp_path_factory.mktemp("batch") / "db", hotpot_chunks(HOTPOT, 12), "hash", progress=False)


def _args(index, out, llm, *extra):
    return ["triad", "--db", str(index.db_dir), "--out", str(out), "--llm", llm, "--n", "4", "--binary-share", "0",
            "--types", "comparison,intersection", "--concurrency", "8", *extra]


def _journal(out: Path) -> list:
    return [json.loads(l) for l in (out / "batches.jsonl").read_text().splitlines() if l.strip()]


def _jobs(out: Path) -> list:
    "The journal's job lines (a job's id and its requests' cache keys)."
    return [r for r in _journal(out) if "job" in r and "keys" in r]


def _items(out: Path) -> list:
    return [(i["id"], i["question"], i["answer"], i.get("difficulty"), i.get("contexts"))
            for i in map(json.loads, open(out / "dataset.jsonl"))]


def _summary(out: Path) -> dict: return json.loads((out / "summary.json").read_text())


def _killed_after_its_first_jobs(cmd: list, env: dict, out: Path) -> list:
    "Start `cmd`, kill it once its first batch jobs are journaled (none ends while it runs); its journaled jobs."
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while time.time() - t0 < 120 and p.poll() is None and not ((out / "batches.jsonl").exists() and _jobs(out)):
        time.sleep(0.05)
    time.sleep(0.5)                                   # more jobs may start; none ends
    assert p.poll() is None, f"finished before the kill: {p.communicate()}"
    p.send_signal(signal.SIGKILL); p.wait()
    return _jobs(out)


def _resumed(cmd: list, env: dict, out: Path, srv, killed: list) -> tuple[list, dict]:
    "Run `cmd` again, its jobs ending now: (its journaled jobs, the server's stats); the killed run's jobs collected."
    srv.batch_polls = 1
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    jobs = _jobs(out)
    assert {j["job"] for j in jobs[:len(killed)]} == {j["job"] for j in killed}   # collected, not submitted again
    return jobs, srv.stats()


def test_triad_in_batch_mode_accepts_the_same_items_and_counts_every_inner_request(index, tmp_path, capsys):
    "The same run with and without --provider-batch: the same items; the server saw batch jobs only, as many inner requests as the meter."
    with FakeLLMServer() as srv:
        llm = f"openai:{srv.url}/v1@fake-model"
        t0 = time.perf_counter()
        assert main(_args(index, tmp_path / "plain", llm)) == 0
        plain_s, plain = time.perf_counter() - t0, srv.stats()
        srv.reset_stats()
        t0 = time.perf_counter()
        assert main(_args(index, tmp_path / "batch", llm, "--provider-batch", "--batch-poll", POLL)) == 0
        batch_s, st = time.perf_counter() - t0, srv.stats()
    assert _items(tmp_path / "batch") == _items(tmp_path / "plain")
    s, jobs = _summary(tmp_path / "batch"), _jobs(tmp_path / "batch")
    assert st["by_api"] == {"openai_batch": st["requests"]} and st["batch_jobs"] == len(jobs) > 0
    assert s["llm"]["calls"] == st["requests"] == sum(len(j["keys"]) for j in jobs) == plain["requests"]
    sizes = [len(j["keys"]) for j in jobs]
    print(f"\nbatch mode: {len(jobs)} jobs, {sum(sizes) / len(jobs):.1f} requests per job (max {max(sizes)}), "
          f"{batch_s:.1f} s wall; unbatched {plain['requests']} requests, {plain_s:.1f} s", file=sys.__stderr__)


def test_batch_price_is_half_in_the_estimate_and_the_meter(index, tmp_path, capsys):
    "The estimate prices --provider-batch at the batch price (half the list price; `MODEL@batch` in prices overrides)."
    from ragbench.llm import price_for
    assert price_for("gpt-4.1-mini", batch=True) == (0.2, 0.8)
    assert price_for("gpt-4.1-mini", {"gpt-4.1-mini@batch": (0.1, 0.1)}, batch=True) == (0.1, 0.1)
    ests = []
    for extra in ((), ("--provider-batch",)):
        assert main(_args(index, tmp_path / "est", "openai:gpt-4.1-mini", "--estimate", *extra)) == 0
        ests.append(json.loads(capsys.readouterr().out))
    assert ests[1]["total"]["cost_usd"] == pytest.approx(ests[0]["total"]["cost_usd"] / 2, rel=0.01)
    assert ests[1]["provider_batch"] is True
    with FakeLLMServer() as srv:
        assert make_llm(f"openai:{srv.url}/v1@gpt-4.1-mini", batch={"poll": 0.05}).price == (0.2, 0.8)


@pytest.mark.parametrize("provider,job_lines", [("openai", "kept"), ("openai", "lost"), ("gemini", "kept"),
                                                ("gemini", "lost")])
def test_a_killed_batch_run_collects_its_journaled_jobs_instead_of_sending_them_again(index, tmp_path, provider,
                                                                                      job_lines):
    """Killed after its first jobs were journaled (they never end while it runs), the same command collects them; with
    the job lines lost (a kill between the provider's reply and the journal) it finds the jobs by their tags."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with FakeLLMServer(batch_polls=10**6) as srv:
        env.update(GEMINI_API_KEY="test-key", RAGBENCH_GEMINI_BASE_URL=srv.url)
        llm = f"openai:{srv.url}/v1@fake-model" if provider == "openai" else "gemini:gemini-2.5-flash"
        cmd = [sys.executable, "-m", "ragbench.cli", *_args(index, out, llm, "--provider-batch", "--batch-poll", POLL)]
        killed = _killed_after_its_first_jobs(cmd, env, out)
        sent = sum(e.get("e") == "send" for e in map(json.loads, (out / "calls.jsonl").read_text().splitlines()))
        assert srv.stats()["requests"] == 0 and killed and sent == sum(len(j["keys"]) for j in killed)
        if job_lines == "lost":
            lines = (out / "batches.jsonl").read_text().splitlines()
            (out / "batches.jsonl").write_text("".join(l + "\n" for l in lines if '"job"' not in l))
        jobs, st = _resumed(cmd, env, out, srv, killed)
    assert all(j.get("recovered") for j in jobs[:len(killed)]) == (job_lines == "lost")
    keys_killed = {k for j in killed for k in j["keys"]}
    assert not keys_killed & {k for j in jobs[len(killed):] for k in j["keys"]}
    s = _summary(out)
    assert s["accepted"] == 4 and s["llm"]["calls"] == st["requests"] == sum(len(j["keys"]) for j in jobs)
    assert st["batch_jobs"] == len(jobs)


def test_max_calls_holds_in_batch_mode(index, tmp_path, capsys):
    "A budget counts each request before its job is submitted: no job holds a request past --max-calls."
    with FakeLLMServer() as srv:
        args = _args(index, tmp_path / "run", f"openai:{srv.url}/v1@fake-model", "--provider-batch", "--batch-poll",
                     POLL, "--max-calls", "9")
        for _ in range(2): assert main(args) == 0
        st = srv.stats()
    assert "budget spent" in capsys.readouterr().err
    assert st["requests"] <= 9 and sum(len(j["keys"]) for j in _jobs(tmp_path / "run")) == st["requests"]
    assert _summary(tmp_path / "run")["llm"]["calls"] == st["requests"]
    with FakeLLMServer() as srv:
        assert main(_args(index, tmp_path / "run", f"openai:{srv.url}/v1@fake-model", "--max-calls", "9")) == 0
    assert "without --provider-batch, the requests of a job it has not collected are sent again" in capsys.readouterr().err


def test_a_failed_batch_job_is_an_error_naming_it(index, tmp_path, capsys):
    "A job that expires leaves its requests unanswered: the run's error names the job (exit 1)."
    with FakeLLMServer(batch_outcome="expired") as srv:
        rc = main(_args(index, tmp_path / "run", f"openai:{srv.url}/v1@fake-model", "--provider-batch", "--batch-poll",
                        POLL))
    err = capsys.readouterr().err
    named = [j["job"] for j in _jobs(tmp_path / "run") if f"batch job {j['job']} ended expired" in err]
    assert rc == 1 and len(named) == 1, err
    assert {"job": named[0], "failed": "expired"} in _journal(tmp_path / "run")


def test_gemini_batch_mode_generates_the_same_items(index, tmp_path, monkeypatch):
    "Gemini's batch API (inline requests) through the google-genai client: the same items as unbatched Gemini."
    with FakeLLMServer() as srv:
        monkeypatch.setenv("GEMINI_API_KEY", "test-key"); monkeypatch.setenv("RAGBENCH_GEMINI_BASE_URL", srv.url)
        assert main(_args(index, tmp_path / "plain", "gemini:gemini-2.5-flash")) == 0
        plain = srv.stats()["requests"]
        srv.reset_stats()
        assert main(_args(index, tmp_path / "batch", "gemini:gemini-2.5-flash", "--provider-batch", "--batch-poll",
                          POLL)) == 0
        st = srv.stats()
    assert _items(tmp_path / "batch") == _items(tmp_path / "plain")
    assert st["by_api"] == {"gemini_batch": plain} and _summary(tmp_path / "batch")["llm"]["calls"] == plain


def test_batch_mode_refuses_a_model_without_a_batch_api(index, tmp_path, capsys):
    assert main(_args(index, tmp_path / "run", "template", "--provider-batch")) == 2
    assert "--provider-batch needs a provider with a batch API" in capsys.readouterr().err


def _dataset(index, path: Path) -> Path:
    "Four answerable items over the index's first chunks."
    from ragbench.core import Dataset, QAItem
    chunks = list(index.iter_chunks())[:8]
    items = [QAItem(id=f"q{i}", method="triad", kind="comparison", answer=c.text.split(".")[0], gold_chunk_ids=[c.id],
                    question=f"What does the passage about {c.meta.get('title', c.id)} say?")
             for i, c in enumerate(chunks[::2])]
    Dataset(items).write(path)
    return path


def test_evaluate_judges_in_gemini_batch_mode_score_as_unbatched(index, tmp_path, monkeypatch):
    "A judging run on Gemini's batch API: the same scores as unbatched, every inner request counted."
    from ragbench.eval import read_scores
    ds = _dataset(index, tmp_path / "ds.jsonl")
    (tmp_path / "setups.yaml").write_text(f"defaults: {{db: '{index.db_dir}'}}\nbaseline: {{name: dense2, top_k: 2}}\n")
    with FakeLLMServer() as srv:
        monkeypatch.setenv("GEMINI_API_KEY", "test-key"); monkeypatch.setenv("RAGBENCH_GEMINI_BASE_URL", srv.url)
        argv = ["evaluate", "--dataset", str(ds), "--setups", str(tmp_path / "setups.yaml"), "--llm",
                "gemini:gemini-2.5-flash", "--judge-llm", "gemini:gemini-2.5-flash", "--no-bertscore", "--quiet"]
        assert main([*argv, "--out", str(tmp_path / "plain")]) == 0
        plain = srv.stats()["requests"]
        srv.reset_stats()
        assert main([*argv, "--out", str(tmp_path / "batch"), "--provider-batch", "--batch-poll", POLL]) == 0
        st = srv.stats()
    rows = lambda d: sorted((r["item_id"], r["mode"], json.dumps(r["metrics"], sort_keys=True)) for r in read_scores(d))
    assert rows(tmp_path / "batch") == rows(tmp_path / "plain")
    usage = json.loads((tmp_path / "batch" / "summary.json").read_text())["usage"]["run"]
    assert st["by_api"] == {"gemini_batch": plain} and usage["calls"] == plain > 0 and st["batch_jobs"] > 0


def test_dora_in_batch_mode_writes_the_same_items(index, tmp_path):
    "DoRA takes --provider-batch as TRIAD does: the same questions, batch jobs only, the meter = the server's count."
    with FakeLLMServer() as srv:
        args = ["dora", "--db", str(index.db_dir), "--llm", f"openai:{srv.url}/v1@fake-model", "--per-style", "1",
                "--styles", "find,explain"]
        assert main([*args, "--out", str(tmp_path / "plain")]) == 0
        plain = srv.stats()["requests"]
        srv.reset_stats()
        assert main([*args, "--out", str(tmp_path / "batch"), "--provider-batch", "--batch-poll", POLL]) == 0
        st = srv.stats()
    q = lambda d: [json.loads(l)["question"] for l in open(d / "dataset.jsonl")]
    assert q(tmp_path / "batch") == q(tmp_path / "plain")
    assert st["by_api"] == {"openai_batch": plain} and _summary(tmp_path / "batch")["llm"]["calls"] == plain > 0


def test_a_server_without_response_format_switches_to_the_schema_in_the_prompt_in_batch_mode(tmp_path):
    "As unbatched: a 400 on response_format inside a job resends the request (in a new job) with the schema in the prompt."
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    with FakeLLMServer(openai_structured=False) as srv:
        llm = make_llm(f"openai:{srv.url}/v1@fake-model", batch={"journal": tmp_path / "b.jsonl", "poll": 0.05,
                                                                 "window": 0.05})
        assert llm.complete("What is the capital of France?", schema) == {"answer": "unknown"}
        st = srv.stats()
    assert st["rejected"] == 1 and st["requests"] == llm.meter.totals()["calls"] == 2 and st["batch_jobs"] == 2
    assert llm.backend.inner._native is False


def test_batch_mode_is_refused_on_ray(index, tmp_path, capsys, monkeypatch):
    "Batch jobs are journaled by this process: --provider-batch with a Ray cluster is a usage error, before any work."
    monkeypatch.setenv("RAGBENCH_RAY_ADDRESS", "auto")
    assert main(_args(index, tmp_path / "run", "openai:http://127.0.0.1:9/v1@fake-model", "--provider-batch")) == 2
    assert "--provider-batch runs in this process: drop --ray" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_killed_evaluation_in_batch_mode_collects_its_jobs_and_scores_as_unbatched(index, tmp_path):
    "Killed while its answer and judge jobs run, the same evaluate command collects them: no job is submitted twice."
    from ragbench.eval import read_scores
    ds = _dataset(index, tmp_path / "ds.jsonl")
    (tmp_path / "setups.yaml").write_text(f"defaults: {{db: '{index.db_dir}'}}\nbaseline: {{name: dense2, top_k: 2}}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with FakeLLMServer(batch_polls=10**6) as srv:
        spec = f"openai:{srv.url}/v1@fake-model"
        argv = [sys.executable, "-m", "ragbench.cli", "evaluate", "--dataset", str(ds), "--setups",
                str(tmp_path / "setups.yaml"), "--llm", spec, "--judge-llm", spec, "--no-bertscore", "--quiet"]
        plain = subprocess.run([*argv, "--out", str(tmp_path / "plain")], env=env, capture_output=True, text=True)
        assert plain.returncode == 0, plain.stderr
        srv.reset_stats()
        out = tmp_path / "batch"
        cmd = [*argv, "--out", str(out), "--provider-batch", "--batch-poll", POLL]
        killed = _killed_after_its_first_jobs(cmd, env, out)
        assert killed and srv.stats()["requests"] == 0                     # no job ended before the kill
        jobs, st = _resumed(cmd, env, out, srv, killed)
    assert st["batch_jobs"] == len(jobs) and st["requests"] == sum(len(j["keys"]) for j in jobs)
    rows = lambda d: sorted((r["item_id"], r["mode"], json.dumps(r["metrics"], sort_keys=True)) for r in read_scores(d))
    assert rows(out) == rows(tmp_path / "plain")
    usage = json.loads((out / "summary.json").read_text())["usage"]["run"]
    assert usage["calls"] == st["requests"], (usage, st["requests"])     # the meter holds across the kill
