"""Build the judge-qualification set shipped in `ragbench/data/qualify/` (run once; the output is committed).

    python tests/tools/build_qualify_set.py [--shared ../shared/data] [--out ragbench/data/qualify]

From the HotpotQA and MuSiQue training samples in `../shared/data/` it writes `cases.jsonl`: questions with
their passages and the verdicts a good judge gives (TRIAD's check 1 and check 2), built deterministically:

- valid: a human multi-hop question with its gold paragraphs (HotpotQA: both types; MuSiQue: 2-4 hops);
- single_hop: one step of a MuSiQue decomposition ("#1" replaced by the step's answer) with its one supporting
  paragraph and one distractor: not multi-hop, and one passage answers it alone;
- unanswerable: a human multi-hop question with two of its distractor paragraphs only;
- ambiguous: a human multi-hop question whose named entity (a gold title, else its first name) is replaced by a pronoun, with its gold
  paragraphs: not standalone (it can be read several ways) and not retrievable (the name that leads to a passage is gone).

Cases are written kind by kind in turn, so the first N cases are (about) stratified by kind. HotpotQA is
CC BY-SA 4.0 and MuSiQue CC BY 4.0: the licence note is written beside the data.
"""
import argparse, json, random, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from ragbench.text import candidate_names, mentions  # noqa: E402

COUNTS = {"valid": 100, "single_hop": 70, "unanswerable": 60, "ambiguous": 60}
LICENCE = """# Judge qualification set

`cases.jsonl` holds the cases of `ragbench qualify`: questions with their passages and the verdicts a good
judge gives. It was built once, deterministically, by `tests/tools/build_qualify_set.py` from two samples
published with the HippoRAG repository (MIT):

- HotpotQA (Yang et al., 2018, https://hotpotqa.github.io/), `hotpotqa_train100.json`: Creative Commons
  Attribution-ShareAlike 4.0 International (CC BY-SA 4.0). Cases with `"source": "hotpotqa"` are derived from
  it (questions and paragraphs unchanged, or a named entity replaced by a pronoun) and are shared under the
  same licence.
- MuSiQue (Trivedi et al., 2022, https://github.com/StonyBrookNLP/musique), `musique_train100.json`: Creative
  Commons Attribution 4.0 International (CC BY 4.0). Cases with `"source": "musique"` are derived from it
  (questions, decomposition steps with their answers filled in, paragraphs; or a named entity replaced by a
  pronoun).
"""


def hotpot_rows(path):
    "(id, question, answer, kind, binary, gold [(title, text)], distractors [(title, text)]) per HotpotQA question."
    for q in json.loads(Path(path).read_text()):
        paras = {t: "".join(s).strip() for t, s in q["context"]}
        gold = list(dict.fromkeys(t for t, _ in q["supporting_facts"]))
        if len(gold) != 2 or any(g not in paras for g in gold): continue
        kind = "comparison" if q["type"] == "comparison" else "composition"
        yield dict(id=q["_id"], question=q["question"], answer=q["answer"], kind=kind,
                   binary=q["answer"].lower() in ("yes", "no"), source="hotpotqa",
                   gold=[(g, paras[g]) for g in gold], distractors=[(t, x) for t, x in paras.items() if t not in gold])


def musique_rows(path):
    "The same for MuSiQue, plus the decomposition steps [(question, answer, supporting paragraph)]."
    for q in json.loads(Path(path).read_text()):
        ps = {p["idx"]: (p["title"], p["paragraph_text"].strip()) for p in q["paragraphs"]}
        gold = [ps[d["paragraph_support_idx"]] for d in q["question_decomposition"]]
        steps, answers = [], {}
        for k, d in enumerate(q["question_decomposition"], 1):
            text = re.sub(r"#(\d+)", lambda m: answers.get(int(m.group(1)), m.group(0)), d["question"]).strip()
            answers[k] = d["answer"]
            steps.append((text, d["answer"], ps[d["paragraph_support_idx"]]))
        yield dict(id=q["id"], question=q["question"], answer=q["answer"], kind="composition", binary=False,
                   source="musique", gold=gold, steps=steps,
                   distractors=[v for i, v in ps.items() if not any(i == d["paragraph_support_idx"] for d in q["question_decomposition"])])


def passages(pairs):
    return [{"title": t, "text": x} for t, x in pairs]


def case(kind, row, question, answer, paras, expected, **extra):
    return {"id": f"{kind}-{row['source']}-{row['id']}", "case": kind, "source": row["source"], "kind": row["kind"],
            "binary": row["binary"] if question == row["question"] else False, "question": question, "answer": answer,
            "passages": passages(paras), "expected": expected, **extra}


