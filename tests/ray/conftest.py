"""The Ray suite's cluster: two Ray nodes on this host (`ray start --head` and a second `ray start --address`),
one CPU each, shared by every test of the session and stopped at the end. Without the `ray` extra the suite
fails at once, naming the install command (it never skips)."""
import os, random, socket, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ["RAY_AUTH_MODE"] = "token"   # Ray 2.60's default for a head node; every node and driver must agree (read at import)

try:
    import ray  # noqa: F401
except ImportError:  # a loud failure, not a skip
    raise RuntimeError('the Ray suite needs the ray extra: pip install -e ".[ray]"') from None


def _free_port(low: int = 20000, high: int = 30000) -> int:
    """A free port below the ephemeral range (32768+), so that no outgoing connection nor any port Ray picks
    itself takes it between now and the node's start (Ray's worker ports are 10002-19999)."""
    while True:
        with socket.socket() as s:
            try: s.bind(("127.0.0.1", random.randrange(low, high))); return s.getsockname()[1]
            except OSError: pass


def _ray(*args, env) -> str:
    "Run a `ray` CLI command; returns its output, or an error message starting with 'failed'."
    r = subprocess.run([str(Path(sys.executable).parent / "ray"), *args], env=env, capture_output=True, text=True, timeout=300)
    return r.stdout if r.returncode == 0 else f"failed: ray {' '.join(args)}\n{r.stdout}\n{r.stderr}"


def _agent_ports() -> list:
    """A node's agent ports, chosen here: with port 0 the raylet waits for the agents to write their port files and
    dies when a loaded machine makes that take longer than its fixed wait."""
    names = ("--dashboard-agent-grpc-port", "--dashboard-agent-listen-port", "--metrics-export-port", "--runtime-env-agent-port")
    return [a for n in names for a in (n, str(_free_port()))]


def _start(address: str, env: dict, tries: int = 4) -> None:
    "Start the head and a second node; on a busy machine Ray's fixed 30 s wait for a node can run out, so try again."
    port = address.rsplit(":", 1)[1]
    _ray("get-auth-token", "--generate", env=env)   # a new machine has no token yet, and `ray start` makes none (Ray 2.60)
    common = ["--num-cpus", "1", "--object-store-memory", str(300 * 2**20), "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    for i in range(tries):
        _ray("stop", env=env)
        out = _ray("start", "--head", "--port", port, "--include-dashboard=false", *common, *_agent_ports(), env=env)
        if not out.startswith("failed"): out = _ray("start", "--address", address, *common, *_agent_ports(), env=env)
        if not out.startswith("failed"): break
    assert not out.startswith("failed"), out


@pytest.fixture(scope="session")
def cluster():
    "The address of a two-node Ray cluster on this host (head + one worker node, 1 CPU each)."
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "RAY_USAGE_STATS_ENABLED": "0"}
    address = f"127.0.0.1:{_free_port()}"
    try:
        import ray
        from ragbench.scale.cluster import connect
        alive = 0
        for attempt in range(3):                  # a node that dies right after its start (a port taken meanwhile): start again
            _start(address, env)
            connect(address)
            deadline = time.time() + 60
            while sum(n["Alive"] for n in ray.nodes()) < 2 and time.time() < deadline: time.sleep(0.5)
            alive = sum(n["Alive"] for n in ray.nodes())
            if alive == 2: break
            ray.shutdown()
        assert alive == 2, f"the two-node cluster did not stay up after 3 starts (logs: /tmp/ray/session_latest/logs)"
        yield address
    finally:
        import ray
        ray.shutdown()
        _ray("stop", env=env)
