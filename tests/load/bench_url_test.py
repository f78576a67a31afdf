#!/usr/bin/env python3
"""`chorus bench --serve --url` against a `chorus serve` on 127.0.0.1 with a tiny model: a short
open-loop run whose JSON must be sane (requests made and completed, none failed or refused, time to
first audio and throughput measured) and agree with what the server itself counted in /metrics
(speech streams answered 200, seconds of audio made: each request asks for an exact length)."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serverlib as sl  # noqa: E402


def main():
    a, work = sl.check_args(__doc__, "chorus-bench-url-")
    model_dir = sl.make_tiny(a.chorus, os.path.join(work, "tiny_cv"))
    srv = sl.Server(a.chorus, ["--model", model_dir, "--max-streams", "16"], os.path.join(work, "serve.log"))
    out = os.path.join(work, "bench.json")
    failures = []
    try:
        before = sl.metrics(srv.port)
        r = subprocess.run([a.chorus, "bench", "--model", model_dir, "--serve", "--url", f"http://127.0.0.1:{srv.port}",
                            "--voice", "ryan", "--rate", "8", "--duration", "3", "--lengths", "0.5-2", "--seed", "3",
                            "--json", out], capture_output=True, text=True, timeout=120)
        sl.log(r.stdout.strip())
        if r.returncode != 0:
            sl.fail(f"chorus bench exited {r.returncode}: {r.stderr}")
        after = sl.metrics(srv.port)
    finally:
        rc = srv.terminate()
    doc = json.load(open(out))
    p = doc["points"][0]
    served = p["requests"] - p["refused"] - p["failed"]
    ok_streams = sl.counter_sum(after, "chorus_http_requests_total", endpoint="speech", status="200") - sl.counter_sum(
        before, "chorus_http_requests_total", endpoint="speech", status="200")
    audio_s = after.get("chorus_audio_seconds_total", 0) - before.get("chorus_audio_seconds_total", 0)
    sl.log(f"bench --url: {p['requests']} requests, {served} served; server: {int(ok_streams)} streams, "
           f"{audio_s:.1f} s of audio")
    if doc.get("url") != f"http://127.0.0.1:{srv.port}" or doc.get("model") != "tiny_cv":
        failures.append(f"url/model fields: {doc.get('url')} {doc.get('model')}")
    if p["requests"] < 5 or served != p["requests"]:
        failures.append(f"requests {p['requests']}, refused {p['refused']}, failed {p['failed']}")
    if ok_streams != p["requests"]:
        failures.append(f"the server answered {ok_streams} streams for {p['requests']} requests")
    # Lengths are drawn in [0.5, 2] s and each request makes exactly its frames.
    if not (0.5 * p["requests"] - 0.1 <= audio_s <= 2.0 * p["requests"] + 0.1):
        failures.append(f"{audio_s} s of audio for {p['requests']} requests of 0.5-2 s")
    if not (0 < p["ttfa_p50_s"] <= p["ttfa_p90_s"] <= p["ttfa_p99_s"] < 30):
        failures.append(f"TTFA percentiles {p['ttfa_p50_s']} {p['ttfa_p90_s']} {p['ttfa_p99_s']}")
    if not (0 < p["frame_gap_p99_ms"] <= p["frame_gap_max_ms"]):
        failures.append(f"frame gap p99 {p['frame_gap_p99_ms']} ms against max {p['frame_gap_max_ms']} ms")
    if not (p["audio_s_per_s"] > 0 and p["frame_gap_p99_ms"] > 0 and p["streams_max"] >= 1 and p["peak_rss_mib"] > 1):
        failures.append(f"throughput, gaps, streams or memory missing: {p}")
    if rc != 0:
        failures.append(f"chorus serve exited {rc}")
    sl.finish(failures, "bench --url test")


if __name__ == "__main__":
    main()