VALID = {"quality": True, "retrievable": True, "multi_hop": True, "unambiguous": True, "sufficient": False, "valid": True}


def natural(q: str) -> bool:
    "A decomposition step written as a question (not 'Entity >> relation'), with no unresolved '#k'."
    return ">>" not in q and "#" not in q and len(q.split()) >= 4


def pronoun_for(text: str) -> str:
    "he / she / it for the entity a paragraph is about (the pronoun the paragraph uses most)."
    w = re.findall(r"\b(he|his|him|she|her|hers)\b", text.lower())
    male, female = sum(x in ("he", "his", "him") for x in w), sum(x in ("she", "her", "hers") for x in w)
    return "he" if male > female else "she" if female > male else "it"


OBJECT_AFTER = {"of", "in", "by", "for", "with", "from", "to", "about", "at", "on", "around", "into", "than", "published",
                "directed", "wrote", "released", "founded", "owns", "married", "played", "starred", "featured"}
FORMS = {"he": ("he", "him", "his"), "she": ("she", "her", "her"), "it": ("it", "it", "its")}


def with_pronoun(question: str, start: int, end: int, possessive: bool, pronoun: str) -> str:
    "`question` with [start:end] replaced by the pronoun's subject, object or possessive form (a leading 'the' dropped)."
    before = question[:start].rstrip()
    prev = (re.findall(r"\w+", before) or [""])[-1].lower()
    if prev == "the": before, prev = before[:-3].rstrip(), (re.findall(r"\w+", before[:-3]) or [""])[-1].lower()
    subj, obj, poss = FORMS[pronoun]
    word = poss if possessive else obj if prev in OBJECT_AFTER else subj
    if not before: word = word.capitalize()
    return (before + " " if before else "") + word + question[end:]


def ambiguous(row):
    "The question with a gold paragraph's title (else its first name) replaced by a pronoun; None if neither occurs."
    titles = [(re.sub(r"\s*\(.*\)$", "", t), x) for t, x in row["gold"]]
    names = [(t, x) for t, x in titles if len(t) >= 4] + [(n, row["gold"][0][1]) for n in candidate_names(row["question"], parts=False) if len(n) >= 4]
    for name, text in names:
        m = re.search(rf"(?<!\w){re.escape(name)}(?!\w)('s)?", row["question"], re.I)
        if not m: continue
        return with_pronoun(row["question"], m.start(), m.end(), bool(m.group(1)), pronoun_for(text))
    return None


def build(shared: Path) -> list[dict]:
    hp = list(hotpot_rows(shared / "hotpotqa" / "hotpotqa_train100.json"))
    mu = list(musique_rows(shared / "musique" / "musique_train100.json"))
    rng = random.Random(0)
    comp = [r for r in hp if r["kind"] == "comparison"]
    bridge = [r for r in hp if r["kind"] != "comparison"]
    by = {k: [] for k in COUNTS}
    for r in comp + bridge[: 50 - len(comp)] + mu[:50]:
        by["valid"].append(case("valid", r, r["question"], r["answer"], r["gold"], VALID))
    for r in mu:
        steps = [s for s in r["steps"] if natural(s[0])]
        if not steps or not r["distractors"]: continue
        q, a, para = rng.choice(steps)
        paras = [para, rng.choice(r["distractors"])]
        rng.shuffle(paras)
        by["single_hop"].append(case("single_hop", r, q, a, paras, {"multi_hop": False, "sufficient": True, "valid": False},
                                     supporting=para[0]))
    for r in [x for pair in zip(hp[50:], mu[50:]) for x in pair] + hp[:50] + mu[:50]:
        # distractors that do not state the answer (yes/no questions are left out: nothing to check against)
        far = [(t, x) for t, x in r["distractors"] if not mentions(f"{t} {x}", r["answer"])]
        if r["binary"] or len(far) < 2: continue
        by["unanswerable"].append(case("unanswerable", r, r["question"], r["answer"], rng.sample(far, 2),
                                       {"quality": False, "sufficient": False, "valid": False}))
    for r in [x for pair in zip(hp, mu) for x in pair]:
        q = ambiguous(r)
        if q: by["ambiguous"].append(case("ambiguous", r, q, r["answer"], r["gold"], {"unambiguous": False, "retrievable": False, "valid": False},
                                          original=r["question"]))
    for k, n in COUNTS.items():
        if len(by[k]) < n: raise SystemExit(f"only {len(by[k])} {k} cases (wanted {n})")
        by[k] = by[k][:n]
    out, i = [], 0
    while any(by.values()):                      # kinds in turn: the first N cases are stratified
        k = list(COUNTS)[i % len(COUNTS)]; i += 1
        if by[k]: out.append(by[k].pop(0))
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
          f"{(out / 'cases.jsonl').stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
