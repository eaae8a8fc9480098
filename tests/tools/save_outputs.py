"""Run notebooks headless and save the outputs a reader should see: figures (as PNG), short printed text, tables
and example items. What only a live kernel needs is dropped: widget views, progress bars and library warnings (stderr lines
other than ragbench's own messages),
the outputs of hidden and exported cells. A notebook with a failing cell is left as it was, and named.

    python tests/tools/save_outputs.py nbs/50_report.01_figures.ipynb ...   # rewrite these in place
    python tests/tools/save_outputs.py --all                             # every notebook in nbs/
    nbdev_clean && nbdev_export                                          # then, as after any notebook edit

Cells that nbdev_test skips (`#| notest`, `#| slow`, `#| ray`, `#| eval: false`) are not run, and keep no output.
Plotly figures are rendered by kaleido (PLOTLY_RENDERER=png; it needs a Chromium, Debian's `chromium` will do).
"""
import argparse, json, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_FLAGS = ("notest", "slow", "ray")
MAX_LINES, MAX_HTML, MAX_PNG = 40, 60_000, 400_000
KEEP_MIME = ("image/png", "text/markdown", "text/html", "text/plain")


def directives(source: str) -> list[str]:
    "The `#| ...` lines at the top of a cell, without the marker."
    out = []
    for line in source.splitlines():
        if not line.startswith("#|"): break
        out.append(line[2:].strip())
    return out


def runs(cell: dict) -> bool:
    "Whether nbdev_test would run this code cell."
    ds = directives("".join(cell["source"]))
    return not any(d in SKIP_FLAGS or d.replace(" ", "") == "eval:false" for d in ds)


def shown(cell: dict) -> bool:
    "Whether a reader sees this cell's output in the docs (not hidden, not an exported definition)."
    ds = directives("".join(cell["source"]))
    return not any(d.split()[0] in ("hide", "export", "exports", "exporti", "default_exp") for d in ds if d)


def _text(v) -> str: return "".join(v) if isinstance(v, list) else v


def _short(text: str) -> str:
    "At most MAX_LINES lines, saying how many were left out."
    lines = text.splitlines(True)
    if len(lines) <= MAX_LINES: return text
    return "".join(lines[:MAX_LINES]) + f"... ({len(lines) - MAX_LINES} more lines)\n"


def small_png(b64: str, width: int = 700, colours: int = 32) -> str:
    "A base64 PNG re-encoded small (issue 38): at most `width` pixels wide, a `colours`-colour palette (plots lose nothing)."
    import base64, io
    from PIL import Image
    im = Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")
    if im.size[0] > width: im = im.resize((width, round(im.size[1] * width / im.size[0])), Image.LANCZOS)
    buf = io.BytesIO()
    im.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(buf, "PNG", optimize=True)
    out = base64.b64encode(buf.getvalue()).decode()
    return out if len(out) < len(b64) else b64


def keep_output(out: dict):
    "The part of one output worth saving (None: drop it)."
    kind = out.get("output_type")
    if kind == "stream":
        text = _text(out["text"])
        if out.get("name") == "stderr":          # ragbench's own messages, not progress bars or library warnings
            text = "".join(l for l in text.splitlines(True) if l.startswith("ragbench") and "\r" not in l)
        return {**out, "text": _short(text)} if text.strip() else None
    if kind not in ("display_data", "execute_result"): return None
    data = out.get("data", {})
    if "application/vnd.jupyter.widget-view+json" in data: return None
    kept = {}
    for mime in KEEP_MIME:
        if mime not in data: continue
        v = _text(data[mime])
        if mime == "text/html" and (len(v) > MAX_HTML or "<script" in v): continue
        if mime == "image/png": v = small_png(v)
        if mime == "image/png" and len(v) > MAX_PNG: continue
        kept[mime] = _short(v) if mime == "text/plain" else v
    if not kept or set(kept) == {"text/plain"} and kept["text/plain"].startswith("<"): return None
    res = {"output_type": kind, "data": kept, "metadata": {}}
    if kind == "execute_result": res["execution_count"] = None
    return res


def save_outputs(path: Path, timeout: int = 900) -> str:
    "Execute one notebook and save its readable outputs in place; a line saying what happened."
    import nbformat
    from nbclient import NotebookClient
    t0 = time.monotonic()
    nb = nbformat.read(path, as_version=4)
    skipped = {}
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code" and not runs(c): skipped[i], c.source = c.source, ""
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    try: client.execute()
    except Exception as e:
        return f"FAILED {path.relative_to(ROOT)}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''}"
    kept = 0
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code": continue
        if i in skipped: c.source = skipped[i]
        c.outputs = [o for o in (keep_output(o) for o in c.outputs) if o] if shown(c) and i not in skipped else []
        c.execution_count = None
        kept += bool(c.outputs)
    fresh = json.loads(path.read_text())
    for c, new in zip(fresh["cells"], nb.cells):          # only outputs change: sources and ids stay byte for byte
        if c["cell_type"] == "code": c["outputs"], c["execution_count"] = [dict(o) for o in new.outputs], None
    path.write_text(json.dumps(fresh, indent=1, ensure_ascii=False) + "\n")
    return f"saved {path.relative_to(ROOT)}: {kept} cells with output ({time.monotonic() - t0:.0f} s)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path)
    p.add_argument("--all", action="store_true", help="every notebook in nbs/")
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    nbs = sorted((ROOT / "nbs").rglob("*.ipynb")) if a.all else [n.resolve() for n in a.notebooks]
    nbs = [n for n in nbs if ".ipynb_checkpoints" not in n.parts]
    os.environ.update(PLOTLY_RENDERER="png", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RAGBENCH_SAVING_OUTPUTS="1")
    with ProcessPoolExecutor(a.workers) as pool:
        lines = list(pool.map(save_outputs, nbs))
    for line in lines: print(line)
    return int(any(l.startswith("FAILED") for l in lines))


if __name__ == "__main__":
    sys.exit(main())
