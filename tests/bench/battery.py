"""Issue 24's hostile battery, re-run: each case is one defect the reviewer's battery found, through the command line.

    python tests/bench/battery.py                                  # the checkout's own code
    python tests/bench/battery.py --under . --under /tmp/before    # side by side: this code, then an older tree
    python tests/bench/battery.py --only labels_schema,run_pid_reused --json battery.json

`--under TREE` runs ragbench from the source tree TREE (`python -m ragbench.cli` with `PYTHONPATH=TREE`); make a tree
of an older commit with `git worktree add --detach /tmp/before COMMIT` (the code before issue 24: `afd879e^`). The
fake LLM server, the hostile one included, always comes from this checkout, so an old tree meets the same replies.
Each case prints `ok` (the behaviour issue 24 asks for) or `defect` with what it saw; a case whose own set-up fails
says `could not run`. The full-disk and read-only cases mount a tmpfs (root only; else they cannot run). Kill -9 of
a `--ray local` driver is the Ray suite's `tests/ray/test_scale_gen.py` (it needs a cluster), not a case here.
"""
import argparse, contextlib, json, os, re, select, shutil, signal, socket, subprocess, sys, tempfile, time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "ragbench" / "data" / "gitdocs_sample.jsonl"
HOTPOT = ROOT / "ragbench" / "data" / "hotpotqa_sample.json"
LABELS, ENTITIES = "label passages as relevant", "find what links passages"
BASE_ENV = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "PYTHONPATH")}
BASE_ENV.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
CASES: dict = {}


def case(item: str):
    "Register a case (a function of the Battery, returning (ok, what it saw)) for the issue's `item`."
    def deco(f): CASES[f.__name__] = (item, f); return f
    return deco


class Server:
    "This checkout's fake LLM server (`ragbench fake-llm-server --port 0 ARGS`) as a child process."
    def __init__(self, *args):
        env = {**BASE_ENV, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "ragbench.cli", "fake-llm-server", "--port", "0", *map(str, args)],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        m = re.match(r"fake LLM server on (http://127\.0\.0\.1:(\d+))\b", self.proc.stdout.readline() if ready else "")
        if not m: self.stop(); raise RuntimeError("the fake LLM server did not start")
        self.url, self.port = m.group(1), int(m.group(2))
        self.spec = f"openai:{self.url}/v1@fake-model"

    def stats(self) -> dict:
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as r: return json.load(r)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL); self.proc.wait()

    def __enter__(self): return self
    def __exit__(self, *exc): self.stop()


@contextlib.contextmanager
def tmpfs(size: str, read_only: bool = False):
    "A tmpfs of `size` on a fresh folder (root only), optionally read-only."
    where = Path(tempfile.mkdtemp(prefix="rb-battery-"))
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if p.returncode: where.rmdir(); raise RuntimeError(f"cannot mount a tmpfs: {p.stderr.strip()}")
    try:
        if read_only: subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)]); shutil.rmtree(where, ignore_errors=True)


def one_line(p, *words, rc=2) -> bool:
    "Exit `rc`, no traceback, and the last stderr line is `ragbench ...` naming every one of `words`."
    last = (p.stderr.strip().splitlines() or [""])[-1]
    return p.returncode == rc and "Traceback" not in p.stderr and last.startswith("ragbench") and all(w in last for w in words)


def seen(p) -> str:
    "What a finished command showed: exit code and the last stderr line."
    return f"exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:150]}" + (" (traceback)" if "Traceback" in p.stderr else "")


def rows(path: Path) -> list:
    "The parsable records of a JSONL file (none if it is missing)."
    if not path.exists(): return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError): out.append(json.loads(line))
    return out


def hf_record(rec: dict, i: int) -> dict:
    "A HotpotQA record of the original layout in the Hugging Face layout (columns of titles and sentences)."
    return {"id": f"q{i}", "question": rec["question"], "answer": rec["answer"], "type": rec.get("type"), "level": rec.get("level"),
            "supporting_facts": {"title": [t for t, _ in rec["supporting_facts"]], "sent_id": [s for _, s in rec["supporting_facts"]]},
            "context": {"title": [t for t, _ in rec["context"]], "sentences": [s for _, s in rec["context"]]}}


