"""Benchmark of the LLM layer's concurrency against the fake server (a script, not a test).

    python tests/bench/bench_llm.py [--n 64] [--latency 0.05] [--concurrency 1,4,16] [--apis openai,gemini,fake]
    python tests/bench/bench_llm.py --local     # load time and decode speed of make_llm("local")

For each API and concurrency c it sends N structured-output calls through `LLM.acomplete` (asyncio.gather,
max_concurrency=c, no cache) and compares the wall time with the ideal N * latency / c. Goal: ratio <= 1.15.
A first untimed wave of c calls in the same event loop pays the one-off costs (async client and SSL context
creation, ~50 ms; TCP connections) and is shown as warmup_s.
The server runs in a child process (`--inprocess` to share this process) so its CPU does not compete for
this process's GIL. `fake` is the FakeLLM backend with the same latency: the LLM layer without HTTP.
cpu_ms/call is this process's CPU time per timed call; when it nears the budget latency / c, this process
(not the waiting) is the bottleneck, and the ratio rises above 1 whatever the LLM layer does.
Peak memory: process max RSS, and the tracemalloc peak of one extra untimed run per API at the top concurrency.
"""
import argparse, asyncio, multiprocessing as mp, os, resource, sys, time, tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from pydantic import BaseModel
from ragbench.llm import LLMError, arun, make_llm
from ragbench.testing import FakeLLM, FakeLLMServer
from ragbench.prompts import format_chunks

CHUNKS = [("c1", "Ada Lovelace", "Ada Lovelace wrote the first published program for the Analytical Engine."),
          ("c2", "Analytical Engine", "The Analytical Engine was designed by Charles Babbage in London.")]


class Question(BaseModel):
    question: str
    answer: str
    entities: list[str]


def serve(port_q, latency):
    "Child process: run the fake server and report its port."
    with FakeLLMServer(latency=latency) as srv:
        port_q.put(srv.port)
        while True: time.sleep(3600)


def make(api, url, c, latency):
    os.environ.setdefault("RAGBENCH_BENCH_KEY", "bench-key")
    if api == "openai": return make_llm(f"openai:{url}/v1@bench-model", max_concurrency=c)
    if api == "gemini": return make_llm("gemini:bench-model", base_url=url, max_concurrency=c, api_key_env="RAGBENCH_BENCH_KEY")
    if api == "fake": return FakeLLM(latency=latency, max_concurrency=c)
    raise SystemExit(f"unknown api {api}")


async def run_calls(llm, n, tag, warm=0):
    "`warm` untimed calls (client start-up, TCP connections), then `n` timed calls; returns (warm_s, timed_s, cpu_s per call)."
    prompt = "Write a question.\n" + format_chunks(CHUNKS)
    async def wave(k, label):
        out = await asyncio.gather(*(llm.acomplete(f"{prompt}\n[{tag} {label} {i}]", Question, stage=label) for i in range(k)))
        assert all(isinstance(q, Question) for q in out)
    try:
        t0 = time.perf_counter()
        if warm: await wave(warm, "warm")
        t1, c1 = time.perf_counter(), time.process_time()
        await wave(n, "bench")
        return t1 - t0, time.perf_counter() - t1, (time.process_time() - c1) / n
    finally:
        await llm.aclose()


def bench_local(max_tokens=128):
    "Load time and tokens/s of the default local model, free text and schema-constrained."
    from ragbench.llm import load_llama
    from ragbench.prompts import get_prompt, render_prompt
    llm = make_llm("local", max_tokens=max_tokens, max_repairs=0)
    t0 = time.perf_counter(); load_llama(llm.backend.path, llm.backend.n_ctx, llm.backend.n_threads, llm.backend.extra_bufts)
    print(f"local model {Path(llm.backend.path).name}: load {time.perf_counter() - t0:.2f} s")
    llm.complete("Say hi.", stage="warm")
    system, user = render_prompt("smoke", word="banana")
    cases = [("free text", "Write a long story about a lighthouse keeper.", None, None),
             ("free text", "Explain how rivers form, in detail.", None, None),
             ("schema (smoke)", user, get_prompt("smoke").output, system),
             ("schema (Question)", "Write a question.\n" + format_chunks(CHUNKS), Question, None)]
    for label, prompt, schema, sys_ in cases:
        before = llm.usage.totals()["output_tokens"]
        t0 = time.perf_counter()
        try: out = llm.complete(prompt, schema, system=sys_, stage=label)
        except LLMError as e: out = f"FAILED: {e}"
        dt = time.perf_counter() - t0
        n = llm.usage.totals()["output_tokens"] - before
        print(f"  {label:18} {n:4d} tokens in {dt:5.2f} s = {n / dt:5.1f} tok/s   {str(out)[:70]!r}")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--apis", default="openai,gemini,fake")
    p.add_argument("--inprocess", action="store_true")
    p.add_argument("--local", action="store_true", help="measure the local llama-cpp model instead")
    a = p.parse_args(argv)
    if a.local: return bench_local()
    levels = [int(x) for x in a.concurrency.split(",")]
    child, srv = None, None
    if a.inprocess:
        srv = FakeLLMServer(latency=a.latency).start(); url = srv.url
    else:
        q = mp.get_context("spawn").Queue()
        child = mp.get_context("spawn").Process(target=serve, args=(q, a.latency), daemon=True); child.start()
        url = f"http://127.0.0.1:{q.get(timeout=60)}"
    print(f"server {url} latency={a.latency}s n={a.n} ({'in-process' if a.inprocess else 'child process'})")
    print(f"{'api':8} {'conc':>4} {'wall_s':>7} {'ideal_s':>7} {'ratio':>6}  verdict  {'warmup_s':>8}  cpu_ms/call (budget)  maxrss_MB")
    worst = 0.0
    try:
        for api in a.apis.split(","):
            arun(run_calls(make(api, url, 1, a.latency), 1, f"import-{api}"))  # imports
            for c in levels:
                llm = make(api, url, c, a.latency)
                warm, wall, cpu = arun(run_calls(llm, a.n, f"{api}-{c}", warm=c))
                ideal = a.n * a.latency / c
                ratio = wall / ideal; worst = max(worst, ratio)
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                u = llm.usage.by_stage()["bench"]
                assert u["calls"] == a.n and u["failures"] == 0, u
                print(f"{api:8} {c:>4} {wall:7.3f} {ideal:7.3f} {ratio:6.3f}  {'ok  ' if ratio <= 1.15 else 'SLOW'}     {warm:8.3f}  {cpu * 1000:6.2f} ({a.latency / c * 1000:6.2f})  {rss:9.1f}")
            tracemalloc.start()
            arun(run_calls(make(api, url, levels[-1], a.latency), a.n, f"mem-{api}"))
            _, peak = tracemalloc.get_traced_memory(); tracemalloc.stop()
            print(f"{api:8} tracemalloc peak for {a.n} calls at concurrency {levels[-1]}: {peak / 2**20:.2f} MiB")
    finally:
        if srv: srv.stop()
        if child: child.terminate(); child.join(5)
    print(f"worst ratio {worst:.3f} (goal <= 1.15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
