"""A local stand-in for the Hugging Face Hub, answering the calls huggingface_hub 2.4's
`snapshot_download` / `hf_hub_download` make, for repos held in memory:

- GET  /api/models/{repo}/revision/{rev}      model info: {"id", "sha"} (resolves a branch to its commit)
- GET  /api/models/{repo}/tree/{rev}          the file listing (path, size, git oid; lfs for *.safetensors)
- HEAD /{repo}/resolve/{rev}/{file}           X-Repo-Commit, ETag, Content-Length (the file's metadata)
- GET  /{repo}/resolve/{rev}/{file}           the bytes; `Range: bytes=N-` answers 206 with Content-Range

Errors carry the Hub's headers (X-Error-Code, X-Error-Message), which huggingface_hub
turns into its typed errors. `drop_once` names files whose first GET is cut halfway
(the connection closes), to exercise resuming. Every request is logged.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Repo:
    def __init__(self, files: dict[str, bytes], commit: str = COMMIT):
        self.files, self.commit = files, commit

    @classmethod
    def from_dir(cls, path: Path, **extra: bytes) -> "Repo":
        files = {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}
        return cls({**files, **extra})

    def etag(self, name: str) -> str:
        data = self.files[name]
        if name.endswith(".safetensors"):  # LFS files: the sha256 of the content
            return hashlib.sha256(data).hexdigest()
        return git_oid(data)

    def tree(self) -> list[dict]:
        out = []
        for name, data in self.files.items():
            entry = {"type": "file", "path": name, "size": len(data), "oid": git_oid(data)}
            if name.endswith(".safetensors"):
                entry["lfs"] = {"oid": self.etag(name), "size": len(data), "pointerSize": 134}
            out.append(entry)
        return out


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    def __init__(self, repos: dict[str, Repo], errors: dict[str, tuple[int, dict[str, str]]] | None = None):
        self.repos, self.errors = repos, errors or {}
        self.drop_once: set[str] = set()
        self.log: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def downloads(self) -> list[tuple[str, str | None]]:
        """(path, Range) of every GET of file bytes so far."""
        return [(path, rng) for method, path, rng in self.log if method == "GET" and "/resolve/" in path]


API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<kind>revision|tree)/(?P<rev>[^/?]+)")
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>[^?]+)")


def _handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            self.route(body=True)

        def do_HEAD(self):
            self.route(body=False)

        def route(self, body: bool) -> None:
            hub.log.append((self.command, self.path, self.headers.get("Range")))
            match = API.match(self.path) or RESOLVE.match(self.path)
            if match is None:
                return self.error(404, "NotFound", "no such route")
            name = match["repo"]
            if name in hub.errors:
                status, headers = hub.errors[name]
                return self.reply(status, json.dumps({"error": "refused"}).encode(), headers, body)
            repo = hub.repos.get(name)
            if repo is None:
                return self.error(404, "RepoNotFound", "Repository not found")
            if match["rev"] not in ("main", repo.commit):
                return self.error(404, "RevisionNotFound", f"Invalid rev id: {match['rev']}")
            if "kind" in match.groupdict() and match["kind"] == "revision":
                return self.json({"id": name, "sha": repo.commit, "siblings": [{"rfilename": f} for f in repo.files]})
            if "kind" in match.groupdict():
                return self.json(repo.tree())
            return self.file(repo, match["file"], body)

        def file(self, repo: Repo, name: str, body: bool) -> None:
            if name not in repo.files:
                return self.error(404, "EntryNotFound", f"{name} does not exist", {"X-Repo-Commit": repo.commit})
            data = repo.files[name]
            headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{repo.etag(name)}"', "Accept-Ranges": "bytes"}
            start = int(re.match(r"bytes=(\d+)-", self.headers.get("Range", "bytes=0-"))[1])
            status = 206 if start else 200
            if start:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            if body and name in hub.drop_once:
                hub.drop_once.discard(name)
                return self.cut(status, headers, data[start:])
            self.reply(status, data[start:], headers, body)

        def cut(self, status: int, headers: dict, data: bytes) -> None:
            """Promise the whole body, send half of it, then close the connection."""
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

        def json(self, obj) -> None:
            self.reply(200, json.dumps(obj).encode(), {"Content-Type": "application/json"}, True)

        def error(self, status: int, code: str, message: str, extra: dict | None = None) -> None:
            headers = {"X-Error-Code": code, "X-Error-Message": message, **(extra or {})}
            self.reply(status, json.dumps({"error": message}).encode(), headers, self.command != "HEAD")

        def reply(self, status: int, data: bytes, headers: dict, body: bool) -> None:
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(k, v)
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler
