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


def _ray(*args, env) -> str:
    "Run a `ray` CLI command; returns its output, or an error message starting with 'failed'."
    r = subprocess.run([str(Path(sys.executable).parent / "ray"), *args], env=env, capture_output=True, text=True, timeout=300)
    return r.stdout if r.returncode == 0 else f"failed: ray {' '.join(args)}\n{r.stdout}\n{r.stderr}"


def _start(address: str, env: dict, tries: int = 3) -> None:
    "Start the head and a second node; on a busy machine Ray's fixed 30 s wait for a node can run out, so try again."
    port = address.rsplit(":", 1)[1]
    common = ["--num-cpus", "1", "--object-store-memory", str(300 * 2**20), "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    for i in range(tries):
        _ray("stop", env=env)
        out = _ray("start", "--head", "--port", port, "--include-dashboard=false", *common, env=env)
        if not out.startswith("failed"): out = _ray("start", "--address", address, *common, env=env)
        if not out.startswith("failed"): break
    assert not out.startswith("failed"), out


@pytest.fixture(scope="session")
def cluster():
    "The address of a two-node Ray cluster on this host (head + one worker node, 1 CPU each)."
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "RAY_USAGE_STATS_ENABLED": "0"}
    address = f"127.0.0.1:{_free_port()}"
    try:
        _start(address, env)
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
