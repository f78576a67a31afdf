#!/usr/bin/env python3
"""Routing across replicas, for real: Debian's nginx in front of two `chorus serve` processes on
loopback ports, balanced by least_conn, configured as docs/routing.md describes (streaming without
buffering, passive health: a refused connection or a 503 sends the request to the other replica).

A load run of streamed speech requests goes through nginx; part-way through, replica A gets SIGTERM
while a stream of its own is running. Checks: both replicas served requests; A's /ready answers 503
on a connection opened before the signal; A finishes the streams it had (that one whole) and exits 0; every client request succeeds (a whole 200 PCM
stream), the ones sent after the signal included, which A's refusals or its closed port pushed on
to replica B.

nginx runs as the calling user from a temporary prefix: its config, pid file, logs and temp paths
all live there, and it listens on 127.0.0.1 only.
"""
import argparse
import asyncio
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serverlib as sl  # noqa: E402

HELD_FRAMES = 300

NGINX_CONF = """\
{user}worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log notice;
events {{ worker_connections 1024; }}
http {{
  log_format upstreams '$request_method|$uri|$status|$upstream_addr|$upstream_status';
  access_log {prefix}/access.log upstreams;
  client_body_temp_path {prefix}/tmp/body;
  proxy_temp_path {prefix}/tmp/proxy;
  fastcgi_temp_path {prefix}/tmp/fastcgi;
  uwsgi_temp_path {prefix}/tmp/uwsgi;
  scgi_temp_path {prefix}/tmp/scgi;
  upstream chorus {{
    least_conn;
    server 127.0.0.1:{port_a} max_fails=1 fail_timeout=10s;
    server 127.0.0.1:{port_b} max_fails=1 fail_timeout=10s;
    keepalive 32;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://chorus;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering on;
      proxy_read_timeout 300s;
      proxy_next_upstream error timeout http_503 non_idempotent;
      proxy_next_upstream_tries 2;
    }}
  }}
}}
"""


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nginx(prefix, port_a, port_b):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        sl.fail("nginx is not installed (scripts/install-deps.sh)")
    os.makedirs(os.path.join(prefix, "tmp"), exist_ok=True)
    for log in ("access.log", "error.log"):
        if os.path.exists(os.path.join(prefix, log)):
            os.remove(os.path.join(prefix, log))
    for _ in range(5):
        port = free_port()
        conf = os.path.join(prefix, "nginx.conf")
        with open(conf, "w") as f:
            # As root, nginx would run its worker as nobody, which cannot use this private prefix.
            f.write(NGINX_CONF.format(user="user root;\n" if os.geteuid() == 0 else "", prefix=prefix, port=port,
                                      port_a=port_a, port_b=port_b))
        proc = subprocess.Popen([nginx, "-p", prefix, "-c", conf, "-e", os.path.join(prefix, "error.log")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if sl.get(port, "/health", timeout=2)[0] == 200:
                    return proc, port
            except OSError:
                time.sleep(0.05)
        proc.kill()
        proc.wait()
    sl.fail("nginx did not start:\n" + open(os.path.join(prefix, "error.log")).read()[-3000:])


class Tally:
    def __init__(self):
        self.ok = 0
        self.failures = []
        self.done = 0


async def one(port, model, rng, t):
    frames = rng.randint(60, 160) if rng.random() < 0.3 else rng.randint(4, 30)
    head, body = sl.request_bytes(sl.speech_body(model, rng, frames))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + body)
        await writer.drain()
        status, headers = await sl.read_head(reader)
        payload = await sl.read_body(reader, headers)
        writer.close()
        if status != 200:
            t.failures.append(f"status {status}: {payload[:200]!r}")
        elif len(payload) == 0 or len(payload) % 2 or len(payload) > frames * 3840:
            t.failures.append(f"PCM body of {len(payload)} bytes for at most {frames} frames")
        else:
            t.ok += 1
    except (ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
        t.failures.append(f"{type(e).__name__}: {e}")
    t.done += 1


async def load(port, model, n, concurrency, seed, t, on_progress):
    rng = random.Random(seed)
    seeds = [rng.randrange(1 << 30) for _ in range(n)]
    it = iter(seeds)

    async def worker():
        for s in it:
            await one(port, model, random.Random(s), t)
            on_progress(t.done)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", required=True)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=12)
    ap.add_argument("--drain-at", type=float, default=0.4, help="share of requests done when replica A gets SIGTERM")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()

    work = a.work or tempfile.mkdtemp(prefix="chorus-routing-")
    model_dir = sl.make_tiny(a.chorus, os.path.join(work, "tiny_cv"))
    model = os.path.basename(model_dir)
    args = ["--model", model_dir, "--max-streams", "8", "--max-queue", "64", "--grace", "60"]
    ra = sl.Server(a.chorus, args, os.path.join(work, "replica_a.log"))
    rb = sl.Server(a.chorus, args, os.path.join(work, "replica_b.log"))
    prefix = os.path.join(work, "nginx")
    os.makedirs(prefix, exist_ok=True)
    nginx, port = start_nginx(prefix, ra.port, rb.port)
    failures = []
    drained = {}
    try:
        # A kept-alive connection to A, opened before the drain: new connections are refused then.
        probe = http.client.HTTPConnection("127.0.0.1", ra.port, timeout=10)
        probe.request("GET", "/ready")
        r = probe.getresponse()
        r.read()
        if r.status != 200:
            failures.append(f"replica A not ready before the drain: {r.status}")
        m_a = {}

        def on_progress(done):
            if drained or done < a.requests * a.drain_at:
                return
            nonlocal m_a
            # A stream of A's own, running when the signal comes, so the drain has one to finish.
            held = http.client.HTTPConnection("127.0.0.1", ra.port, timeout=60)
            held.request("POST", "/v1/audio/speech", body=json.dumps(
                {"model": model, "input": "A stream that outlives the signal.", "voice": "ryan",
                 "response_format": "pcm", "max_new_tokens": HELD_FRAMES, "min_new_tokens": HELD_FRAMES}),
                headers={"Content-Type": "application/json"})
            held_response = held.getresponse()
            first = held_response.read(3840)
            m_a = sl.metrics(ra.port)
            drained["active_at_signal"] = m_a.get("chorus_active_streams", 0)
            ra.proc.send_signal(signal.SIGTERM)
            drained["at"] = time.monotonic()

            def wait_exit():
                drained["rc"] = ra.proc.wait()
                drained["exit_after_s"] = time.monotonic() - drained["at"]
            threading.Thread(target=wait_exit, daemon=True).start()
            # Synchronous on purpose: the load keeps going on the event loop's sockets meanwhile.
            # The signal reaches the server's loop asynchronously: /ready must turn 503 within a
            # moment (a load balancer polls it), not necessarily on the very next request.
            for _ in range(20):
                probe.request("GET", "/ready")
                rr = probe.getresponse()
                rr.read()
                drained["ready_status"] = rr.status
                if rr.status == 503:
                    break
                time.sleep(0.1)
            drained["held_bytes"] = len(first) + len(held_response.read()) if held_response.status == 200 else -1
            held.close()

        t = Tally()
        t0 = time.monotonic()
        asyncio.run(load(port, model, a.requests, a.concurrency, a.seed, t, on_progress))
        wall = time.monotonic() - t0
        rc_a = ra.proc.wait(timeout=90)
        for _ in range(100):
            if "exit_after_s" in drained or not drained:
                break
            time.sleep(0.01)
        probe.close()
        served = {"a": 0, "b": 0, "retried": 0}
        for line in open(os.path.join(prefix, "access.log")):
            method, uri, status, addrs, _ = line.rstrip("\n").split("|")
            if method != "POST" or status != "200":
                continue
            if "," in addrs:
                served["retried"] += 1
            last = addrs.split(",")[-1].strip()
            served["a" if last == f"127.0.0.1:{ra.port}" else "b"] += 1
        sl.log(f"routing: {a.requests} requests through nginx (least_conn) in {wall:.1f} s, concurrency {a.concurrency}: "
               f"{t.ok} whole 200 streams, {len(t.failures)} failed")
        sl.log(f"  served by replica A {served['a']}, by B {served['b']}, moved on by nginx after a refusal or a "
               f"closed port {served['retried']}")
        sl.log(f"  drain of A: {int(drained.get('active_at_signal', -1))} streams active at SIGTERM, /ready then "
               f"{drained.get('ready_status')}, exited {rc_a} {drained.get('exit_after_s', -1):.2f} s after the signal")
        failures += t.failures[:20]
        if t.ok != a.requests:
            failures.append(f"{a.requests - t.ok} client requests failed")
        if served["a"] == 0 or served["b"] == 0:
            failures.append(f"a replica served nothing: {served}")
        if not drained:
            failures.append("replica A was never drained")
        elif drained.get("ready_status") != 503:
            failures.append(f"A's /ready answered {drained.get('ready_status')} while draining")
        if drained and drained.get("held_bytes") != HELD_FRAMES * 3840:
            failures.append(f"the stream running on A at the signal ended after {drained.get('held_bytes')} bytes, "
                            f"not {HELD_FRAMES * 3840}")
        if rc_a != 0:
            failures.append(f"replica A exited with {rc_a} after SIGTERM")
        if sl.get(port, "/health")[0] != 200:
            failures.append("nginx lost the remaining replica")
    finally:
        nginx.send_signal(signal.SIGQUIT)
        try:
            nginx.wait(timeout=10)
        except subprocess.TimeoutExpired:
            nginx.kill()
        rc_b = rb.terminate()
        if ra.proc.poll() is None:
            ra.terminate()
    if rc_b != 0:
        failures.append(f"replica B exited with {rc_b}")
    for srv in (ra, rb):
        text = open(srv.log_path, "rb").read().decode(errors="replace")
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer", "runtime error:"):
            if marker in text:
                failures.append(f"sanitizer report in {srv.log_path}")
    if failures:
        sl.log("nginx error log:\n" + open(os.path.join(prefix, "error.log")).read()[-3000:])
    sl.finish(failures, "routing test")


if __name__ == "__main__":
    main()
