"""Generation on the Ray cluster: the same dataset as one process, one call budget and one rate limit for every
worker (checked at the fake server), shards on both nodes, and a killed driver that resumes without duplicates."""
import json, math, os, signal, subprocess, sys, time
from pathlib import Path
from ragbench.core import Chunk, QAItem, read_jsonl
from ragbench.gen.base import OneChunkQuestions, run_generation
from ragbench.index import ChunkIndex
from ragbench.llm import make_llm
from ragbench.scale.gen import RayExecutor
from ragbench.testing import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]


def _index(path, n=80):
    chunks = [Chunk(id=f"c{i:03d}", doc_id=f"d{i % 7}", text=f"Fact {i}: the item number {i} weighs {i * 7} grams.") for i in range(n)]
    return ChunkIndex.build(path, chunks, "hash:64", progress=False)


def _ids(run):
    return [i.id for i in read_jsonl(Path(run) / "dataset.jsonl", QAItem)]


def _sends(run):
    return sum(1 for l in open(Path(run) / "calls.jsonl") if json.loads(l)["e"] == "send")


def test_same_dataset_as_one_process_and_shards_on_both_nodes(cluster, tmp_path):
    idx = _index(tmp_path / "db")
    with FakeLLMServer(latency=0.05) as srv:
        spec = f"openai:{srv.url}/v1@fake"
        one = run_generation(OneChunkQuestions(make_llm(spec), n=30), idx, tmp_path / "one", progress=False)
        srv.reset_stats()
        ex = RayExecutor(cluster, in_flight=8, shard_size=5)
        on_ray = run_generation(OneChunkQuestions(make_llm(spec), n=30), idx, tmp_path / "ray", executor=ex, progress=False)
        seen = srv.stats()["requests"]
    assert _ids(tmp_path / "ray") == _ids(tmp_path / "one") and len(_ids(tmp_path / "one")) == 30
    assert on_ray["stop_reason"] == one["stop_reason"] == "target reached"
    assert on_ray["llm"]["calls"] == _sends(tmp_path / "ray") == seen          # counted = booked = received
    assert len(ex.last_run["nodes"]) == 2, ex.last_run                          # shards ran on both nodes


def test_one_budget_for_the_cluster_and_it_holds_across_runs(cluster, tmp_path):
    idx = _index(tmp_path / "db")
    with FakeLLMServer(latency=0.2) as srv:
        spec = f"openai:{srv.url}/v1@fake"
        run = lambda: run_generation(OneChunkQuestions(make_llm(spec, max_concurrency=16), n=60), idx, tmp_path / "run",
                                     max_calls=12, executor=RayExecutor(cluster, in_flight=16, shard_size=10), progress=False)
        s = run()
        first = srv.stats()["requests"]
        run()
        assert srv.stats()["requests"] == first                                 # the second invocation sends nothing
    assert s["stop_reason"].startswith("budget spent") and first <= 12 and _sends(tmp_path / "run") <= 12


def _busiest(times, window=1.0):
    "The most requests in any `window` seconds."
    times, best, j = sorted(times), 0, 0
    for i, t in enumerate(times):
        while times[j] < t - window: j += 1
        best = max(best, i - j + 1)
    return best


def test_one_rate_limit_for_the_cluster(cluster, tmp_path):
    """rpm=60: the bucket holds 60 requests and refills one a second, so any one-second window may see at most
    60 + 1 (+1 for timing jitter). Two workers each with their own bucket would send all 70 in the first second."""
    idx = _index(tmp_path / "db")
    with FakeLLMServer() as srv:
        method = OneChunkQuestions(make_llm(f"openai:{srv.url}/v1@fake", max_concurrency=16, rpm=60), n=70, max_tasks=70)
        run_generation(method, idx, tmp_path / "run", executor=RayExecutor(cluster, in_flight=16, shard_size=10), progress=False)
        st = srv.stats()
    assert st["requests"] == 70
    assert _busiest(st["times"]) <= 62, _busiest(st["times"])
    assert st["times"][-1] - st["times"][0] >= 8                               # the last 10 waited for the refill


