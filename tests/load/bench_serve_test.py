#!/usr/bin/env python3
"""`chorus bench --serve` in process on a tiny Breeze TTS 2 model with half the requests guided
(--cfg-scale 3 --cfg-share 0.5), so that guided and plain streams share the batch: every request
must be served (a guided one without an instruction to steer by would be refused, so none failing
shows the guidance reached the engine), the guided count must be the even share of the arrivals,
and the solo replays must give the same codes. Then the errors: guidance on Qwen3-TTS and a share
outside [0, 1] must end the bench with a message that names the problem, not a crash."""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serverlib as sl  # noqa: E402


def bench(chorus, model, *args):
    return subprocess.run([chorus, "bench", "--model", model, "--serve", "--threads", "1", *args], capture_output=True,
                          text=True, timeout=300)


def main():
    a, work = sl.check_args(__doc__, "chorus-bench-serve-")
    breeze = os.path.join(work, "tiny_breeze")
    if not os.path.isdir(breeze):
        subprocess.run([a.chorus, "make-tiny", "--family", "breeze-tts", "--out", breeze], check=True,
                       stdout=subprocess.DEVNULL)
    qwen = sl.make_tiny(a.chorus, os.path.join(work, "tiny_cv"))
    out = os.path.join(work, "bench.json")
    failures = []

    r = bench(a.chorus, breeze, "--rate", "40", "--duration", "1.5", "--lengths", "4-8", "--cfg-scale", "3",
              "--cfg-share", "0.5", "--verify", "4", "--seed", "5", "--json", out)
    sl.log(r.stdout.strip())
    if r.returncode != 0:
        sl.fail(f"chorus bench exited {r.returncode}: {r.stderr}")
    doc = json.load(open(out))
    p = doc["points"][0]
    n = p["requests"]
    if doc.get("cfg_scale") != 3 or doc.get("cfg_share") != 0.5:
        failures.append(f"the JSON's guidance fields: {doc.get('cfg_scale')} {doc.get('cfg_share')}")
    if n < 8 or p["failed"] != 0 or p["refused"] != 0:
        failures.append(f"{n} requests, {p['failed']} failed, {p['refused']} refused")
    if p["guided_requests"] != math.floor(n * 0.5):
        failures.append(f"{p['guided_requests']} of {n} requests guided, {math.floor(n * 0.5)} expected")
    if p["verified"] != 4 or p["verify_mismatches"] != 0:
        failures.append(f"solo replays: {p['verified']} verified, {p['verify_mismatches']} mismatches")
    if not p["audio_s_per_s"] > 0 or p["streams_max"] < 2:
        failures.append(f"no audio made, or never two streams at once: {p}")

    # --settle: the same plan (same seed, same total seconds) with its first second only loading the
    # system counts fewer requests; --steps writes the scheduler's passes, and the mean step is the
    # measured passes'.
    counts = []
    steps = os.path.join(work, "steps.csv")
    for extra in (["--duration", "2"], ["--settle", "1", "--duration", "1", "--steps", steps]):
        r = bench(a.chorus, qwen, "--rate", "8", "--lengths", "0.5-1", "--seed", "3", "--json", out, *extra)
        if r.returncode != 0:
            failures.append(f"bench {extra}: exit {r.returncode}: {r.stderr.strip()}")
            break
        p = json.load(open(out))["points"][0]
        counts.append((p["requests"], p["settle_s"]))
    if len(counts) == 2 and not (0 < counts[1][0] < counts[0][0] and counts[1][1] == 1 and counts[0][1] == 0):
        failures.append(f"--settle 1: (requests, settle_s) {counts[1]} against {counts[0]} without")
    if len(counts) == 2:
        lines = open(steps).read().splitlines()
        cols = lines[0].split(",")
        rows = [dict(zip(cols, x.split(","))) for x in lines[1:]]
        if not rows or any(int(x["frames"]) > int(x["streams"]) for x in rows) or \
                sum(int(x["frames"]) for x in rows) == 0:
            failures.append(f"--steps: {len(rows)} passes, the first {rows[:1]}")
        # With --settle the mean step and its parts are those of the measured second's passes
        # (start in [1, 2] s), not the whole run's: recomputed here from the passes written out.
        window = [x for x in rows if 1.0 <= float(x["start_s"]) <= 2.0]
        if not window or not p.get("step_means_measured"):
            failures.append(f"--settle: {len(window)} passes in the measured second, means measured "
                            f"{p.get('step_means_measured')}")
        else:
            for key, col in (("step_ms", "ms"), ("generate_ms", "generate_ms"), ("decode_ms", "decode_ms"),
                             ("release_ms", "release_ms")):
                want = sum(float(x[col]) for x in window) / len(window)
                if abs(p[key] - want) > 0.002 + 1e-3 * want:
                    failures.append(f"--settle: {key} {p[key]} against {want:.4f}, the measured passes' mean")
            whole = sum(float(x["ms"]) for x in rows) / len(rows)
            sl.log(f"mean step: measured second {p['step_ms']:.3f} ms, whole run {whole:.3f} ms "
                   f"({len(window)} of {len(rows)} passes)")

    r = bench(a.chorus, qwen, "--rate", "4", "--duration", "1", "--lengths", "0.5-1", "--cfg-scale", "3")
    if r.returncode <= 0 or "guidance" not in r.stderr:
        failures.append(f"guidance on Qwen3-TTS: exit {r.returncode}, stderr {r.stderr.strip()!r}")
    r = bench(a.chorus, breeze, "--cfg-scale", "3", "--cfg-share", "1.5")
    if r.returncode <= 0 or "--cfg-share" not in r.stderr:
        failures.append(f"--cfg-share 1.5: exit {r.returncode}, stderr {r.stderr.strip()!r}")

    sl.finish(failures, "bench --serve test")


if __name__ == "__main__":
    main()