class Battery:
    "The cases' shared set-up for one source tree: a work folder, the command, a hashed index of the Git docs sample."
    def __init__(self, tree: Path, work: Path):
        self.tree, self.work = tree.resolve(), work
        self.env = {**BASE_ENV, "PYTHONPATH": str(self.tree)}
        self._db = None

    def rb(self, *args, timeout=600, env=None, **kw) -> subprocess.CompletedProcess:
        "`ragbench ARGS` from the tree under test."
        return subprocess.run([sys.executable, "-m", "ragbench.cli", *map(str, args)], env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, cwd=self.work, **kw)

    def path(self, name: str) -> Path:
        "A fresh path in the work folder."
        p = self.work / name
        if p.exists(): shutil.rmtree(p) if p.is_dir() else p.unlink()
        return p

    @property
    def db(self) -> Path:
        "The Git docs sample indexed with the model-free hash embedder (made once)."
        if self._db is None:
            db = self.path("db_hash"); p = self.rb("index", SAMPLE, "--db", db, "--embedder", "hash", "--quiet")
            if p.returncode: raise RuntimeError(f"indexing the sample failed: {seen(p)}")
            self._db = db
        return self._db

    def triad(self, out: Path, spec: str, *more, n=1, seeds=3):
        "`ragbench triad` on the sample index."
        return self.rb("triad", "--db", self.db, "--out", out, "--n", n, "--concurrency", 2, "--max-seeds", seeds, "--llm", spec, *more)

    def dataset(self, server: Server) -> Path:
        "A small TRIAD dataset to evaluate, made once by this checkout's ragbench (the same items for every tree)."
        out = self.work / "small"
        if not (out / "dataset.jsonl").exists():
            p = self.rb("triad", "--db", self.db, "--out", out, "--n", 2, "--concurrency", 2, "--max-seeds", 8,
                        "--llm", server.spec, env={"PYTHONPATH": str(ROOT)})
            if p.returncode: raise RuntimeError(f"the small dataset failed: {seen(p)}")
        if not rows(out / "dataset.jsonl"): raise RuntimeError("the small TRIAD run wrote no items to evaluate")
        return out / "dataset.jsonl"


# ---------------------------------------------------------------- silent wrong results
def _unusable_labels(b: Battery, fault: str):
    with Server("--stage-faults", f"{LABELS}={fault}") as s:
        out = b.path(f"labels_{fault}"); p = b.triad(out, s.spec)
    acc = [i for i in rows(out / "dataset.jsonl") if i.get("status") == "accepted"]
    unlabelled = sum(c.get("relevant") is None for i in acc for c in i.get("contexts", []))
    loud = p.returncode != 0 or "labels" in p.stderr
    return not unlabelled and loud, f"{len(acc)} accepted, {unlabelled} unlabelled contexts in them; {seen(p)}"

@case("1: every relevance-label reply is schema-breaking JSON")
def labels_schema(b): return _unusable_labels(b, "schema")

@case("1: every relevance-label reply misses every required field")
def labels_missing(b): return _unusable_labels(b, "missing")

@case("1: every relevance-label reply is bad JSON")
def labels_badjson(b): return _unusable_labels(b, "badjson")

@case("1: every entity reply misses every required field")
def entity_missing(b):
    with Server("--stage-faults", f"{ENTITIES}=missing") as s:
        out = b.path("entities_missing"); p = b.triad(out, s.spec)
    summ = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    fails = (summ.get("usage_by_stage") or {}).get("triad.entities", {}).get("failures", 0)
    silent = [x for x in rows(out / "seeds.jsonl") if x.get("bridge_via") == "fallback"]   # no entity reply parses
    return fails >= 1 and not silent, f"entity failures counted: {fails}; seeds on the fallback bridge silently: {len(silent)}; {seen(p)}"

@case("2: manifest.json deleted, resumed with another --seed")
def manifest_deleted(b):
    with Server() as s:
        out = b.path("manifest_gone"); first = b.triad(out, s.spec, n=2, seeds=6)
        if first.returncode: raise RuntimeError(seen(first))
        (out / "manifest.json").unlink(); p = b.triad(out, s.spec, "--seed", 1, n=4, seeds=12)
    return p.returncode == 2 and "Traceback" not in p.stderr, seen(p)

@case("3: calls.jsonl deleted after the budget is spent")
def calls_deleted(b):
    with Server() as s:
        out = b.path("calls_gone"); b.triad(out, s.spec, "--max-calls", 30, n=20, seeds=40)
        first = s.stats()["requests"]; (out / "calls.jsonl").unlink(missing_ok=True)
        b.triad(out, s.spec, "--max-calls", 30, n=20, seeds=40)
        total = s.stats()["requests"]
    return total <= 30, f"requests received: {first} in the first run, {total} after the resume (budget 30)"

