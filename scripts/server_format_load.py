#!/usr/bin/env python3
"""N concurrent streamed POST /v1/audio/speech requests of one response format against a running
`chorus serve`, each of exactly FRAMES frames (min_new_tokens = max_new_tokens), all started at
once; prints the wall time until the last ends, the audio seconds per second that makes, and the
median time to the first byte. Standard library only.

  scripts/server_format_load.py --port 8000 --model NAME --streams 48 --format opus --frames 100
"""
import argparse
import http.client
import json
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model", required=True)
    ap.add_argument("--voice", default="ryan")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--format", default="opus")
    ap.add_argument("--frames", type=int, default=100)
    a = ap.parse_args()
    results = [None] * a.streams

    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
        body = json.dumps({"model": a.model, "input": "Hello there, this is one of many streams.", "voice": a.voice,
                           "seed": i, "response_format": a.format, "stream": True,
                           "min_new_tokens": a.frames, "max_new_tokens": a.frames})
        t0 = time.time()
        c.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        first, total = None, 0
        while True:
            b = r.read1(65536)
            if not b:
                break
            if first is None:
                first = time.time() - t0
            total += len(b)
        results[i] = (r.status, first, total)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(a.streams)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    ok = [r for r in results if r and r[0] == 200]
    firsts = sorted(r[1] for r in ok if r[1] is not None)
    if not firsts:
        sys.exit("no request succeeded")
    first_ms = firsts[len(firsts) // 2] * 1000
    print(f"{a.format}: {len(ok)}/{a.streams} ok, wall {wall:.2f} s, "
          f"{a.streams * a.frames * 0.08 / wall:.1f} audio-s/s, first byte p50 {first_ms:.0f} ms, "
          f"{sum(r[2] for r in ok)} bytes")


if __name__ == "__main__":
    main()
