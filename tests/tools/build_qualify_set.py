"""Build the judge-qualification set shipped in `ragbench/data/qualify/` (run once; the output is committed).

    python tests/tools/build_qualify_set.py [--shared ../shared/data] [--out ragbench/data/qualify]

From the HotpotQA and MuSiQue training samples in `../shared/data/` it writes `cases.jsonl`: questions with
their passages and the verdicts a good judge gives (TRIAD's check 1 and check 2), built deterministically.
Case and passage ids are neutral (a hash of the case's content): nothing in a prompt names the case's kind.
The question type a case is told (comparison / intersection / composition) follows the human question:
HotpotQA comparison -> comparison; a HotpotQA bridge or MuSiQue question whose answer both (all) gold
paragraphs mention -> intersection; the other bridge / MuSiQue questions -> composition. Every type has
yes/no cases.

- valid: a human multi-hop question with its gold paragraphs; its yes/no form for every type ("..., is it X?",
  answered "yes" with the gold answer, "no" with the entity of the other passage);
- wrong_passage_answer: the same question and passages, answered with what the *other* passage says: the
  bridge entity (MuSiQue's first hop answer; HotpotQA's other gold title) for composition / intersection, the
  other compared entity for a comparison, the flipped yes/no for a yes/no question (quality fails);
- one_passage_answers: a comparison or intersection whose first passage also carries the supporting sentences
  of the other (as overlapping chunks do): one passage answers it (not multi-hop, sufficient);
- bridge_named: a composition question with its bridge entity written in (MuSiQue's last hop with the
  earlier answers filled in) over all its gold paragraphs: the last passage answers it alone;
- vague_description: a named entity of the question replaced by the description its own paragraph opens with
  ("Which band was formed first, an American rock band or Circus Diablo?"): not retrievable, ambiguous;
- false_premise: a yes/no question (any type) in which a named entity is swapped for another real entity of
  the same question's distractor paragraphs: the question presupposes links no passage states (quality fails);
- single_hop: one step of a MuSiQue decomposition with its supporting paragraph and a distractor, told one of
  the three types in turn: not multi-hop, one passage suffices.

Cases are written kind by kind in turn, so the first N cases are (about) stratified by kind. HotpotQA is
CC BY-SA 4.0 and MuSiQue CC BY 4.0: the licence note is written beside the data.
"""
import argparse, hashlib, json, random, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from ragbench.text import candidate_names, mentions, split_sentences  # noqa: E402

COUNTS = {"valid": 120, "wrong_passage_answer": 45, "one_passage_answers": 30, "bridge_named": 30,
          "vague_description": 45, "false_premise": 45, "single_hop": 30}
LICENCE = """# Judge qualification set

`cases.jsonl` holds the cases of `ragbench qualify`: questions with their passages and the verdicts a good
judge gives. It was built once, deterministically, by `tests/tools/build_qualify_set.py` from two samples
published with the HippoRAG repository (MIT):

- HotpotQA (Yang et al., 2018, https://hotpotqa.github.io/), `hotpotqa_train100.json`: Creative Commons
  Attribution-ShareAlike 4.0 International (CC BY-SA 4.0). Cases with `"source": "hotpotqa"` are derived from
  it (questions and paragraphs unchanged, or altered as the build script describes: an answer taken from the
  other passage, a name replaced by a description or by another entity, a passage extended by the other's
  supporting sentences, a yes/no form) and are shared under the same licence.
- MuSiQue (Trivedi et al., 2022, https://github.com/StonyBrookNLP/musique), `musique_train100.json`: Creative
  Commons Attribution 4.0 International (CC BY 4.0). Cases with `"source": "musique"` are derived from it
  (questions, decomposition steps with their answers filled in, paragraphs, altered as above).
"""
VALID = {"quality": True, "retrievable": True, "multi_hop": True, "unambiguous": True, "sufficient": False, "valid": True}
EXPECTED = {
    "wrong_passage_answer": {"quality": False, "valid": False},
    "one_passage_answers": {"multi_hop": False, "sufficient": True, "valid": False},
    "bridge_named": {"multi_hop": False, "sufficient": True, "valid": False},
    "vague_description": {"retrievable": False, "unambiguous": False, "valid": False},
    "false_premise": {"quality": False, "valid": False},
    "single_hop": {"multi_hop": False, "sufficient": True, "valid": False}}
YES_NO = ("yes", "no")


def clean_title(t: str) -> str: return re.sub(r"\s*\([^)]*\)\s*$", "", t).strip()


def hotpot_rows(path):
    "One dict per usable HotpotQA question: type, gold [(title, text)], supporting sentences per gold title, distractors."
    for q in json.loads(Path(path).read_text()):
        sents = {t: s for t, s in q["context"]}
        paras = {t: "".join(s).strip() for t, s in sents.items()}
        gold = list(dict.fromkeys(t for t, _ in q["supporting_facts"]))
        if len(gold) != 2 or any(g not in paras for g in gold): continue
        support = {g: [sents[g][i].strip() for t, i in q["supporting_facts"] if t == g and i < len(sents[g])] for g in gold}
        binary = q["answer"].lower() in YES_NO
        both = not binary and all(mentions(paras[g], q["answer"]) for g in gold)
        kind = "comparison" if q["type"] == "comparison" else "intersection" if both else "composition"
        yield dict(id=q["_id"], question=q["question"], answer=q["answer"], kind=kind, binary=binary, source="hotpotqa",
                   gold=[(g, paras[g]) for g in gold], support=support, steps=[],
                   distractors=[(t, x) for t, x in paras.items() if t not in gold])


