#!/usr/bin/env python3
"""Load on `chorus serve` with clients that hang up: N streamed speech requests (PCM) from many
concurrent clients against a tiny model on 127.0.0.1, a share of them disconnecting at a random
point (inside the request head, inside the body, after the request before any answer, or while the
audio streams; by FIN or by RST), with more clients than the server admits so its queue overflows.

Checks: every client that stayed got a whole 200 stream or a 429 with Retry-After and the queue_full
error, each 429 within --refusal-bound-ms of the request (the real times are reported); disconnects
cancelled streams (the cancel counter moved); afterwards /metrics shows no active, running or queued
stream and no connection but the scrape's own, within --settle-s; resident memory after the run is
within --rss-slack-mib of its value after a warm-up run of the same mix; /health still answers; on
SIGTERM the server exits 0 and its log holds no sanitizer report (a leak at exit fails there too).
"""
import argparse
import asyncio
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serverlib as sl  # noqa: E402

KINDS = ["before_headers", "mid_body", "after_request", "mid_stream"]
RETRIES = 10


class Tally:
    def __init__(self):
        self.ok = 0
        self.refused = 0  # 429 answers (a request may get several before it is served)
        self.gave_up = 0  # requests refused RETRIES + 1 times
        self.hung_up = {k: 0 for k in KINDS}
        self.refusal_ms = []
        self.errors = []
        self.audio_bytes = 0


