"""A team's small RAG service for the tests: dense search over a LanceDB table with the bundled embedder, served on
127.0.0.1 by the standard library. Its reply has its own shape ({"data": {"answer", "sources": [{"text", "source"}]}})
and returns texts, never ragbench's chunk ids. Every request is logged (one JSON line, flushed) before it is answered.

    python tests/tools/rag_server.py DB LOG [--delay S] [--token-env NAME]    # prints "listening PORT"
"""
import argparse, json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("db"); ap.add_argument("log")
    ap.add_argument("--delay", type=float, default=0.0); ap.add_argument("--token-env", default=None); ap.add_argument("--k", type=int, default=3)
    a = ap.parse_args()
    from ragbench.index import ChunkIndex
    idx, lock, log = ChunkIndex.open(a.db), threading.Lock(), open(a.log, "a", encoding="utf-8")
    idx.search("warm up", k=1)
    want = os.environ[a.token_env] if a.token_env else None

    class Rag(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                log.write(json.dumps({"body": body, "auth": self.headers.get("Authorization") == f"Bearer {want}"}) + "\n"); log.flush()
            if want and self.headers.get("Authorization") != f"Bearer {want}": return self.reply(401, {"error": "unauthorised"})
            time.sleep(a.delay)
            with lock: hits = idx.search(body["question"], k=a.k, mode="dense")
            self.reply(200, {"data": {"answer": hits[0].text.split(".")[0],
                                      "sources": [{"text": h.text, "source": h.doc_id} for h in hits]}})
        def reply(self, status, obj):
            out = json.dumps(obj).encode()
            self.send_response(status); self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out))); self.end_headers()
            try: self.wfile.write(out)
            except (BrokenPipeError, ConnectionResetError): pass    # the client gave up (a budget stop, a kill)
        def log_message(self, *args): pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Rag)
    print(f"listening {srv.server_port}", flush=True)
    srv.serve_forever()

if __name__ == "__main__": main()
