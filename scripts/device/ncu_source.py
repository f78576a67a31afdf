#!/usr/bin/env python3
"""Where one kernel's warps spend their time, from an Nsight Compute source page in CSV.

    ncu --clock-control none --set full -k regex:NAME --launch-skip N --launch-count 1 -o rep CMD...
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 scripts/device/ncu_source.py src.csv [--top 0.02]

Prints the instructions executed (in warp instructions, and per warp when --warps is given), the
opcode mix weighted by executions, the stall reasons summed over the kernel, and the instructions
holding at least --top of the stall samples (e.g. the general decode attention over 16 positions:
~1,320 instructions per warp, most of them integer address arithmetic).
"""
import argparse
import collections
import csv
import sys


def number(text):
    return float((text or "0").replace(",", ""))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv_path")
    ap.add_argument("--top", type=float, default=0.02, help="share of the stall samples to list an instruction")
    ap.add_argument("--warps", type=int, default=0, help="warps the launch ran (grid × block / 32), for per-warp counts")
    args = ap.parse_args()
    with open(args.csv_path, newline="") as f:
        lines = f.read().splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if header is None:
        print("no source table (expected a header starting with \"Address\")", file=sys.stderr)
        return 1
    rows = list(csv.DictReader(lines[header:]))
    executed = [number(r.get("Instructions Executed")) for r in rows]
    total = sum(executed)
    print(f"{len(rows)} instructions in the kernel, {sum(1 for e in executed if e)} executed; "
          f"{total:.0f} warp instructions" + (f", {total / args.warps:.0f} per warp" if args.warps else ""))

    mix = collections.Counter()
    for r, e in zip(rows, executed):
        words = r["Source"].split()
        if words and words[0].startswith("@"):
            words = words[1:]
        if words:
            mix[words[0].split(".")[0]] += e
    print("opcodes by executions:", ", ".join(f"{op} {n:.0f}" for op, n in mix.most_common(16)))

    stalls = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    sums = {k: sum(number(r[k]) for r in rows) for k in stalls}
    print("stall samples:", ", ".join(f"{k[6:]} {v:.0f}" for k, v in sorted(sums.items(), key=lambda kv: -kv[1]) if v))

    samples = [number(r.get("Warp Stall Sampling (All Samples)")) for r in rows]
    all_samples = sum(samples) or 1.0
    for r, s in zip(rows, samples):
        if s >= args.top * all_samples:
            top = max(stalls, key=lambda k: number(r[k]))
            print(f"{s / all_samples * 100:5.1f}%  {r['Source'][:72]:72s} {top[6:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
