#!/usr/bin/env python3
"""Where a decode step's time goes, from a kernel trace (no instrumentation of the kernels).

Input: a CSV with the columns "Start (ns)", "Duration (ns)", "GrdX" and "Name": what
scripts/device/kernel_trace.cpp (a CUPTI injection library) writes, or `nsys stats --report
cuda_gpu_trace --format csv` over a run whose graphs were traced per node. Kernels are ordered by start; each one's
*critical-path share* is its end minus the previous kernel's end (with programmatic dependent launch
a kernel starts before its predecessor ends, so durations overlap and do not add up; the ends do).
Kernels are grouped by name and grid, so the same kernel in two stacks of different shapes (the
backbone's and the depth decoder's q/k/v) stays apart. Prints, per group: launches, median share,
median duration, median start lead over the previous end (how early PDL made it resident), and the
total share; the median interval between the ends of one kernel (--period, default the sampler: a
depth step); then the ordered kernels of one window, for reading a layer launch by launch.
A kernel that ends before the latest end so far (another stream's, e.g. the codec's beside the
frame's) adds nothing to the path. For a serving run, --from-s/--to-s keep the kernels that start
in that span (seconds after the first kernel: the steady state, not the load or the ramp), and
--by-name pools the grids of a kernel (their row counts change with the streams); the GPU's idle
time in the span is printed too.

  timeline.py trace.csv [--skip N] [--from-s A --to-s B] [--by-name] [--window-at NAME] [--window K]
              [--top N] [--period NAME]
"""
import argparse
import csv
import re
import statistics
import sys


def short_name(name):
    # "void chorus::cuda::(anonymous namespace)::gemv1_kernel<1, 0, 1, true, false, true>(...)" →
    # "gemv1_kernel<1, 0, 1, true, false, true>"
    name = name.replace("(anonymous namespace)::", "").removeprefix("void ")
    head, _, args = name.partition("<")
    head = head.split("(")[0].split("::")[-1]
    return head + ("<" + args.split(">(")[0] + ">" if args else "")


def column(header, *keys):
    for key in keys:
        for i, h in enumerate(header):
            if h.strip().lower().startswith(key.lower()):
                return i
    raise SystemExit(f"no column {keys} in {header}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=0, help="kernels to skip first (warm-up, prefill)")
    ap.add_argument("--from-s", type=float, default=None, help="keep kernels starting this many s after the first")
    ap.add_argument("--to-s", type=float, default=None, help="... and before this many s after it")
    ap.add_argument("--by-name", action="store_true", help="group kernels by name alone, their grids pooled")
    ap.add_argument("--window-at", default="attention_small_kernel",
                    help="the window starts at this kernel's occurrence in the middle of the run")
    ap.add_argument("--window", type=int, default=40, help="kernels printed in the window")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--period", default="sample_kernel",
                    help="also print the median interval between this kernel's ends (a depth step)")
    args = ap.parse_args()

    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    start_at = next(i for i, r in enumerate(rows) if any("Start" in c for c in r))
    header, body = rows[start_at], rows[start_at + 1:]
    c_start, c_dur = column(header, "Start"), column(header, "Duration")
    c_grid, c_name = column(header, "GrdX"), column(header, "Name")
    kernels = []
    for r in body:
        if len(r) <= c_name or not r[c_grid].strip():
            continue  # memory copies and sets have no grid
        try:
            s, d = float(r[c_start]), float(r[c_dur])
        except ValueError:
            continue
        key = short_name(r[c_name]) if args.by_name else f"{short_name(r[c_name])} [{r[c_grid].strip()}]"
        kernels.append((s, s + d, d, key))
    kernels.sort()
    if kernels and (args.from_s is not None or args.to_s is not None):
        first = kernels[0][0]
        lo = first + 1e9 * (args.from_s or 0.0)
        hi = first + 1e9 * args.to_s if args.to_s is not None else float("inf")
        kernels = [k for k in kernels if lo <= k[0] < hi]
    kernels = kernels[args.skip:]
    if len(kernels) < 2:
        sys.exit("too few kernels in the trace")

    groups = {}
    prev_end = kernels[0][1]
    idle = 0.0
    for s, e, d, key in kernels[1:]:
        g = groups.setdefault(key, {"share": [], "dur": [], "lead": []})
        g["share"].append(max(0.0, e - prev_end))
        g["dur"].append(d)
        g["lead"].append(prev_end - s)
        idle += max(0.0, s - prev_end)
        prev_end = max(prev_end, e)
    span = prev_end - kernels[0][1]
    print(f"{len(kernels)} kernels over {span / 1e6:.3f} ms, the GPU idle {idle / 1e6:.3f} ms of it (all times µs)")
    print(f"{'launches':>8} {'share':>7} {'dur':>7} {'lead':>7} {'total ms':>9} {'%':>5}  kernel [grid]")
    ordered = sorted(groups.items(), key=lambda kv: -sum(kv[1]["share"]))
    for key, g in ordered[:args.top]:
        total = sum(g["share"])
        print(f"{len(g['share']):>8} {statistics.median(g['share']) / 1e3:>7.2f} {statistics.median(g['dur']) / 1e3:>7.2f} "
              f"{statistics.median(g['lead']) / 1e3:>7.2f} {total / 1e6:>9.3f} {100 * total / span:>5.1f}  {key}")

    ends = [k[1] for k in kernels if args.period in k[3]]
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    if gaps:
        # Steps are separated by other work too (a frame's backbone): the median is the usual step.
        print(f"\n{args.period}: {len(ends)} launches, median interval between their ends "
              f"{statistics.median(gaps) / 1e3:.2f} µs")

    hits = [i for i, k in enumerate(kernels) if args.window_at in k[3]]
    if hits:
        i0 = hits[len(hits) // 2]
        i0 = max(1, i0 - 3)
        t0 = kernels[i0 - 1][1]
        print(f"\nwindow: {args.window} kernels from #{i0} (times from the previous kernel's end, µs)")
        print(f"{'start':>8} {'end':>8} {'dur':>7} {'share':>7}  kernel [grid]")
        prev_end = kernels[i0 - 1][1]
        for s, e, d, key in kernels[i0:i0 + args.window]:
            share = max(0.0, e - prev_end)
            print(f"{(s - t0) / 1e3:>8.2f} {(e - t0) / 1e3:>8.2f} {d / 1e3:>7.2f} {share / 1e3:>7.2f}  {key}")
            prev_end = max(prev_end, e)


if __name__ == "__main__":
    main()