DRIVER = """
import sys
from ragbench.gen.base import OneChunkQuestions, run_generation
from ragbench.index import ChunkIndex
from ragbench.llm import make_llm
from ragbench.scale.gen import RayExecutor
idx = ChunkIndex.open(sys.argv[1])
run_generation(OneChunkQuestions(make_llm(sys.argv[2], max_concurrency=4), n=40), idx, sys.argv[3],
               executor=RayExecutor(in_flight=4, shard_size=4), progress=False)
"""


def test_kill_the_driver_and_resume(cluster, tmp_path):
    idx = _index(tmp_path / "db")
    with FakeLLMServer(latency=0.3) as srv:
        spec = f"openai:{srv.url}/v1@fake"
        run_generation(OneChunkQuestions(make_llm(spec), n=40), idx, tmp_path / "one", progress=False)
        srv.reset_stats()
        env = {**os.environ, "RAGBENCH_RAY_ADDRESS": cluster, "PYTHONPATH": str(ROOT)}
        p = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "db"), spec, str(tmp_path / "ray")], env=env)
        journal, deadline = tmp_path / "ray" / "tasks.jsonl", time.time() + 120
        while time.time() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 8): time.sleep(0.2)
        p.send_signal(signal.SIGKILL); p.wait()
        at_kill = srv.stats()["requests"]
        done_before = len(journal.read_text().splitlines())
        assert 8 <= done_before < 40
        time.sleep(1.0)
        assert srv.stats()["requests"] - at_kill <= 8                            # at most what was in flight (2 workers x 4)
        subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "db"), spec, str(tmp_path / "ray")], env=env, check=True, timeout=300)
        seen = srv.stats()["requests"]
    ids = _ids(tmp_path / "ray")
    assert ids == _ids(tmp_path / "one") and len(ids) == len(set(ids)) == 40
    assert seen <= _sends(tmp_path / "ray")                                      # every request was booked before it was sent


