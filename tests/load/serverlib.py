"""Helpers for the black-box tests of `chorus serve` (Python 3 standard library only): tiny models,
a server process on a loopback port, /metrics read back, a raw asyncio HTTP/1.1 client that can
hang up at any point of a request, and percentiles."""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time


def log(*args):
    print(*args, flush=True)


def fail(message):
    log("FAIL:", message)
    sys.exit(1)


def check_args(doc, prefix):
    """The arguments of a check that takes only --chorus and --work, and its work folder (--work, or a
    new temporary one named from `prefix`)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--chorus", required=True)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    return a, a.work or tempfile.mkdtemp(prefix=prefix)


def finish(failures, name):
    """Ends a check: each failure logged and exit status 1, or `name` passed."""
    for f in failures:
        log("FAIL:", f)
    if failures:
        sys.exit(1)
    log(f"{name} passed")


def make_tiny(chorus, out, variant="custom_voice"):
    if not os.path.isdir(out):
        subprocess.run([chorus, "make-tiny", "--variant", variant, "--out", out], check=True,
                       stdout=subprocess.DEVNULL)
    return out


class Server:
    """One `chorus serve` process; its stderr goes to a log file (sanitizer reports land there)."""

    def __init__(self, chorus, args, log_path, env=None, port=0):
        self.log_path = log_path
        self.log_file = open(log_path, "wb")
        cmd = [chorus, "serve", *args, "--host", "127.0.0.1", "--port", str(port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log_file,
                                     env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline().decode(errors="replace")
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            fail(f"chorus serve did not start: {line!r}\n{self.log_tail()}")
        self.port = int(m.group(1))

    def log_tail(self, n=60):
        if not self.log_file.closed:
            self.log_file.flush()
        with open(self.log_path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")

    def terminate(self, timeout=60):
        """SIGTERM (drain), then the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log_file.close()
        return rc


def get(port, path, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def metrics(port):
    """name or name{labels} -> value, from the Prometheus text format."""
    status, _, body = get(port, "/metrics")
    if status != 200:
        fail(f"/metrics answered {status}")
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


def counter_sum(m, name, **labels):
    """Sum of a metric over the label sets that contain `labels`."""
    total = 0.0
    for key, v in m.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{val}"' in rest for k, val in labels.items()):
            total += v
    return total


def idle_state(m):
    return {
        "active_streams": m.get("chorus_active_streams", -1),
        "queued": m.get('chorus_synthesizer_requests{state="queued"}', -1),
        "running": m.get('chorus_synthesizer_requests{state="running"}', -1),
        "connections": m.get("chorus_http_connections", -1),
    }


def wait_idle(port, timeout):
    """Polls /metrics until nothing runs, waits or stays connected (the scrape itself is the one
    connection); the last state and whether it got there."""
    deadline = time.monotonic() + timeout
    while True:
        st = idle_state(metrics(port))
        if st == {"active_streams": 0, "queued": 0, "running": 0, "connections": 1}:
            return st, True
        if time.monotonic() > deadline:
            return st, False
        time.sleep(0.05)


def pct(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    i = min(len(v) - 1, max(0, int(-(-p * len(v) // 100)) - 1))
    return v[i]


def speech_body(model, rng, frames):
    words = ["morning", "light", "across", "quiet", "streets", "people", "walked", "talking", "plans", "weekend"]
    text = " ".join(rng.choice(words) for _ in range(rng.randint(2, 8))) + "."
    return json.dumps({"model": model, "input": text, "voice": "ryan", "response_format": "pcm",
                       "seed": rng.randrange(1 << 30), "max_new_tokens": frames}).encode()


def request_bytes(body, host="127.0.0.1"):
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head, body


def hang_up(writer, reset):
    """Closes the connection at once; with `reset`, as an RST (SO_LINGER 0) instead of a FIN."""
    sock = writer.get_extra_info("socket")
    if reset and sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


async def read_chunked(reader, limit=None):
    """The body of a chunked response; with `limit`, stops (returns None) once that many body
    bytes arrived. Raises on a malformed or truncated body."""
    body = bytearray()
    while True:
        line = await reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("truncated chunked body")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            await reader.readline()
            return bytes(body)
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise ConnectionError("malformed chunk")
        if limit is not None and len(body) >= limit:
            return None


async def read_head(reader):
    """Status and headers (lower-case names) of a response."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed before a status line")
    status = int(status_line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers


async def read_body(reader, headers):
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return await read_chunked(reader)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()