async def one_request(port, model, rng, kind, t, frames):
    head, body = sl.request_bytes(sl.speech_body(model, rng, frames))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    reset = rng.random() < 0.5
    try:
        if kind == "before_headers":
            writer.write(head[: rng.randrange(1, len(head))])
            await writer.drain()
            await asyncio.sleep(rng.uniform(0, 0.02))
            sl.hang_up(writer, reset)
            t.hung_up[kind] += 1
            return
        if kind == "mid_body":
            writer.write(head + body[: rng.randrange(0, len(body))])
            await writer.drain()
            await asyncio.sleep(rng.uniform(0, 0.02))
            sl.hang_up(writer, reset)
            t.hung_up[kind] += 1
            return
        writer.write(head + body)
        await writer.drain()
        sent = time.monotonic()
        if kind == "after_request":
            await asyncio.sleep(rng.uniform(0, 0.01))
            sl.hang_up(writer, reset)
            t.hung_up[kind] += 1
            return
        status, headers = await sl.read_head(reader)
        if status == 429:
            t.refusal_ms.append((time.monotonic() - sent) * 1e3)
            payload = await sl.read_body(reader, headers)
            if "retry-after" not in headers or b'"queue_full"' not in payload:
                t.errors.append(f"429 without Retry-After or queue_full: {headers} {payload[:200]!r}")
            t.refused += 1
            return "refused"
        if status != 200:
            payload = await sl.read_body(reader, headers)
            t.errors.append(f"status {status}: {payload[:200]!r}")
            return
        if kind == "mid_stream":
            got = await sl.read_chunked(reader, limit=rng.randrange(1, 64 << 10))
            if got is None:
                sl.hang_up(writer, reset)
                t.hung_up[kind] += 1
            else:
                t.ok += 1  # the stream ended before this client meant to leave
            return
        audio = await sl.read_chunked(reader)
        if len(audio) == 0 or len(audio) % 2 or len(audio) > frames * 1920 * 2:
            t.errors.append(f"PCM body of {len(audio)} bytes for at most {frames} frames")
            return
        t.audio_bytes += len(audio)
        t.ok += 1
    except (ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
        t.errors.append(f"{kind}: {type(e).__name__}: {e}")
    finally:
        if not writer.transport.is_closing():
            writer.close()


async def run_load(port, model, n, disconnect, concurrency, seed):
    rng = random.Random(seed)
    plan = []
    for _ in range(n):
        kind = rng.choice(KINDS) if rng.random() < disconnect else "full"
        # Streams cut mid-way are long enough to still be running when their client leaves.
        frames = rng.randint(100, 250) if kind == "mid_stream" else rng.randint(4, 30)
        plan.append((kind, frames, rng.randrange(1 << 30)))
    t = Tally()
    queue = asyncio.Queue()
    for p in plan:
        queue.put_nowait(p)

    async def worker():
        while not queue.empty():
            kind, frames, s = queue.get_nowait()
            rng = random.Random(s)
            # A refused client backs off and tries again, as real ones do, a few times at most.
            for attempt in range(RETRIES + 1):
                outcome = None
                try:
                    outcome = await asyncio.wait_for(one_request(port, model, random.Random(rng.random()), kind, t, frames), 120)
                except asyncio.TimeoutError:
                    t.errors.append(f"{kind}: no answer within 120 s")
                if outcome != "refused":
                    break
                if attempt == RETRIES:
                    t.gave_up += 1
                else:
                    await asyncio.sleep(rng.uniform(0.05, 0.3))

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return t, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chorus", required=True)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--disconnect", type=float, default=0.3)
    ap.add_argument("--concurrency", type=int, default=24)
    ap.add_argument("--max-streams", type=int, default=4)
    ap.add_argument("--max-queue", type=int, default=8)
    ap.add_argument("--refusal-bound-ms", type=float, default=1000, help="largest 429 time allowed (CI bound)")
    ap.add_argument("--rss-slack-mib", type=float, default=48)
    ap.add_argument("--settle-s", type=float, default=15)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()

    work = a.work or tempfile.mkdtemp(prefix="chorus-load-")
    model_dir = sl.make_tiny(a.chorus, os.path.join(work, "tiny_cv"))
    model = os.path.basename(model_dir)
    srv = sl.Server(a.chorus, ["--model", model_dir, "--max-streams", str(a.max_streams), "--max-queue", str(a.max_queue),
                               "--threads", "2", "--grace", "30"], os.path.join(work, "serve.log"))
    failures = []
    try:
        idle, ok = sl.wait_idle(srv.port, 5)
        if not ok:
            sl.fail(f"not idle at start: {idle}")
        t_w, wall_w = asyncio.run(run_load(srv.port, model, a.warmup, a.disconnect, a.concurrency, a.seed + 1))
        st, ok = sl.wait_idle(srv.port, a.settle_s)
        if not ok:
            failures.append(f"not idle after the warm-up: {st}")
        m_warm = sl.metrics(srv.port)
        rss_warm = m_warm["chorus_resident_memory_bytes"] / 2**20
        failures += [f"warm-up: {e}" for e in t_w.errors[:10]]

        t, wall = asyncio.run(run_load(srv.port, model, a.requests, a.disconnect, a.concurrency, a.seed))
        settle0 = time.monotonic()
        st, ok = sl.wait_idle(srv.port, a.settle_s)
        settle = time.monotonic() - settle0
        m = sl.metrics(srv.port)
        rss = m["chorus_resident_memory_bytes"] / 2**20
        cancelled = m.get("chorus_streams_cancelled_total", 0) - m_warm.get("chorus_streams_cancelled_total", 0)
        refusals = sl.counter_sum(m, "chorus_refusals_total", reason="queue_full") - sl.counter_sum(
            m_warm, "chorus_refusals_total", reason="queue_full")
        hung = sum(t.hung_up.values())
        r = t.refusal_ms
        sl.log(f"load: {a.requests} requests in {wall:.1f} s (warm-up {a.warmup} in {wall_w:.1f} s), concurrency "
               f"{a.concurrency}, server --max-streams {a.max_streams} --max-queue {a.max_queue}")
        sl.log(f"  clients: {t.ok} whole 200 streams ({t.audio_bytes / 2**20:.1f} MiB PCM), {t.refused} refused (429), "
               f"{hung} hung up {t.hung_up}, {len(t.errors)} errors")
        sl.log(f"  server: {int(cancelled)} streams cancelled, {int(refusals)} queue_full refusals; idle after "
               f"{settle:.2f} s: {st}")
        sl.log(f"  429 time from request to status: p50 {sl.pct(r, 50):.1f} ms, p99 {sl.pct(r, 99):.1f} ms, "
               f"max {max(r) if r else 0:.1f} ms over {len(r)} refusals (bound {a.refusal_bound_ms:.0f} ms)")
        sl.log(f"  resident memory: {rss_warm:.1f} MiB after the warm-up, {rss:.1f} MiB after the run "
               f"(slack {a.rss_slack_mib:.0f} MiB)")
        failures += t.errors[:20]
        if not ok:
            failures.append(f"not idle {a.settle_s} s after the run: {st}")
        if t.ok < a.requests // 5:  # vacuity guard: overload must not turn every request away
            failures.append(f"only {t.ok} whole streams")
        if t.refused == 0 or refusals == 0:
            failures.append("the queue never overflowed (no 429): raise --concurrency")
        if hung < a.requests * a.disconnect / 2 or min(t.hung_up.values()) == 0:
            failures.append(f"too few or too uniform hang-ups: {t.hung_up}")
        if cancelled < 1:
            failures.append("no stream was cancelled by its client leaving")
        if r and max(r) > a.refusal_bound_ms:
            failures.append(f"a 429 took {max(r):.1f} ms (bound {a.refusal_bound_ms} ms)")
        if rss > rss_warm + a.rss_slack_mib:
            failures.append(f"resident memory grew from {rss_warm:.1f} to {rss:.1f} MiB")
        status, _, _ = sl.get(srv.port, "/health")
        if status != 200:
            failures.append(f"/health answered {status} after the run")
    finally:
        rc = srv.terminate()
    log_text = open(srv.log_path, "rb").read().decode(errors="replace")
    for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer", "runtime error:"):
        if marker in log_text:
            failures.append(f"sanitizer report in the server log ({marker})")
    if rc != 0:
        failures.append(f"chorus serve exited with {rc} after SIGTERM")
    if failures:
        sl.log(srv.log_tail(80))
    sl.finish(failures, "load test")


if __name__ == "__main__":
    main()
