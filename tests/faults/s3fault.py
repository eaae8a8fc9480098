"""A moto S3 server behind a small fault-injecting HTTP proxy (issue 40's object-storage cases).

`S3Fault()` starts moto's server on 127.0.0.1 and, in front of it, a threaded proxy whose answers a test sets with
`.fail(mode, after=N, methods=...)`: after N more requests pass (of `methods`, default every method), each such request is
answered `500` (InternalError), `403` (AccessDenied), or the connection is reset (`reset`); `slow` holds one request
`delay` seconds and then answers it (and heals); `.fail("pass")` heals it.
`.env` holds the AWS_* variables that point a `ragbench` subprocess at the proxy with bucket `ragbench` created.
"""
import http.client, logging, os, socket, struct, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ERR = {500: ("InternalError", "We encountered an internal error. Please try again."),
        403: ("AccessDenied", "Access Denied")}


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a): pass

    def _body(self) -> bytes:
        "The request body (sized, or chunked as pyarrow's S3 client sends a part)."
        if "chunked" not in self.headers.get("Transfer-Encoding", ""): return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = b""
        while (n := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)):
            out += self.rfile.read(n); self.rfile.readline()
        while self.rfile.readline().strip(): pass       # trailers
        return out

    def _any(self):
        body = self._body()
        f = self.server.fault
        with f.lock:
            hit = f.mode != "pass" and self.command in f.methods
            if hit and f.after > 0: f.after, hit = f.after - 1, False
            f.seen += 1
            if hit: f.faults += 1
            slow = hit and f.mode == "slow"
            if slow: f.mode = "pass"
        if slow: time.sleep(f.delay)
        if hit and f.mode == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        if hit and not slow:
            code, msg = _ERR[int(f.mode)]
            data = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{msg}</Message>'
                    f'<RequestId>rb-fault</RequestId></Error>').encode()
            self.send_response(int(f.mode)); self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
            return
        c = http.client.HTTPConnection("127.0.0.1", f.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "transfer-encoding")}
        c.request(self.command, self.path, body=body, headers=headers)
        r = c.getresponse(); data = r.read(); c.close()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length", "server", "date"): self.send_header(k, v)
        self.send_header("Content-Length", r.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command != "HEAD": self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any


class S3Fault:
    "moto's S3 server (bucket `ragbench`) behind a proxy that resets, answers 500 or 403 on request."
    def __init__(self):
        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        import boto3
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        self.upstream = self.moto.get_host_and_port()[1]
        self.lock, self.mode, self.after, self.methods, self.seen, self.faults = threading.Lock(), "pass", 0, (), 0, 0
        self.delay = 0.0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
        self.httpd.daemon_threads = True
        self.httpd.fault = self
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.env = dict(AWS_ACCESS_KEY_ID="testkey", AWS_SECRET_ACCESS_KEY="testsecret", AWS_REGION="us-east-1",
                        AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=self.url, AWS_ENDPOINT=self.url, AWS_ALLOW_HTTP="true")
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.upstream}", region_name="us-east-1",
                     aws_access_key_id="testkey", aws_secret_access_key="testsecret").create_bucket(Bucket="ragbench")

    def fail(self, mode: str = "pass", after: int = 0, methods=("GET", "PUT", "POST", "DELETE", "HEAD"),
             delay: float = 0.0) -> None:
        "From now on: after `after` more requests of `methods` pass, answer each with `mode` (pass/reset/500/403/slow)."
        with self.lock:
            self.mode, self.after, self.methods, self.faults, self.delay = str(mode), after, tuple(methods), 0, delay

    def stop(self):
        self.httpd.shutdown(); self.moto.stop()