def musique_rows(path):
    "The same for MuSiQue, plus the decomposition steps [(question with answers filled in, answer, paragraph)]."
    for q in json.loads(Path(path).read_text()):
        ps = {p["idx"]: (p["title"], p["paragraph_text"].strip()) for p in q["paragraphs"]}
        gold = [ps[d["paragraph_support_idx"]] for d in q["question_decomposition"]]
        steps, answers = [], {}
        for k, d in enumerate(q["question_decomposition"], 1):
            text = re.sub(r"#(\d+)", lambda m: answers.get(int(m.group(1)), m.group(0)), d["question"]).strip()
            answers[k] = d["answer"]
            steps.append((text, d["answer"], ps[d["paragraph_support_idx"]]))
        both = sum(mentions(x, q["answer"]) for _, x in gold) >= 2
        used = {d["paragraph_support_idx"] for d in q["question_decomposition"]}
        yield dict(id=q["id"], question=q["question"], answer=q["answer"], kind="intersection" if both else "composition",
                   binary=False, source="musique", gold=gold, support={}, steps=steps,
                   distractors=[v for i, v in ps.items() if i not in used])


def neutral_id(question: str, answer: str, paras, salt: str = "") -> str:
    "An id that says nothing about the case: a hash of its content."
    h = hashlib.sha1(json.dumps([salt, question, answer, [t for t, _ in paras]]).encode()).hexdigest()
    return f"q{h[:10]}"


def case(flaw, row, question, answer, paras, rng, binary=None, kind=None, **extra):
    paras = list(paras); rng.shuffle(paras)              # gold order is no tell either
    return {"id": neutral_id(question, answer, paras, f"{flaw}:{row['id']}"), "case": flaw, "source": row["source"], "kind": kind or row["kind"],
            "binary": row["binary"] if binary is None else binary, "question": question, "answer": answer,
            "passages": [{"title": t, "text": x} for t, x in paras], "expected": VALID if flaw == "valid" else EXPECTED[flaw],
            **extra}


def as_yes_no(question: str, x: str) -> str:
    "The yes/no form of a question: '<question>, is the answer <x>?'"
    return f"{question.strip().rstrip('?.').rstrip()}, is the answer {x}?"


def other_entity(row):
    "What the other passage says instead of the answer: the bridge / other gold title / first-hop answer, or None."
    if row["binary"]: return None
    if row["steps"]:
        a = row["steps"][0][1]
        return a if a.lower() != row["answer"].lower() and not mentions(row["question"], a) else None
    titles = [clean_title(t) for t, _ in row["gold"]]
    if row["kind"] == "comparison":
        hit = [t for t in titles if mentions(row["answer"], t) or mentions(t, row["answer"])]
        rest = [t for t in titles if t not in hit]
        return rest[0] if len(hit) == 1 and rest else None
    rest = [t for t in titles if not mentions(row["answer"], t) and not mentions(t, row["answer"]) and not mentions(row["question"], t)]
    return rest[0] if rest else None


def wrong_passage_answer(row):
    "(question, wrong answer) taken from the other passage, or None."
    if row["binary"]: return row["question"], "no" if row["answer"].lower() == "yes" else "yes"
    w = other_entity(row)
    return (row["question"], w) if w else None


def one_passage(row):
    "The gold pair with the first passage extended by the other's supporting sentences (HotpotQA), or None."
    if row["source"] != "hotpotqa" or row["kind"] == "composition": return None
    (t1, x1), (t2, x2) = row["gold"]
    extra = " ".join(row["support"].get(t2) or [])
    if not extra: return None
    return [(t1, f"{x1} {extra}"), (t2, x2)]


def bridge_named(row):
    "MuSiQue's last hop with the earlier answers written in, if it reads as a question that names the bridge."
    if not row["steps"] or row["kind"] != "composition": return None
    q, a, _ = row["steps"][-1]
    if ">>" in q or "#" in q or len(q.split()) < 4 or a.lower() != row["answer"].lower(): return None
    return q if any(mentions(q, s[1]) for s in row["steps"][:-1]) else None


_DESC = re.compile(r"\b(?:is|was|are|were)\s+(?:an?|the)\s+((?:[\w'’-]+\s+){0,5}?[\w'’-]+?)"
                   r"(?=\s+(?:that|which|who|whose|by|from|in|of|for|with|based|directed|written|located|founded|and|known|"
                   r"created|produced|published|set|released|on|at|starring|formed|developed|born|to)\b|\s*[,.;(])")


