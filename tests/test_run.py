"""`ragbench run` / `ragbench pipeline`: papermill executes stage notebooks with parameters into a run
directory, keeps the executed notebooks, and a killed run resumes where it stopped."""
import json, os, signal, subprocess, sys, time
from pathlib import Path

import nbformat
import pytest

from ragbench.core import Dataset
from ragbench.papermill import RunError, find_notebook, load_state, notebook_parameters, run_notebook, _with_run_dir
from ragbench.pipeline import _load_pipeline_config
from ragbench.testing.demo import demo_run_dir

ROOT = Path(__file__).resolve().parents[1]
RUN = [sys.executable, "-m", "ragbench.cli", "run"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
       # subprocesses and their kernels import this checkout even where the editable install is stale
       "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}


def write_notebook(path, params: str, body: str) -> Path:
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(params); p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# A resumable stage"), p, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, str(path)); return path


SLOW_STAGE = """
import os, time
from ragbench.core import RunDir
run = RunDir(run_dir)
done = run.done_ids("items.jsonl")                 # stage code resumes by run dir
todo = [f"i{i}" for i in range(n) if f"i{i}" not in done]
run.append("executions.jsonl", {"pid": os.getpid(), "todo": len(todo)})
for iid in todo:
    time.sleep(delay)
    run.append("items.jsonl", {"id": iid})
print("processed", len(todo))
"""


def pid_alive(pid):
    try: os.kill(pid, 0); return True
    except ProcessLookupError: return False


def test_packaged_stage_notebook_with_parameters(tmp_path):
    "The packaged review-queue notebook runs headless with -p parameters; its outputs exist in the run dir."
    src = find_notebook("review_queue")
    assert set(notebook_parameters(src)) >= {"run_dir", "reviewer"}
    data = demo_run_dir(tmp_path / "data")
    (data / "reviews.jsonl").write_text(json.dumps({"item_id": Dataset.read(data / "dataset.jsonl")[0].id,
                                                    "decision": "reject", "by": "ana", "note": "x"}) + "\n")
    proc = subprocess.run(RUN + ["review_queue", "-p", "run_dir", str(data), "-p", "reviewer", "ana",
                                 "--out", str(tmp_path / "rec"), "--no-progress"],
                          capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    executed = tmp_path / "rec" / "notebooks" / "review_queue.ipynb"
    assert executed.exists()
    nb = json.loads(executed.read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert injected and "reviewer = \"ana\"" in "".join(injected[0]["source"])
    text = json.dumps(nb)
    assert "Static view" in text and "Judge calibration" in text       # headless summary rendered
    assert len(Dataset.read(data / "dataset.reviewed.jsonl")) == 3      # 4 accepted, 1 rejected by ana
    state = load_state(__import__("ragbench.core").core.RunDir(tmp_path / "rec"))
    assert state["steps"]["review_queue"]["status"] == "completed"
    assert state["steps"]["review_queue"]["parameters"] == {"run_dir": str(data), "reviewer": "ana"}


def test_killed_run_resumes(tmp_path):
    "Kill `ragbench run` half-way; the same command again resumes with the recorded parameters."
    nb = write_notebook(tmp_path / "slow.ipynb", "run_dir = '.'\nn = 3\ndelay = 0.0", SLOW_STAGE)
    out = tmp_path / "run"
    p = subprocess.Popen(RUN + [str(nb), "-p", "n", "8", "-p", "delay", "0.6", "--out", str(out), "--no-progress"],
                         env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    items = out / "items.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not items.exists() or len(items.read_text().splitlines()) < 2):
        assert p.poll() is None, p.stdout.read().decode()[-3000:]
        time.sleep(0.1)
    assert items.exists(), "the stage never started"
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    kernel_pid = json.loads((out / "executions.jsonl").read_text().splitlines()[0])["pid"]
    for _ in range(100):                       # the orphaned kernel notices its parent died and exits
        if not pid_alive(kernel_pid): break
        time.sleep(0.1)
    done_before = len(items.read_text().splitlines())
    assert 2 <= done_before < 8
    st = json.loads((out / "run.json").read_text())["steps"]["slow"]
    assert st["status"] == "running"           # killed: never marked finished

    proc = subprocess.run(RUN + [str(nb), "--out", str(out), "--no-progress"], env=ENV, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids = [json.loads(l)["id"] for l in items.read_text().splitlines()]
    assert sorted(ids) == sorted(f"i{i}" for i in range(8)) and len(ids) == 8   # all done, none twice
    execs = [json.loads(l) for l in (out / "executions.jsonl").read_text().splitlines()]
    assert len(execs) == 2 and execs[0]["todo"] == 8 and execs[1]["todo"] == 8 - done_before
    st = json.loads((out / "run.json").read_text())["steps"]["slow"]
    assert st["status"] == "completed" and st["parameters"]["n"] == 8 and st["parameters"]["delay"] == 0.6
    assert [a["resumed"] for a in st["attempts"]] == [False, True]
    assert (out / "notebooks" / "slow.ipynb").exists() and (out / "notebooks" / "slow.attempt1.ipynb").exists()
    # a third call sees a completed step and does nothing; a conflicting parameter is refused
    again = subprocess.run(RUN + [str(nb), "--out", str(out)], env=ENV, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already completed" in again.stderr
    bad = subprocess.run(RUN + [str(nb), "-p", "n", "9", "--out", str(out)], env=ENV, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "started with n=8" in bad.stderr


def test_pipeline_runs_steps_in_order_and_shows_progress(tmp_path):
    a = write_notebook(tmp_path / "10_make.ipynb", "run_dir = '.'\nn = 2",
                       "from pathlib import Path\nPath(run_dir, 'made.txt').write_text(str(n))")
    b = write_notebook(tmp_path / "20_use.ipynb", "run_dir = '.'\nscale = 1",
                       "from pathlib import Path\nv = int(Path(run_dir, 'made.txt').read_text()) * scale\n"
                       "Path(run_dir, 'used.txt').write_text(str(v))\nv")
    cfg = tmp_path / "pipe.yaml"
    cfg.write_text("parameters: {n: 7, llm: fake}\nsteps:\n  - 10_make.ipynb\n"
                   "  - {name: use, notebook: 20_use.ipynb, parameters: {scale: 3}}\n")
    assert [s["name"] for s in _load_pipeline_config(cfg)["steps"]] == ["make", "use"]
    proc = subprocess.run([sys.executable, "-m", "ragbench.cli", "pipeline", str(cfg), "--out", str(tmp_path / "r"),
                           "--no-progress"], env=ENV, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "r" / "used.txt").read_text() == "21"
    assert "[1/2] make: running" in proc.stderr and "[2/2] use: done" in proc.stderr
    executed = json.loads((tmp_path / "r" / "notebooks" / "use.ipynb").read_text())
    assert any("21" in json.dumps(c.get("outputs", [])) for c in executed["cells"])   # outputs kept inline
    bad = tmp_path / "bad.yaml"; bad.write_text("steps:\n  - {name: x, notebok: a.ipynb}\n")
    proc = subprocess.run([sys.executable, "-m", "ragbench.cli", "pipeline", str(bad)], env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "steps[0]: unknown field 'notebok'" in proc.stderr


def test_output_never_inside_nbs(tmp_path):
    with pytest.raises(RunError, match="inside"):
        run_notebook(find_notebook("review_queue"), {}, ROOT / "nbs" / "runs-x")
    assert not (ROOT / "nbs" / "runs-x").exists()


def run_pipeline(cfg: Path, out: Path, timeout=400):
    return subprocess.run([sys.executable, "-m", "ragbench.cli", "pipeline", str(cfg), "--out", str(out), "--no-progress"],
                          env=ENV, capture_output=True, text=True, timeout=timeout, cwd=cfg.parent)


def outputs_of(nb_path: Path) -> str:
    return json.dumps([c.get("outputs", []) for c in json.loads(nb_path.read_text())["cells"]])


def test_builtin_index_and_triad_steps(tmp_path):
    "step:index builds RUN/db from the bundled sample, step:triad generates into RUN (fake LLM, tiny budget)."
    cfg = tmp_path / "p.yaml"
    cfg.write_text("parameters: {llm: fake, embedder: hash}\nsteps:\n  - index\n  - {name: triad, parameters: {n: 2, max_seeds: 4}}\n")
    proc = run_pipeline(cfg, tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    assert (run / "db").is_dir() and (run / "summary.json").exists() and (run / "seeds.jsonl").exists()
    st = json.loads((run / "run.json").read_text())
    assert st["order"] == ["index", "triad"] and st["steps"]["triad"]["parameters"]["llm"] == "fake"
    assert st["steps"]["index"]["parameters"] == {"embedder": "hash", "run_dir": str(run.resolve())}   # llm not declared
    assert "chunk_id" in outputs_of(run / "notebooks" / "index.ipynb")          # the sample-chunks table
    assert "seeds tried" in outputs_of(run / "notebooks" / "triad.ipynb")


def test_builtin_evaluate_and_report_steps_show_plots_inline(tmp_path):
    "On a reviewed demo run: step:evaluate scores two setups, step:report writes report.html and shows the figures."
    from ragbench.index import ChunkIndex
    from ragbench.widgets import ReviewQueue
    from ragbench.testing.demo import demo_chunks
    run = demo_run_dir(tmp_path / "run")
    ChunkIndex.build(run / "db", demo_chunks(), embedder="hash:256", progress=False)
    q = ReviewQueue(run, reviewer="ana"); q.reject(); q.accept()                 # evaluate uses the reviewed dataset
    cfg = tmp_path / "p.yaml"; cfg.write_text("parameters: {llm: fake}\nsteps: [evaluate, report]\n")
    proc = run_pipeline(cfg, run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = [json.loads(l) for l in (run / "eval" / "scores.jsonl").read_text().splitlines()]
    assert {r["setup"] for r in scores} == {"baseline", "top3"} and len({r["item_id"] for r in scores}) == 3
    assert (run / "report.html").stat().st_size > 10_000
    out = outputs_of(run / "notebooks" / "report.ipynb")
    assert "application/vnd.plotly.v1+json" in out and "text/html" in out        # figures inline, also for static viewers
    assert "application/vnd.plotly.v1+json" in outputs_of(run / "notebooks" / "evaluate.ipynb")


def test_run_a_step_by_name_makes_a_dataset(tmp_path):
    "`ragbench run triad -p n 2 --out RUN` alone: indexes the bundled sample into RUN/db, then writes RUN/dataset.jsonl."
    out = tmp_path / "nb"
    proc = subprocess.run(RUN + ["triad", "-p", "n", "2", "-p", "llm", "fake", "-p", "embedder", "hash", "--out", str(out),
                                 "--no-progress"], env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "triad: completed" in proc.stdout and (out / "db").is_dir()
    assert len(Dataset.read(out / "dataset.jsonl")) >= 1
    assert json.loads((out / "run.json").read_text())["steps"]["triad"]["source"].endswith("steps/triad.ipynb")


def test_output_folder_parameter_gets_the_run_dir_whatever_its_name(tmp_path):
    "A notebook whose output-folder parameter is `out` (like 80_demo) writes into --out, not a temporary folder."
    assert _with_run_dir({}, notebook_parameters(find_notebook("80_demo")), tmp_path) == {"out": str(tmp_path.resolve())}
    nb = write_notebook(tmp_path / "demo_like.ipynb", "out = None\nn = 2",
                        "import os, tempfile\nfrom pathlib import Path\nPath(out or tempfile.mkdtemp(), 'made.txt').write_text(str(n))")
    proc = subprocess.run(RUN + [str(nb), "--out", str(tmp_path / "r"), "--no-progress"], env=ENV, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "r" / "made.txt").read_text() == "2"


def test_failed_notebook_exits_1_and_names_the_cell(tmp_path):
    nb = write_notebook(tmp_path / "boom.ipynb", "run_dir = '.'", "raise ValueError('boom')")
    proc = subprocess.run(RUN + [str(nb), "--out", str(tmp_path / "r"), "--no-progress"], env=ENV, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 1 and "ragbench run: boom: boom.ipynb failed in cell" in proc.stderr and "ValueError: boom" in proc.stderr


def test_pipeline_shows_the_kernels_item_progress(tmp_path):
    "A step's tqdm.auto bar (a widget in the kernel) is mirrored as a text bar on the pipeline's stderr, item by item."
    write_notebook(tmp_path / "items.ipynb", "run_dir = '.'\nn = 6",
                   "from tqdm.auto import tqdm\nimport time\nfor i in tqdm(range(n), desc='scoring'): time.sleep(0.05)")
    cfg = tmp_path / "p.yaml"; cfg.write_text("steps:\n  - items.ipynb\n")
    proc = subprocess.run([sys.executable, "-m", "ragbench.cli", "pipeline", str(cfg), "--out", str(tmp_path / "r")],
                          env=ENV, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "scoring: 100%" in proc.stderr and "6/6" in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.index("[1/1] items: running") < proc.stderr.index("scoring: 100%") < proc.stderr.index("[1/1] items: done")
    # issue 25: stderr here is a pipe, as in a log or CI: whole lines, no carriage returns or cursor moves (they were garbled)
    assert "\r" not in proc.stderr and "\x1b[" not in proc.stderr, repr(proc.stderr[-1500:])
    scoring = [l for l in proc.stderr.splitlines() if l.startswith("scoring")]
    assert scoring[-1].startswith("scoring: 100%") and len(scoring) == len(set(scoring)) <= 12, scoring
    quiet = subprocess.run([sys.executable, "-m", "ragbench.cli", "pipeline", str(cfg), "--out", str(tmp_path / "q"),
                            "--no-progress"], env=ENV, capture_output=True, text=True, timeout=240)
    assert quiet.returncode == 0 and "scoring" not in quiet.stderr


def test_stage_notebook_run_honours_out(tmp_path):
    "issue 25: `ragbench run triad.run --out D` writes the walk-through's index and run into D, not a temporary folder."
    out = tmp_path / "D"
    proc = subprocess.run(RUN + ["triad.run", "--out", str(out), "--no-progress"], env=ENV, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "run" / "dataset.jsonl").exists() and (out / "db").is_dir(), sorted(p.name for p in out.iterdir())


def test_run_takes_its_options_from_a_config_file(tmp_path):
    "issue 18: `ragbench run NOTEBOOK --config FILE` reads out, param and progress from the file; a flag given wins."
    nb = write_notebook(tmp_path / "made.ipynb", "out = None\nn = 2",
                        "from pathlib import Path\nPath(out, 'made.txt').write_text(str(n))")
    conf = tmp_path / "run.yaml"
    conf.write_text(f"out: {tmp_path / 'from_file'}\nparam: [[n, '7']]\nprogress: false\n")
    proc = subprocess.run(RUN + [str(nb), "--config", str(conf), "--out", str(tmp_path / "given")], env=ENV,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "given" / "made.txt").read_text() == "7"     # the file's param n, in --out (beats the file's)
    assert not (tmp_path / "from_file").exists()
