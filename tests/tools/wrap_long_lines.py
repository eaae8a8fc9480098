"""Wrap the simple statements of exported cells that have a line over 120 characters with black (line length 120, no
string normalisation; a long string is split only when nothing else fits; a trailing comment moves above its
statement); an over-long one-line `if`/`for`/`while`/`with` becomes a block first. A statement is rewritten only when
every line of the result fits and it grows by at most WRAP_MAX_EXTRA lines (default 4), a cell only when its AST is
unchanged. Docstrings and `def` lines are left as they are.

    pip install black
    WRAP_MAX_EXTRA=3 python tests/tools/wrap_long_lines.py nbs/*.ipynb nbs/*/*.ipynb   # then nbdev_export and nbdev_clean
"""
import ast, json, os, sys
from pathlib import Path
import black
sys.path.insert(0, str(Path(__file__).parent))
from split_chains import rewrite_notebooks   # noqa: E402

MODE = black.Mode(line_length=120, string_normalization=False, magic_trailing_comma=False)
MODE_STRINGS = black.Mode(line_length=120, string_normalization=False, magic_trailing_comma=False,
                          enabled_features={black.mode.Preview.string_processing})   # long strings split too
MAX_EXTRA = int(os.environ.get("WRAP_MAX_EXTRA", "4"))
COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
            ast.AsyncFunctionDef, ast.ClassDef, ast.Match) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())

def simple_statements(tree):
    "Every statement that holds no other statement."
    return [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and not isinstance(n, COMPOUND)]

def wrapped(lines: list[str], node) -> list[str] | None:
    "Black's lines for one statement, indented as it was, or None to leave it."
    a, b, col = node.lineno - 1, node.end_lineno, node.col_offset
    seg = lines[a:b]
    if seg[0][:col].strip(): return None                      # something precedes it on its first line
    rest = seg[-1][node.end_col_offset:].strip()
    if rest and not rest.startswith("#"): return None         # something follows it on its last line
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant): return None    # a docstring
    if any(l.strip() and len(l) - len(l.lstrip()) < col for l in seg[1:]): return None
    above = []
    if rest:                                                  # a trailing comment goes on its own line above
        above = [" " * col + rest + "\n"]
        if len(above[0]) - 1 > 120: return None
        seg = seg[:-1] + [seg[-1][:node.end_col_offset].rstrip() + "\n"]
        if all(len(l.rstrip("\n")) <= 120 for l in seg): return above + seg
    src = "".join(l[col:] if l[:col].strip() == "" else l for l in seg)
    for mode in (MODE, MODE_STRINGS):
        try: out = black.format_str(src, mode=mode)
        except Exception: return None
        new = [(" " * col + l) if l.strip() else l for l in out.splitlines(keepends=True)]
        if all(len(l.rstrip("\n")) <= 120 for l in new) and len(new) <= len(seg) + MAX_EXTRA: break
    else: return None
    return above + new

def expand(src: str) -> str:
    "The source with each over-long one-line `if`/`for`/`while`/`with` made a block (its body on the next line)."
    try: tree = ast.parse(src)
    except SyntaxError: return src
    lines = src.splitlines(keepends=True)
    cut = {}
    for n in ast.walk(tree):
        if not isinstance(n, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)): continue
        b = n.body[0]
        if len(n.body) != 1 or b.lineno != n.lineno or len(lines[n.lineno - 1].rstrip("\n")) <= 120: continue
        line = lines[n.lineno - 1]
        if line[:n.col_offset].strip(): continue                 # nested in another one-liner
        cut[n.lineno - 1] = (b.col_offset, n.col_offset + 4)
    out = []
    for i, l in enumerate(lines):
        if i in cut:
            at, ind = cut[i]
            out += [l[:at].rstrip() + "\n", " " * ind + l[at:]]
        else: out.append(l)
    return "".join(out)

def rewrite(src: str) -> str:
    "The cell source with its long simple statements wrapped."
    src = expand(src)
    try: tree = ast.parse(src)
    except SyntaxError: return src
    lines = src.splitlines(keepends=True)
    long_rows = {i for i, l in enumerate(lines) if len(l.rstrip("\n")) > 120}
    if not long_rows: return src
    repl = {}
    for n in simple_statements(tree):
        rows = set(range(n.lineno - 1, n.end_lineno))
        if not rows & long_rows or any(r in repl or r in {x for k in repl for x in repl[k][1]} for r in rows): continue
        new = wrapped(lines, n)
        if new is not None: repl[n.lineno - 1] = (new, rows)
    if not repl: return src
    skip = {r for _, rows in repl.values() for r in rows}
    out = []
    for i, l in enumerate(lines):
        if i in repl: out += repl[i][0]
        elif i not in skip: out.append(l)
    return "".join(out)


if __name__ == "__main__":
    print("cells changed %d, skipped %d" % rewrite_notebooks(sys.argv[1:], rewrite))