def _static(b: Battery, name: str, change) -> subprocess.CompletedProcess:
    recs = [hf_record(r, i) for i, r in enumerate(json.loads(HOTPOT.read_text())[:3])]
    change(recs[1])
    f = b.path(f"{name}.jsonl"); f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return b.rb("static", f, "--format", "hotpotqa", "--db", b.path(f"{name}_db"), "--out", b.path(f"{name}_out.jsonl"),
                "--embedder", "hash", "--quiet")

@case("4: static, a Hugging Face-layout record with a gold paragraph's sentences cut")
def static_damaged(b):
    p = _static(b, "hf_cut", lambda r: r["context"]["sentences"].pop())
    return one_line(p, "context") and re.search(r":2\b", p.stderr) is not None, seen(p)

@case("4: evaluate --answers with one item answered twice")
def answers_twice(b):
    with Server() as s:
        ds = b.dataset(s)
        item = rows(ds)[0]["id"]
        f = b.path("answers_twice.jsonl")
        f.write_text("".join(json.dumps({"item_id": item, "answer": a, "retrieved_chunk_ids": []}) + "\n" for a in ("first", "second")))
        p = b.rb("evaluate", "--dataset", ds, "--out", b.path("eval_twice"), "--answers", f, "--db", b.db, "--no-bertscore")
    return one_line(p, item), seen(p)

def _own_table(b: Battery, name: str, text_of) -> Path:
    "The sample index copied into a table of its own column names, texts changed by `text_of(i, text)`."
    import lancedb, pyarrow as pa
    t = lancedb.connect(str(b.db)).open_table("chunks").to_arrow()
    texts = [text_of(i, x) for i, x in enumerate(t.column("text").to_pylist())]
    own = pa.table({"chunk_id": t.column("id"), "content": pa.array(texts), "embedding": t.column("vector"), "doc": t.column("doc_id")})
    db = b.path(name); lancedb.connect(str(db)).create_table("docs", own)
    return db

OWN = ["--table", "docs", "--column", "id=chunk_id", "--column", "text=content", "--column", "vector=embedding",
       "--column", "doc_id=doc", "--embedder", "hash"]

@case("4: an own table with null texts feeds empty passages")
def own_null_texts(b):
    db = _own_table(b, "own_null", lambda i, x: None if i % 3 == 0 else x)
    p = b.rb("search", "--db", db, *OWN, "--json", "-k", 10, "--mode", "dense", "git branch")
    try: hits = json.loads(p.stdout)
    except ValueError: return False, seen(p)
    empty = sum(not (h.get("text") or "").strip() for h in hits)
    return p.returncode == 0 and not empty and hits, f"{len(hits)} hits, {empty} with an empty text; {seen(p)}"

# ---------------------------------------------------------------- tracebacks instead of messages
@case("tracebacks: out of space in triad")
def full_disk_triad(b):
    with Server() as s, tmpfs("24k") as disk:
        p = b.triad(disk / "out", s.spec); left = list(disk.rglob("*.tmp"))
    return one_line(p, "no space left", rc=1) and not left, f"{seen(p)}; .tmp files left: {len(left)}"

@case("tracebacks: out of space in index")
def full_disk_index(b):
    with tmpfs("48k") as disk:
        p = b.rb("index", SAMPLE, "--db", disk / "db", "--embedder", "hash", "--quiet"); left = list(disk.rglob("*.tmp"))
    return one_line(p, "no space left", rc=1) and not left, f"{seen(p)}; .tmp files left: {len(left)}"

@case("tracebacks: a read-only --out")
def read_only_out(b):
    with Server() as s, tmpfs("1m", read_only=True) as ro: p = b.triad(ro / "out", s.spec)
    return one_line(p, "read-only"), seen(p)

@case("tracebacks: a read-only --db for index")
def read_only_db(b):
    with tmpfs("1m", read_only=True) as ro: p = b.rb("index", SAMPLE, "--db", ro / "db", "--embedder", "hash", "--quiet")
    return one_line(p, "read-only"), seen(p)

@case("tracebacks: static, a null question")
def static_null_question(b):
    p = _static(b, "hf_null_q", lambda r: r.update(question=None))
    return one_line(p, "question"), seen(p)

