"""The README's command blocks work as written (issue 39, N6).

The offline block (the fenced bash block that opens with `LLM=${LLM:-...}`) runs line by line in a copy of the
checkout, with `LLM` pointed at the fake server its second line starts, and every line must exit 0. Two changes are
made to it first, each for speed or isolation only: the fake server's port 8765 becomes a free one (tests run side by
side), and `ragbench index` / `ragbench static` get `--embedder hash` (the bundled all-MiniLM-L6-v2 takes about a minute
per corpus on 2 cores; the demo and the index tests run it). The next bash block (a key, a model server, Ray or the
notebooks extra) is checked with `ragbench COMMAND --help`: each command exists and takes every `--option` the line
gives it."""
import os, re, shlex, shutil, socket, subprocess, sys, time
from pathlib import Path

import pytest

from test_readme import readme_blocks

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def offline_block() -> tuple[int, str]:
    "(position among the bash blocks, text) of the README's offline command block."
    found = [(i, b) for i, b in enumerate(readme_blocks(README)) if b.startswith("LLM=${LLM:-")]
    assert len(found) == 1, "the README has one command block that opens with LLM=${LLM:-...}"
    return found[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def for_the_test(line: str, port: int) -> str:
    "A README line as the test runs it: another port, and the model-free embedder for indexing."
    line = line.replace("8765", str(port))
    if re.match(r"ragbench (index|static) ", line): line = line.replace(" --db ", " --embedder hash --db ", 1)
    return line


def checkout_copy(dest: Path) -> Path:
    "The checkout's tracked files (as they are in the working tree) copied to `dest`."
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for f in filter(None, files.split("\0")):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(src, dest / f)
    return dest


def test_the_offline_block_comes_after_the_two_commands():
    pos, block = offline_block()
    assert pos >= 2, "README commands 1 and 2 stay the first two bash blocks (.ci/run runs them by position)"
    assert "path/to/" not in block and "ragbench fake-llm-server" in block and block.splitlines()[-1].startswith("kill %1")
    llm_lines = [l for l in block.splitlines() if "--llm " in l or "--judge-llm " in l]
    assert llm_lines and all('"$LLM"' in l for l in llm_lines), "every model comes from the one variable LLM"


@pytest.mark.timeout(900)
def test_the_offline_block_runs_line_by_line(tmp_path):
    _, block = offline_block()
    port = free_port()
    lines = [for_the_test(l, port) for l in block.splitlines() if l.strip()]
    rcfile = tmp_path / "rc.txt"
    script = ["trap 'kill $(jobs -p) 2>/dev/null' EXIT"]
    for n, line in enumerate(lines):
        script += [f"echo '@@ line {n}' >&2; t0=$SECONDS", line, f'echo "{n} $? $((SECONDS - t0))" >> {shlex.quote(str(rcfile))}']
        if line.startswith("ragbench fake-llm-server"):   # wait until it answers
            script.append(f"for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done")
    work = checkout_copy(tmp_path / "checkout")
    env = {**os.environ, "LLM": f"openai:http://127.0.0.1:{port}/v1@fake", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(work)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p and Path(p).resolve() != ROOT])}
    t0 = time.time()
    p = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env, capture_output=True, text=True, timeout=840)
    out = p.stdout + p.stderr
    ran = [l.split() for l in rcfile.read_text().splitlines()] if rcfile.exists() else []
    rcs = {n: rc for n, rc, _ in ran}
    failed = [f"{lines[int(n)]!r} exited {rc}" for n, rc in rcs.items() if rc != "0"]
    print("slowest:", sorted(((int(s), lines[int(n)][:60]) for n, _, s in ran), reverse=True)[:6])
    assert len(rcs) == len(lines) and not failed, (failed or f"ran {len(rcs)} of {len(lines)} lines", out[-6000:])
    assert (work / "runs" / "report.html").is_file() and (work / "runs" / "eval" / "summary.json").is_file()
    print(f"{len(lines)} README lines in {time.time() - t0:.0f} s")


def key_block() -> list[str]:
    "The lines of the bash block after the offline one (a key, a model server, Ray or the notebooks extra)."
    pos, _ = offline_block()
    blocks = readme_blocks(README)
    assert len(blocks) > pos + 1, "a second block follows the offline one"
    return [l for l in blocks[pos + 1].splitlines() if l.strip()]


def test_the_second_block_is_checked_with_help():
    lines = key_block()
    assert any("gemini:" in l for l in lines) and any("--ray" in l for l in lines) and any("ragbench run " in l for l in lines)
    helps = {}
    for line in lines:
        words = shlex.split(line.split("  #")[0])
        assert words[0] == "ragbench", line
        sub = words[1]
        if sub not in helps:
            h = subprocess.run([sys.executable, "-m", "ragbench.cli", sub, "--help"], cwd=ROOT, capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
            assert h.returncode == 0, (line, h.stderr[-2000:])
            helps[sub] = h.stdout
        missing = [w for w in words if w.startswith("--") and not re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", helps[sub])]
        assert not missing, f"{line!r}: `ragbench {sub} --help` has no {missing}"
