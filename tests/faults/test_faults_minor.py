"""Issue 40's minor items, each a named case: what a run says must add up and name what the user gave."""
import re, socket, threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from conftest import ragbench, record, setups_file


class NotFound(BaseHTTPRequestHandler):
    "An HTTP server that answers every request 404: it accepts connections (the preflight passes), every call fails."
    def do_POST(self):
        self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()
    do_GET = do_POST
    def log_message(self, *a): pass


def test_every_seed_failing_counts_its_seeds(work, hash_db):
    "Before: '0 seeds tried, 0 attempts' beside 'every seed failed'. Now the seeds that failed count among those tried."
    srv = HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        p = ragbench("triad", "--db", hash_db, "--out", work / "all_fail", "--n", 1, "--max-seeds", 3,
                     "--llm", f"openai:http://127.0.0.1:{srv.server_address[1]}/v1@m")
    finally: srv.shutdown()
    record(rc=p.returncode, says=(p.stdout.strip().splitlines() or [""])[0][:160])
    assert p.returncode == 1 and "every seed failed" in p.stderr, (p.returncode, p.stderr[-1500:])
    m = re.search(r"(\d+) seeds tried \((\d+) failed\)", p.stdout)
    assert m and int(m.group(1)) == int(m.group(2)) > 0 and "0 seeds tried" not in p.stdout, p.stdout[-800:]


def test_judge_llm_none_is_named_as_given(server, work, hash_db, small_dataset):
    "Before: '--judge-llm none' printed 'no --judge-llm'. Now the flag is named as the user gave it."
    p = ragbench("evaluate", "--dataset", small_dataset, "--db", hash_db, "--setups", setups_file(work / "none.yaml", server.spec),
                 "--out", work / "ev_judge_none", "--judge-llm", "none", "--no-bertscore", "--quiet")
    record(rc=p.returncode)
    assert p.returncode == 0, p.stderr[-1500:]
    assert "--judge-llm none: LLM judges are skipped" in p.stderr and "no --judge-llm" not in p.stderr


def test_skip_message_reads_once_at(tmp_path):
    "Before: 'Invalid control character at at column 20' (the JSON decoder's message ends in 'at'). Now one 'at'."
    src = tmp_path / "ctl.jsonl"
    src.write_text('{"id": "a", "text": "x\ty"}\n{"id": "b", "text": "a fine line"}\n')
    p = ragbench("index", src, "--db", tmp_path / "db", "--embedder", "hash", "--quiet")
    record(rc=p.returncode, says=(p.stderr.strip().splitlines() or [""])[-1][:160])
    assert p.returncode == 0 and f"{src}:1: not valid JSON (Invalid control character at column" in p.stderr, p.stderr
    assert "at at" not in p.stderr, p.stderr
