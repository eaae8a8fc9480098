"""Relevance-labelling accuracy, batched (16 candidates a call, as a TRIAD run labels) vs one candidate a call (a script, not a test).

    python tests/bench/bench_labels.py [--llm SPEC] [--n 100] [--batches 16,1] [--json FILE]

Cases come from the shared HotpotQA sample (../shared/data/hotpotqa/hotpotqa_train100.json, else the bundled 12
questions): the first supporting paragraph is the gold passage, the candidates are the other supporting paragraph
(relevant) and the question's distractors (not relevant). For each batch size it prints accuracy, precision and
recall of "relevant", the unlabelled share and the calls spent (`ragbench.triad.contexts.labelling_accuracy`).

No capable model is reachable on the development machine: with the default `--llm template` (the rule-based
stand-in, every third candidate "relevant") the figures only show that the harness runs. The figure that matters
needs a real labeller, e.g. `--llm gemini:gemini-2.5-flash-lite` or `--llm openai:http://HOST/v1@MODEL`.
"""
import argparse, json, os, resource, sys, time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragbench.corpus import hotpot_sample_path
from ragbench.llm import make_llm
from ragbench.triad.contexts import _hotpotqa_label_cases, _labelling_accuracy


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm", default="template", help="labeller LLM spec (default: the template stand-in)")
    ap.add_argument("--n", type=int, default=100, help="HotpotQA questions used")
    ap.add_argument("--batches", default="16,1", help="batch sizes compared, comma-separated")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args(argv)
    cases = _hotpotqa_label_cases(hotpot_sample_path(), n=a.n)
    t0 = time.time()
    res = _labelling_accuracy(cases, make_llm(a.llm), tuple(int(b) for b in a.batches.split(",")))
    print(f"labeller {a.llm} on {len(cases)} HotpotQA questions ({hotpot_sample_path()}), {time.time() - t0:.1f} s, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    for b, s in res.items():
        print(f"  batch {b:>2}: accuracy {s['accuracy']}, precision {s['precision']}, recall {s['recall']}, "
              f"unlabelled {s['unlabelled']}, calls {s['calls']} ({s['n_candidates']} candidates, {s['n_relevant']} relevant)")
    if a.llm == "template": print("  (the template stand-in is not a labeller: these figures only show the harness runs)")
    if a.json: Path(a.json).write_text(json.dumps({"llm": a.llm, "n_cases": len(cases), "results": res}, indent=1))


if __name__ == "__main__":
    main()
