#!/usr/bin/env python3
"""A LiveRelay webhook receiver using only the Python standard library (docs/webhooks.md).

It verifies `LiveRelay-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]`: each v1 is the
lowercase hex HMAC-SHA256 with key = the whole "whsec_..." secret (UTF-8) over "<t>.<raw body>".
A request is genuine when any v1 matches a secret you hold and t is recent (replay window).

    python3 receiver.py --secret whsec_... [--port 8000] [--cert cert.pem --key key.pem]

Extra flags used by LiveRelay's tests and benchmark: --secret-file FILE (one secret per line,
re-read on every request, so a rotation can be followed), --record FILE (one JSON line per
request), --port-file FILE (the bound port, for --port 0), --tolerance SECONDS (0: skip the age
check). Paths /status/<code> answer that status, /slow/<seconds> sleeps first, /big answers
100 KiB; every other path answers 200 when the signature verifies, else 400.
"""
import argparse
import hashlib
import hmac
import http.server
import json
import ssl
import threading
import time


def verify(header, body, secrets, tolerance=300, now=None):
    """True when `header` has a recent t and a v1 matching one of `secrets` for `body` (bytes)."""
    now = time.time() if now is None else now
    pairs = [p.split("=", 1) for p in header.split(",") if "=" in p]
    t = next((v for k, v in pairs if k == "t"), None)
    if t is None or not t.isdigit():
        return False
    if tolerance and abs(now - int(t)) > tolerance:
        return False
    signed = t.encode() + b"." + body
    for secret in secrets:
        expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        if any(k == "v1" and hmac.compare_digest(v, expected) for k, v in pairs):
            return True
    return False


def main():
    ap = argparse.ArgumentParser(description="LiveRelay webhook receiver")
    ap.add_argument("--secret", action="append", default=[])
    ap.add_argument("--secret-file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--port-file")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--record")
    ap.add_argument("--tolerance", type=float, default=300)
    args = ap.parse_args()
    lock = threading.Lock()

    def secrets():
        s = list(args.secret)
        if args.secret_file:
            try:
                with open(args.secret_file) as f:
                    s += [line.strip() for line in f if line.strip()]
            except FileNotFoundError:
                pass
        return s

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            ok = verify(self.headers.get("LiveRelay-Signature", ""), body, secrets(), args.tolerance)
            status, reply = (200 if ok else 400), b"ok" if ok else b"bad signature"
            parts = self.path.strip("/").split("/")
            if parts[0] == "status" and len(parts) > 1:
                status = int(parts[1])
            elif parts[0] == "slow" and len(parts) > 1:
                time.sleep(float(parts[1]))
            elif parts[0] == "big":
                reply = b"x" * 100 * 1024
            if args.record:
                rec = {"path": self.path, "event_id": self.headers.get("LiveRelay-Event-Id"),
                       "signature": self.headers.get("LiveRelay-Signature"), "user_agent": self.headers.get("User-Agent"),
                       "content_type": self.headers.get("Content-Type"), "verified": ok, "status": status,
                       "body": body.decode("utf-8", "replace"), "received_at": time.time()}
                with lock, open(args.record, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            self.send_response(status)
            if status in (301, 302, 307, 308):
                self.send_header("Location", "https://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        import os
        os.replace(args.port_file + ".tmp", args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
