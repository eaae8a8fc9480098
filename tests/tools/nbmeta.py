"""Give every notebook in nbs/ the kernelspec JupyterLab needs (no "Select Kernel" prompt) and drop editor metadata.

    python tests/tools/nbmeta.py          # rewrite in place (run nbdev_clean after)
    python tests/tools/nbmeta.py --check  # exit 1 listing notebooks that need it
"""
import json, sys
from pathlib import Path

KERNELSPEC = {"display_name": "python3", "language": "python", "name": "python3"}
DROP = ("jupytext", "widgets", "vscode")

def fix(nb: dict) -> bool:
    "Set the kernelspec and drop editor keys; returns whether anything changed."
    meta = nb.setdefault("metadata", {})
    before = json.dumps(meta, sort_keys=True)
    for k in DROP: meta.pop(k, None)
    meta["kernelspec"] = dict(KERNELSPEC)
    return json.dumps(meta, sort_keys=True) != before

def main(argv) -> int:
    root = Path(__file__).resolve().parents[2] / "nbs"
    bad = []
    for p in sorted(root.rglob("*.ipynb")):
        nb = json.loads(p.read_text())
        if fix(nb):
            bad.append(str(p))
            if "--check" not in argv: p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    if bad: print(("needs kernelspec: " if "--check" in argv else "fixed: ") + ", ".join(bad))
    return 1 if bad and "--check" in argv else 0

if __name__ == "__main__": sys.exit(main(sys.argv[1:]))
