"""The Ray suite's cluster: two Ray nodes on this host (`ray start --head` and a second `ray start --address`),
one CPU each, shared by every test of the session and stopped at the end. Without the `ray` extra the suite
fails at once, naming the install command (it never skips)."""
import os, socket, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ["RAY_AUTH_MODE"] = "token"   # Ray 2.60's default for a head node; every node and driver must agree (read at import)

try:
    import ray  # noqa: F401
except ImportError:  # a loud failure, not a skip
    raise RuntimeError('the Ray suite needs the ray extra: pip install -e ".[ray]"') from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _ray(*args, env, tries: int = 1) -> None:
    "Run a `ray` CLI command, failing with its output; a node start is tried again when the node was too slow to come up."
    for i in range(tries):
        r = subprocess.run([str(Path(sys.executable).parent / "ray"), *args], env=env, capture_output=True, text=True, timeout=300)
        if r.returncode == 0: return
        if "timed out during startup" not in r.stderr + r.stdout: break   # Ray waits 30 s (fixed) for a raylet
    assert r.returncode == 0, f"ray {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"


@pytest.fixture(scope="session")
def cluster():
    "The address of a two-node Ray cluster on this host (head + one worker node, 1 CPU each)."
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "RAY_USAGE_STATS_ENABLED": "0"}
    port = _free_port(); address = f"127.0.0.1:{port}"
    common = ["--num-cpus", "1", "--object-store-memory", str(300 * 2**20), "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    _ray("stop", env=env)
    try:
        _ray("start", "--head", "--port", str(port), "--include-dashboard=false", *common, env=env, tries=3)
        _ray("start", "--address", address, *common, env=env, tries=3)
        os.environ["RAGBENCH_RAY_ADDRESS"] = address
        import ray
        from ragbench.scale.cluster import connect
        connect(address)
        deadline = time.time() + 60
        while sum(n["Alive"] for n in ray.nodes()) < 2 and time.time() < deadline: time.sleep(0.5)
        yield address
    finally:
        import ray
        ray.shutdown()
        os.environ.pop("RAGBENCH_RAY_ADDRESS", None)
        _ray("stop", env=env)
