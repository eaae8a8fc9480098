"""Split `;`-chained statements in exported notebook cells onto their own lines (a one-line compound statement becomes
a block); a cell is rewritten only when its code parses to the same AST afterwards.

    python tests/tools/split_chains.py nbs/*.ipynb nbs/*/*.ipynb    # then nbdev_export and nbdev_clean
"""
import ast, io, json, sys, tokenize
from pathlib import Path

COMPOUND = {"if", "elif", "else", "for", "while", "with", "try", "except", "finally", "def", "class", "async"}

def split_line(line: str, toks: list) -> list[str] | None:
    "The lines replacing one physical line holding one logical line with top-level `;`, or None to leave it."
    indent = line[: len(line) - len(line.lstrip())]
    depth, semis, colon, comment = 0, [], None, None
    first = next((t for t in toks if t.type not in (tokenize.INDENT, tokenize.DEDENT)), None)
    if first is None: return None
    for t in toks:
        if t.type == tokenize.OP:
            if t.string in "([{": depth += 1
            elif t.string in ")]}": depth -= 1
            elif t.string == ";" and depth == 0: semis.append(t.start[1])
            elif t.string == ":" and depth == 0 and colon is None and first.string in COMPOUND: colon = t.start[1]
        elif t.type == tokenize.COMMENT: comment = t.start[1]
        elif t.type == tokenize.NAME and t.string == "lambda" and depth == 0 and colon is None and first.string in COMPOUND:
            return None
    if not semis: return None
    code_end = comment if comment is not None else len(line.rstrip("\n"))
    tail = line[comment:].rstrip("\n") if comment is not None else ""
    if first.string in COMPOUND:
        if colon is None or colon > semis[0]: return None
        head, body, ind2 = line[: colon + 1], line[colon + 1: code_end], indent + "    "
        if not body.strip(): return None
        body_start = colon + 1
    else:
        head, body_start, ind2 = None, len(indent), indent
    cuts = [body_start] + [s + 1 for s in semis] 
    ends = semis + [code_end]
    parts = [line[a:b].strip() for a, b in zip(cuts, ends)]
    if any(not p for p in parts): return None
    out = ([head.rstrip()] if head else []) + [ind2 + p for p in parts]
    if tail and len(out[-1]) + 2 + len(tail) <= 120: out[-1] += "  " + tail      # the comment stays at the line's end
    elif tail: out.insert(1, ind2 + tail) if head else out.insert(0, indent + tail)  # or goes above the statements
    return [l + "\n" for l in out]

def rewrite(src: str) -> str:
    "The source with its single-line `;` chains split; the same source when nothing applies or it does not tokenize."
    try: toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError): return src
    lines = src.splitlines(keepends=True)
    logical, cur = [], []
    for t in toks:
        cur.append(t)
        if t.type in (tokenize.NEWLINE, tokenize.ENDMARKER): logical.append(cur); cur = []
    repl = {}
    for lt in logical:
        real = [t for t in lt if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)]
        if not real or real[0].start[0] != real[-1].end[0]: continue
        row = real[0].start[0] - 1
        new = split_line(lines[row] if lines[row].endswith("\n") else lines[row] + "\n", real)
        if new:
            if not lines[row].endswith("\n"): new[-1] = new[-1].rstrip("\n")
            repl[row] = new
    if not repl: return src
    return "".join("".join(repl[i]) if i in repl else l for i, l in enumerate(lines))

def same_code(a: str, b: str) -> bool:
    "Whether two sources parse to the same AST (comments and layout aside)."
    try: return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except SyntaxError: return False

def exported(src: str) -> bool:
    "Whether a cell is exported to the library."
    return any(l.strip().replace(" ", "") in ("#|export", "#|exports") for l in src.splitlines()[:5])

def rewrite_notebooks(paths, rewrite) -> tuple[int, int]:
    "Apply `rewrite` to the exported cells of each notebook, keeping a cell's change only when its AST is unchanged: (changed, skipped)."
    changed = skipped = 0
    for p in map(Path, paths):
        nb = json.loads(p.read_text()); dirty = False
        for c in nb["cells"]:
            if c["cell_type"] != "code": continue
            src = "".join(c["source"])
            if not exported(src): continue
            new = rewrite(src)
            if new == src: continue
            if not same_code(src, new): skipped += 1; print("skip", p, c.get("id")); continue
            c["source"] = new.splitlines(keepends=True); dirty = True; changed += 1
        if dirty: p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return changed, skipped

if __name__ == "__main__":
    print("cells changed %d, skipped %d" % rewrite_notebooks(sys.argv[1:], rewrite))