def test_workers_of_a_killed_local_driver_stop_sending(tmp_path):
    "issue 24: kill -9 of `ragbench triad --ray local` (the driver started the cluster): its workers send nothing more (before: seconds more)."
    from ragbench.corpus import sample_corpus_path
    with FakeLLMServer(latency=0.2) as srv:
        spec = f"openai:{srv.url}/v1@fake"
        env = {k: v for k, v in os.environ.items() if k != "RAGBENCH_RAY_ADDRESS"} | {"PYTHONPATH": str(ROOT)}
        cli = str(Path(sys.executable).parent / "ragbench")
        subprocess.run([cli, "index", str(sample_corpus_path()), "--db", str(tmp_path / "db"), "--embedder", "hash", "--quiet"], env=env, check=True)
        p = subprocess.Popen([cli, "triad", "--db", str(tmp_path / "db"), "--out", str(tmp_path / "run"), "--n", "30", "--llm", spec,
                              "--ray", "local", "--concurrency", "8"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.time() + 180
        while time.time() < deadline and srv.stats()["requests"] < 30 and p.poll() is None: time.sleep(0.1)
        assert p.poll() is None, "the run ended before the kill"
        os.kill(p.pid, signal.SIGKILL); p.wait()
        at_kill = srv.stats()["requests"]
        time.sleep(4.0)
        late = srv.stats()["requests"] - at_kill
    try: os.killpg(p.pid, signal.SIGKILL)             # the Ray processes the driver started (they outlive it a while)
    except ProcessLookupError: pass
    print(f"\nrequests after the local driver's kill: {late}")
    assert late <= 16, f"{late} requests reached the server after the driver was killed (at most 2 workers x 8 were in flight)"


def _cli(*args):
    "Run `ragbench ARGS` (on Ray only when ARGS say so: no RAGBENCH_RAY_ADDRESS from this process)."
    env = {k: v for k, v in os.environ.items() if k != "RAGBENCH_RAY_ADDRESS"}
    r = subprocess.run([str(Path(sys.executable).parent / "ragbench"), *map(str, args)], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


def test_dora_command_on_ray_gives_the_one_process_dataset(cluster, tmp_path):
    from ragbench.corpus import chunk_documents, load_documents, sample_corpus_path
    ChunkIndex.build(tmp_path / "db", chunk_documents(load_documents(sample_corpus_path())), "hash", progress=False)
    with FakeLLMServer() as srv:
        common = ["--db", tmp_path / "db", "--per-style", 1, "--llm", f"openai:{srv.url}/v1@fake", "--no-progress", "--seed", 1]
        _cli("dora", "--out", tmp_path / "one", *common)
        _cli("dora", "--out", tmp_path / "ray", *common, "--ray", cluster)
    assert _ids(tmp_path / "ray") == _ids(tmp_path / "one") and _ids(tmp_path / "one")


def _stuck_method(n):
    "A method whose tasks after the first `n` wait forever (as a method's own pacing may, once its shard alone reached the target)."
    import asyncio
    from ragbench.gen.base import GenerationMethod, Task, TaskResult

    class StuckAfterTarget(GenerationMethod):
        name = "stuck"
        def __init__(self, n): self.target = n
        def plan(self, index, results): return [Task(id=f"s{i}", position=i) for i in range(40)]
        async def run_task(self, task, index):
            if task.position >= self.target: await asyncio.Event().wait()
            item = QAItem(id=f"q{task.position}", method="static", kind="single-hop", question=f"Q{task.position}?", answer="A")
            return TaskResult(task_id=task.id, position=task.position, outcome="accepted", items=[item])
    return StuckAfterTarget(n)


def test_tasks_beyond_the_frontier_are_dropped_even_if_they_never_finish(cluster, tmp_path):
    idx = _index(tmp_path / "db", n=5)
    t0 = time.time()
    s = run_generation(_stuck_method(5), idx, tmp_path / "run", executor=RayExecutor(cluster, in_flight=8, shard_size=10), progress=False)
    assert s["accepted"] == 5 and s["stop_reason"] == "target reached" and time.time() - t0 < 120


def _close(a, b) -> bool:
    "Equal, floats within 1e-6: the similarity encoder's float32 sums depend on what shares its batch (about 1e-7)."
    if isinstance(a, float) and isinstance(b, (int, float)): return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(a, dict) and isinstance(b, dict): return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list): return len(a) == len(b) and all(map(_close, a, b))
    return a == b


def _rows(path):
    keep = lambda r: {k: v for k, v in r.items() if k not in ("usage", "seconds", "at", "latency_s")}
    return sorted((keep(json.loads(l)) for l in open(path)), key=lambda r: json.dumps(r.get("item_id")) + json.dumps(
        [r.get("setup"), r.get("mode")]))


def test_triad_and_evaluate_on_ray_give_the_one_process_results(cluster, tmp_path, monkeypatch):
    """The triad and evaluate commands (called in this process, already joined to the cluster) with `ray`: the
    one-process dataset and the one-process scores (fake server)."""
    from ragbench.corpus import chunk_documents, load_documents, sample_corpus_path
    from ragbench.commands.evaluate import evaluate_command
    from ragbench.commands.triad import triad_command
    monkeypatch.delenv("RAGBENCH_RAY_ADDRESS", raising=False)
    ChunkIndex.build(tmp_path / "db", chunk_documents(load_documents(sample_corpus_path())), "hash", progress=False)
    with FakeLLMServer() as srv:
        spec = f"openai:{srv.url}/v1@fake"
        for name, ray in (("one", None), ("ray", cluster)):
            assert triad_command(db=str(tmp_path / "db"), out=str(tmp_path / f"t-{name}"), n=3, llm=spec, ray=ray) == 0
        assert _ids(tmp_path / "t-ray") == _ids(tmp_path / "t-one") and len(_ids(tmp_path / "t-one")) >= 3
        setups = tmp_path / "setups.yaml"
        setups.write_text(f'defaults: {{llm: "{spec}"}}\nbaseline: {{name: dense5, top_k: 5}}\n'
                          f'variants:\n  - {{name: bm25-3, retrieval: bm25, top_k: 3}}\njudge_llm: "{spec}"\n')
        for name, ray in (("one", None), ("ray", cluster)):
            assert evaluate_command(dataset=str(tmp_path / "t-one" / "dataset.jsonl"), db=str(tmp_path / "db"), setups=str(setups),
                                    out=str(tmp_path / f"e-{name}"), bertscore=False, quiet=True, batch_size=2, ray=ray) == 0
    one, on_ray = _rows(tmp_path / "e-one" / "scores.jsonl"), _rows(tmp_path / "e-ray" / "scores.jsonl")
    assert _close(on_ray, one) and len(one) >= 6, (one, on_ray)