@case("tracebacks: static, an integer answer")
def static_int_answer(b):
    p = _static(b, "hf_int_a", lambda r: r.update(answer=42))
    return one_line(p, "answer"), seen(p)

@case("tracebacks: a corrupt Parquet dataset")
def corrupt_parquet(b):
    f = b.path("bad.parquet"); f.write_bytes(b"PAR1" + os.urandom(2000) + b"PAR1")
    setups = b.path("setups_parquet.yaml"); setups.write_text('baseline: {name: dense5, top_k: 5, llm: "template"}\n')
    p = b.rb("evaluate", "--dataset", f, "--out", b.path("eval_parquet"), "--setups", setups, "--db", b.db, "--no-bertscore")
    return one_line(p, "bad.parquet"), seen(p)

@case("tracebacks: a setups file that is not UTF-8")
def setups_latin1(b):
    with Server() as s:
        ds = b.dataset(s); f = b.path("setups_latin1.yaml")
        f.write_bytes(f'defaults: {{llm: "{s.spec}"}}\nbaseline: {{name: "d\xe9nse", top_k: 5}}\n'.encode("latin-1"))
        p = b.rb("evaluate", "--dataset", ds, "--out", b.path("eval_latin1"), "--setups", f, "--db", b.db, "--no-bertscore")
    return one_line(p, "setups_latin1.yaml"), seen(p)

@case("tracebacks: judge_llm: 42 in a setups file")
def judge_llm_42(b):
    with Server() as s:
        ds = b.dataset(s); f = b.path("setups_42.yaml")
        f.write_text(f'defaults: {{llm: "{s.spec}"}}\nbaseline: {{name: dense5, top_k: 5}}\njudge_llm: 42\n')
        p = b.rb("evaluate", "--dataset", ds, "--out", b.path("eval_42"), "--setups", f, "--db", b.db, "--no-bertscore")
    return one_line(p, "judge_llm"), seen(p)

@case("tracebacks: an own table whose text column holds integers")
def own_int_texts(b):
    import lancedb, pyarrow as pa
    db = _own_table(b, "own_int", lambda i, x: x)
    t = lancedb.connect(str(db)).open_table("docs").to_arrow()
    t = t.set_column(t.schema.get_field_index("content"), "content", pa.array(range(t.num_rows)))
    shutil.rmtree(db); lancedb.connect(str(db)).create_table("docs", t)
    p = b.rb("search", "--db", db, *OWN, "-k", 3, "git branch")
    return one_line(p, "content"), seen(p)

@case("tracebacks: the run's cache folder is a file")
def cache_is_file(b):
    with Server() as s:
        out = b.path("cache_file"); out.mkdir(); (out / "cache").write_text("not a folder")
        p = b.triad(out, s.spec)
    return one_line(p, "cache"), seen(p)

