"""A stand-in for the Hugging Face Hub, run on a simulated node: the two calls sparkrack's
download makes (the revision's file list, then each file by `resolve`), a bearer token required
on both, and every request logged as one JSON line so that the test can count what was fetched
and whether it was authorized. Serves one repo at one revision from a directory on the node.
Not the Hub: no LFS, no redirects, no ETags."""

from __future__ import annotations

import shlex

HUB_PY = r"""
import json, os, sys, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

directory, repo, revision, token, port, log = sys.argv[1:7]

class Hub(BaseHTTPRequestHandler):
    def do_GET(self):
        path = urllib.parse.unquote(self.path)
        authorized = self.headers.get("Authorization") == f"Bearer {token}"
        with open(log, "a") as out:
            out.write(json.dumps({"path": path, "authorized": authorized}) + "\n")
        if not authorized:
            return self.answer(401, b'{"error": "Invalid credentials in Authorization header"}')
        names = sorted(os.listdir(directory))
        if path == f"/api/models/{repo}/revision/{revision}":
            body = {"id": repo, "sha": "0" * 40, "siblings": [{"rfilename": n} for n in names]}
            return self.answer(200, json.dumps(body).encode())
        prefix = f"/{repo}/resolve/{revision}/"
        name = path[len(prefix):] if path.startswith(prefix) else ""
        if name not in names:
            return self.answer(404, b'{"error": "Entry not found"}')
        with open(os.path.join(directory, name), "rb") as file:
            self.answer(200, file.read())

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("0.0.0.0", int(port)), Hub).serve_forever()
"""


def hub_command(directory: str, repo: str, revision: str, token: str, port: int, log: str) -> str:
    """sh on the node: the hub started in the background; prints its pid."""
    args = shlex.join([directory, repo, revision, token, str(port), log])
    return f"nohup python3 -c {shlex.quote(HUB_PY)} {args} >/dev/null 2>&1 & echo $!"
