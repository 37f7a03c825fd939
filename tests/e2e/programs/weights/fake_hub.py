"""A stand-in for the Hugging Face Hub, run on a simulated node (and on loopback by the unit
tests): as much of the Hub's protocol as `huggingface_hub.snapshot_download` uses, for one repo at
one revision served from a directory, a bearer token required on every request.

- `GET /api/models/{repo}/revision/{rev}`: the model's info, `sha` (the commit the revision names)
  and `siblings` (every file);
- `GET /api/models/{repo}/tree/{rev}`: the file listing (`recursive`), `oid`, `size`, and `lfs`
  for the safetensors, as the Hub lists LFS files;
- `HEAD` and `GET /{repo}/resolve/{rev}/{file}`: `X-Repo-Commit`, `ETag` (the file's sha256, as the
  Hub gives LFS files, so the library can check a file already there), `Content-Length`, and
  `Range: bytes=N-` answered with 206 and `Content-Range`, which is how the library resumes.

`rev` is the revision's name or its commit. Refusals carry the Hub's `X-Error-Code`
(`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`), so the library raises its own errors. Every
request is logged as one JSON line: method, path, whether it was authorized, and its Range, so
that a test can count what was fetched, with which token, and from where.

`faults` ({"cut": {file: n}, "stall": {file: n}}) break the first GET of a file after n bytes:
`cut` closes the connection (the library retries with a Range), `stall` stops sending (a test
kills the download meanwhile). Not the Hub: no redirects to a CDN, no Xet, no pagination.
"""

from __future__ import annotations

import json
import shlex

HUB_PY = r"""
import hashlib, json, os, shutil, sys, threading, time, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

directory, repo, revision, token, port, log = sys.argv[1:7]
faults = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
broken = {(kind, name): n for kind in ("cut", "stall") for name, n in faults.get(kind, {}).items()}
lock = threading.Lock()

def digests(path):
    sha256, blob = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha256.update(chunk)
            blob.update(chunk)
    return sha256.hexdigest(), blob.hexdigest()

files = {}
for root, dirs, names in os.walk(directory):
    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    for name in sorted(names):
        path = os.path.join(root, name)
        files[os.path.relpath(path, directory)] = (path, os.path.getsize(path), *digests(path))
served = [(name, sha256) for name, (_, _, sha256, _) in sorted(files.items())]
commit = hashlib.sha1(json.dumps([revision, served]).encode()).hexdigest()

def tree_entry(name):
    path, size, sha256, blob = files[name]
    entry = {"type": "file", "oid": blob, "size": size, "path": name}
    if name.endswith(".safetensors"):
        entry["lfs"] = {"oid": sha256, "size": size, "pointerSize": 134}
    return entry

class Hub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def route(self):
        url = urllib.parse.urlsplit(self.path)
        path, query = urllib.parse.unquote(url.path), urllib.parse.parse_qs(url.query)
        authorized = self.headers.get("Authorization") == f"Bearer {token}"
        entry = {"method": self.command, "path": path, "authorized": authorized}
        if self.headers.get("Range"):
            entry["range"] = self.headers["Range"]
        with lock, open(log, "a") as out:
            out.write(json.dumps(entry) + "\n")
        if not authorized:
            return self.refuse(401, "", "Invalid credentials in Authorization header")
        api = f"/api/models/{repo}/"
        if path.startswith(api + "revision/"):
            if self.known(path[len(api + "revision/"):]):
                siblings = [{"rfilename": name} for name in files]
                info = {"id": repo, "modelId": repo, "sha": commit, "private": False}
                self.answer(200, {**info, "siblings": siblings})
        elif path.startswith(api + "tree/"):
            if self.known(path[len(api + "tree/"):]):
                deep = query.get("recursive", ["false"])[0].lower() == "true"
                self.answer(200, [tree_entry(n) for n in files if deep or "/" not in n])
        elif path.startswith(f"/{repo}/resolve/"):
            rev, _, name = path[len(f"/{repo}/resolve/"):].partition("/")
            if not self.known(rev):
                return None
            if name not in files:
                return self.refuse(404, "EntryNotFound", f"{name} does not exist at {rev}")
            self.file(name)
        else:
            self.refuse(404, "RepoNotFound", "Repository not found")

    def known(self, rev):
        if rev in (revision, commit):
            return True
        self.refuse(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return False

    def file(self, name):
        path, size, sha256, _ = files[name]
        asked = self.headers.get("Range", "")
        start = int(asked[6:-1]) if asked.startswith("bytes=") and asked.endswith("-") else 0
        self.send_response(206 if start else 200)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{sha256}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(size - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        with lock:  # a fault breaks the first whole GET of its file only
            fault = next(((k, broken.pop((k, name))) for k in ("cut", "stall")
                          if not start and (k, name) in broken), None)
        with open(path, "rb") as f:
            f.seek(start)
            if fault is None:
                return shutil.copyfileobj(f, self.wfile, 1 << 20)
            self.wfile.write(f.read(fault[1]))
        self.wfile.flush()
        if fault[0] == "stall":
            time.sleep(60)
        self.close_connection = True

    def refuse(self, status, code, message):
        headers = {"X-Error-Message": message} | ({"X-Error-Code": code} if code else {})
        self.answer(status, {"error": message}, headers)

    def answer(self, status, value, headers=None):
        data = json.dumps(value).encode()
        self.send_response(status)
        for key, text in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(key, text)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, *args):
        pass

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("0.0.0.0", int(port)), Hub).serve_forever()
"""


def hub_args(
    directory: str,
    repo: str,
    revision: str,
    token: str,
    port: int,
    log: str,
    faults: dict[str, dict[str, int]] | None = None,
) -> list[str]:
    args = [directory, repo, revision, token, str(port), log]
    return args + ([json.dumps(faults)] if faults else [])


def hub_command(directory: str, repo: str, revision: str, token: str, port: int, log: str) -> str:
    """sh on the node: the hub started in the background; prints its pid."""
    args = shlex.join(hub_args(directory, repo, revision, token, port, log))
    return f"nohup python3 -c {shlex.quote(HUB_PY)} {args} >/dev/null 2>&1 & echo $!"