@case("tracebacks: output piped into a reader that is gone (| head)")
def reader_gone(b):
    q = subprocess.Popen([sys.executable, "-m", "ragbench.cli", "search", "--db", str(b.db), "-k", "20", "git branch"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=b.env, cwd=b.work)
    q.stdout.close(); err = q.stderr.read(); q.wait(timeout=300)
    return "Traceback" not in err and "BrokenPipe" not in err, f"exit {q.returncode}" + (" (traceback)" if "Traceback" in err else "")

# ---------------------------------------------------------------- wrong behaviour, unclear messages
@case("behaviour: a model that never returns parseable JSON")
def never_parses(b):
    with Server("--stage-faults", "=badjson") as s:           # every system prompt contains ''
        out = b.path("never_parses"); p = b.triad(out, s.spec, n=2, seeds=20)
        sent = s.stats()["requests"]
    said = p.stdout + p.stderr
    return p.returncode != 0 and "raise --max-seeds" not in said, f"{sent} requests; {seen(p)}"

@case("behaviour: Retry-After 3 s from an OpenAI-compatible server")
def retry_after(b):
    with Server("--faults", "retry_after", "--retry-after", 3) as s:
        out = b.path("retry_after"); p = b.rb("triad", "--db", b.db, "--out", out, "--n", 1, "--concurrency", 1,
                                              "--max-seeds", 1, "--llm", s.spec)
        times = s.stats().get("times", [])
    gap = times[1] - times[0] if len(times) > 1 else None
    return gap is not None and gap >= 2.9, f"second request {gap if gap is None else round(gap, 2)} s after the 429; {seen(p)}"

@case("behaviour: --estimate with a key in the base URL")
def estimate_key(b):
    secret = "sk-battery-0123456789abcdef"
    spec = f"openai:http://127.0.0.1:9/v1?api_key={secret}@fake-model"
    p = b.rb("triad", "--db", b.db, "--out", b.path("estimate_key"), "--n", 2, "--llm", spec, "--estimate")
    leaked = secret in p.stdout + p.stderr
    return p.returncode == 0 and not leaked, f"key printed: {leaked}; {seen(p)}"

@case("behaviour: ragbench run whose recorded pid now belongs to another process")
def run_pid_reused(b):
    nb = b.path("tiny.ipynb")
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "x = 1", "outputs": [],
                                         "execution_count": None, "id": "p1"},
                                        {"cell_type": "code", "metadata": {}, "source": "print(x)", "outputs": [],
                                         "execution_count": None, "id": "c1"}],
                              "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                              "nbformat": 4, "nbformat_minor": 5}))
    out = b.path("run_pid")
    first = b.rb("run", nb, "--out", out, "--no-progress")
    if first.returncode: raise RuntimeError(seen(first))
    other = subprocess.Popen(["sleep", "120"])
    try:
        state = json.loads((out / "run.json").read_text())
        rec = state["steps"]["tiny"]; rec.update(status="running", pid=other.pid, host=socket.gethostname())
        (out / "run.json").write_text(json.dumps(state))
        p = b.rb("run", nb, "--out", out, "--no-progress", "--force")
    finally: other.kill()
    return p.returncode == 0, seen(p)

@case("behaviour: index given a Hugging Face-layout HotpotQA file")
def index_hf_file(b):
    recs = [hf_record(r, i) for i, r in enumerate(json.loads(HOTPOT.read_text())[:3])]
    f = b.path("hf_index.jsonl"); f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    p = b.rb("index", f, "--db", b.path("hf_index_db"), "--embedder", "hash", "--quiet")
    return p.returncode == 0 or one_line(p, "ragbench static"), seen(p)

@case("behaviour: an HTML page with status 200")
def html_200(b):
    with Server("--stage-faults", "=html") as s:
        out = b.path("html_200"); p = b.triad(out, s.spec, n=1, seeds=2)
    said = p.stdout + p.stderr
    return "503" not in said and re.search("html", said, re.I) is not None, seen(p)


def run_tree(tree: Path, only) -> dict:
    "Every case (or `only` those) against the ragbench of `tree`: {case: (verdict, what it saw, seconds)}."
    out = {}
    with tempfile.TemporaryDirectory(prefix="rb-battery-") as d:
        b = Battery(tree, Path(d))
        for name, (item, f) in CASES.items():
            if only and name not in only: continue
            t = time.time()
            try: good, saw = f(b); verdict = "ok" if good else "defect"
            except Exception as e: verdict, saw = "could not run", f"{type(e).__name__}: {e}"[:300]
            out[name] = (verdict, saw, round(time.time() - t, 1))
            print(f"  [{tree.name or tree}] {name}: {verdict} ({out[name][2]} s) - {saw}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--under", action="append", type=Path, help="source tree to test (repeatable; default: this checkout)")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--json", type=Path, help="write the results here")
    a = ap.parse_args()
    trees = a.under or [ROOT]; only = {c for c in a.only.split(",") if c}
    if unknown := only - set(CASES): ap.error(f"unknown cases: {', '.join(sorted(unknown))}")
    results = {}
    for t in trees:
        print(f"== {t.resolve()} ({subprocess.run(['git', '-C', str(t), 'log', '-1', '--format=%h'], capture_output=True, text=True).stdout.strip()})", flush=True)
        results[str(t)] = run_tree(t, only)
    names = [n for n in CASES if not only or n in only]
    print("\n| case | issue item | " + " | ".join(str(t) for t in trees) + " |\n|---|---|" + "---|" * len(trees))
    for n in names: print(f"| {n} | {CASES[n][0]} | " + " | ".join(results[str(t)][n][0] for t in trees) + " |")
    for t in trees:
        v = [r[0] for r in results[str(t)].values()]
        print(f"{t}: {v.count('ok')} ok, {v.count('defect')} defects, {v.count('could not run')} could not run, of {len(v)}")
    if a.json: a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