def description(text: str, name: str):
    "The description a paragraph opens with ('an American rock band'), or None."
    m = _DESC.search(" ".join(split_sentences(text)[:1]))
    if not m: return None
    d = m.group(1).strip()
    if len(d.split()) < 2 or mentions(d, name) or any(w[0].isupper() and w.lower() in name.lower() for w in d.split()): return None
    return ("an " if d[0].lower() in "aeiou" else "a ") + d


def vague(row):
    "The question with a gold title it names replaced by its paragraph's opening description, or None."
    for t, x in row["gold"]:
        name = clean_title(t)
        m = re.search(rf"(?<!\w)(?:the\s+)?{re.escape(name)}(?!\w)", row["question"], re.I)
        if len(name) < 4 or not m: continue
        d = description(x, name)
        if not d: continue
        q = row["question"][:m.start()] + d + row["question"][m.end():]
        return q[0].upper() + q[1:]
    return None


def false_premise(row, rng):
    "A yes/no question of the row with a named gold entity swapped for a distractor's entity: (question, answer) or None."
    q, a = (row["question"], row["answer"]) if row["binary"] else (as_yes_no(row["question"], row["answer"]), "yes")
    others = [clean_title(t) for t, _ in row["distractors"] if len(clean_title(t)) >= 4]
    others = [o for o in others if not mentions(q, o) and not any(mentions(x, o) for _, x in row["gold"])]
    if not others: return None
    names = [clean_title(t) for t, _ in row["gold"]] + candidate_names(row["question"], parts=False)
    for name in names:
        if len(name) < 4 or name.lower() == row["answer"].lower() or not mentions(row["question"], name): continue
        m = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", q, re.I)
        if m: return q[:m.start()] + rng.choice(others) + q[m.end():], a
    return None


def stratified(cases, n):
    "The first `n` cases taken in turn from each (question type, yes/no) group, so rare types are kept."
    groups = {}
    for c in cases: groups.setdefault((c["kind"], c["binary"]), []).append(c)
    out, queues = [], list(groups.values())
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n: out.append(q.pop(0))
    return out


def build(shared: Path) -> list[dict]:
    hp = list(hotpot_rows(shared / "hotpotqa" / "hotpotqa_train100.json"))
    mu = list(musique_rows(shared / "musique" / "musique_train100.json"))
    rng = random.Random(0)
    rows = [x for pair in zip(hp, mu) for x in pair]                     # alternate the sources
    by = {k: [] for k in COUNTS}
    for r in rows:
        by["valid"].append(case("valid", r, r["question"], r["answer"], r["gold"], rng))
        if not r["binary"]:                                               # a yes/no form of every type
            w = other_entity(r)
            yes = len(by["valid"]) % 4 < 2 or not w
            by["valid"].append(case("valid", r, as_yes_no(r["question"], r["answer"] if yes else w), "yes" if yes else "no",
                                    r["gold"], rng, binary=True))
        if wa := wrong_passage_answer(r):
            by["wrong_passage_answer"].append(case("wrong_passage_answer", r, wa[0], wa[1], r["gold"], rng))
        if op := one_passage(r):
            by["one_passage_answers"].append(case("one_passage_answers", r, r["question"], r["answer"], op, rng, supporting=op[0][0]))
        if bq := bridge_named(r):
            by["bridge_named"].append(case("bridge_named", r, bq, r["answer"], r["gold"], rng, supporting=r["steps"][-1][2][0]))
        if vq := vague(r):
            by["vague_description"].append(case("vague_description", r, vq, r["answer"], r["gold"], rng))
        if fp := false_premise(r, rng):
            by["false_premise"].append(case("false_premise", r, fp[0], fp[1], r["gold"], rng, binary=True))
    kinds = ("comparison", "intersection", "composition")
    for i, r in enumerate(mu):
        steps = [s for s in r["steps"] if ">>" not in s[0] and "#" not in s[0] and len(s[0].split()) >= 4]
        if not steps or not r["distractors"]: continue
        q, a, para = rng.choice(steps)
        by["single_hop"].append(case("single_hop", r, q, a, [para, rng.choice(r["distractors"])], rng,
                                     binary=False, kind=kinds[i % 3], supporting=para[0]))
    for k, n in COUNTS.items():
        if len(by[k]) < n: print(f"note: only {len(by[k])} {k} cases (wanted {n})", file=sys.stderr)
        by[k] = stratified(by[k], n)
    out, i = [], 0
    while any(by.values()):                      # kinds in turn: the first N cases are stratified
        k = list(COUNTS)[i % len(COUNTS)]; i += 1
        if by[k]: out.append(by[k].pop(0))
    assert len({c["id"] for c in out}) == len(out), "duplicate case ids"
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "ragbench" / "data" / "qualify"))
    a = ap.parse_args()
    cases = build(Path(a.shared))
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    (out / "cases.jsonl").write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases))
    (out / "LICENSE.md").write_text(LICENCE)
    from collections import Counter
    print(f"{len(cases)} cases -> {out / 'cases.jsonl'}: {dict(Counter(c['case'] for c in cases))}, "
          f"types {dict(Counter((c['kind'], c['binary']) for c in cases))}, {(out / 'cases.jsonl').stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
