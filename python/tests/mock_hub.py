"""A stand-in for the Hugging Face Hub on 127.0.0.1, for testing `chorus pull` offline.

It serves folders as model repositories with the Hub's endpoints and headers:
  GET  /api/models/ORG/NAME/revision/REV        {"sha": COMMIT, "siblings": [{"rfilename": ...}]}
  HEAD/GET /ORG/NAME/resolve/REV/PATH           small files: 200, ETag (git blob id), X-Repo-Commit;
                                                *.safetensors (LFS): 302 to /cdn/SHA256 with
                                                X-Linked-Etag (the sha256), X-Linked-Size
  GET  /cdn/SHA256                              the bytes, with Range support (206)
and the failures a client must survive: a 401 for a gated repository without the right token, a
connection cut in the middle of a file (once), and an LFS file whose advertised sha256 is wrong.
"""
import hashlib
import http.server
import json
import os
import threading


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, folder, commit, gated_token=None, corrupt=(), extra_files=None):
        self.commit = commit
        self.gated_token = gated_token
        self.files = {}
        for root, _, names in os.walk(folder):
            for n in names:
                p = os.path.join(root, n)
                with open(p, "rb") as f:
                    self.files[os.path.relpath(p, folder).replace(os.sep, "/")] = f.read()
        for k, v in (extra_files or {}).items():
            self.files[k] = v
        self.corrupt = set(corrupt)  # LFS paths whose advertised sha256 is wrong


class Hub:
    def __init__(self):
        self.repos = {}
        self.blobs = {}          # sha256 -> bytes
        self.cut_once = set()    # sha256 of blobs whose first GET is cut halfway
        self.log = []            # (method, path, range header)
        self.lock = threading.Lock()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.handle(self, head=True)

            def do_GET(self):
                hub.handle(self, head=False)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def add(self, repo_id, repo):
        self.repos[repo_id] = repo
        for path, data in repo.files.items():
            if path.endswith(".safetensors"):
                self.blobs[hashlib.sha256(data).hexdigest()] = data

    def requests(self, prefix=""):
        with self.lock:
            return [r for r in self.log if r[1].startswith(prefix)]

    @staticmethod
    def send(h, status, headers=None, body=b"", head=False):
        h.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Length", str(len(body)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if not head and body:
            h.wfile.write(body)

    def handle(self, h, head):
        path = h.path.split("?", 1)[0]
        with self.lock:
            self.log.append(("HEAD" if head else "GET", path, h.headers.get("Range")))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
            return self.api(h, parts[2] + "/" + parts[3], parts[5], head)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(h, parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), head)
        if len(parts) == 2 and parts[0] == "cdn":
            return self.cdn(h, parts[1], head)
        self.send(h, 404, body=b"not found", head=head)

    def authorized(self, h, repo):
        if repo.gated_token is None:
            return True
        return h.headers.get("Authorization") == f"Bearer {repo.gated_token}"

    def api(self, h, repo_id, rev, head):
        repo = self.repos.get(repo_id)
        if repo is None or rev not in ("main", repo.commit):
            return self.send(h, 404, body=b'{"error": "Repository not found"}', head=head)
        if not self.authorized(h, repo):
            return self.send(h, 401, body=b'{"error": "Access to this model is restricted"}', head=head)
        body = json.dumps({"id": repo_id, "sha": repo.commit,
                           "siblings": [{"rfilename": f} for f in sorted(repo.files)]}).encode()
        self.send(h, 200, {"Content-Type": "application/json"}, body, head)

    def resolve(self, h, repo_id, rev, file, head):
        repo = self.repos.get(repo_id)
        if repo is None or rev not in ("main", repo.commit) or file not in repo.files:
            return self.send(h, 404, {"X-Error-Code": "EntryNotFound"}, b"", head)
        if not self.authorized(h, repo):
            return self.send(h, 401, body=b"gated", head=head)
        data = repo.files[file]
        common = {"X-Repo-Commit": repo.commit}
        if file.endswith(".safetensors"):
            sha = hashlib.sha256(data).hexdigest()
            advertised = ("0" * 64) if file in repo.corrupt else sha
            headers = dict(common, **{"Location": f"/cdn/{sha}", "X-Linked-Etag": f'"{advertised}"',
                                      "X-Linked-Size": str(len(data)), "ETag": '"cdn-etag-not-the-blob"'})
            return self.send(h, 302, headers, b"", head)
        headers = dict(common, **{"ETag": f'"{git_blob_id(data)}"', "Content-Type": "application/octet-stream"})
        self.send(h, 200, headers, data, head)

    def cdn(self, h, sha, head):
        data = self.blobs.get(sha)
        if data is None:
            return self.send(h, 404, body=b"", head=head)
        start = 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
        if start >= len(data) and data:
            return self.send(h, 416, {"Content-Range": f"bytes */{len(data)}"}, b"", head)
        status = 206 if start > 0 else 200
        headers = {"ETag": f'"{sha}"', "Accept-Ranges": "bytes", "Content-Length": str(len(data) - start)}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if head:
            return
        body = data[start:]
        with self.lock:
            cut = start == 0 and sha in self.cut_once
            self.cut_once.discard(sha)
        if cut:
            h.wfile.write(body[: len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        h.wfile.write(body)
