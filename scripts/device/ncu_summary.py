#!/usr/bin/env python3
"""Per-kernel totals of an Nsight Compute CSV log (ncu --csv --metrics gpu__time_duration.sum).

    python3 scripts/device/ncu_summary.py ncu.csv [--skip N] [--list N]

Groups the launches by kernel name (template arguments kept, so each instantiation is its own row)
and prints count, total and mean time, largest total first. --skip N drops the first N launches
(prefill, warm-up) so the rest is steady-state decoding; --list N prints the next N launches in
order (duration, grid, block, name) instead of the totals.
"""
import argparse
import collections
import csv
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv_path")
    ap.add_argument("--skip", type=int, default=0, help="launches to drop from the start")
    ap.add_argument("--list", type=int, default=0, metavar="N", help="print the next N launches in order instead")
    args = ap.parse_args()
    with open(args.csv_path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu prints notes before the table
    rows = list(csv.DictReader(lines))
    launches = [r for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]
    if not launches:
        print("no gpu__time_duration.sum rows", file=sys.stderr)
        return 1
    launches = launches[args.skip:]
    # ncu writes "ns" (older versions "nsecond"); an unknown unit is an error, not a guess.
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    units = {r["Metric Unit"] for r in launches} - scale.keys()
    if units:
        print(f"unknown time unit(s) {sorted(units)}", file=sys.stderr)
        return 1

    def micros(r):
        return float(r["Metric Value"].replace(",", "")) * scale[r["Metric Unit"]]

    if args.list:
        # The launches in order (after --skip): one decode step's kernels, one per line.
        for r in launches[:args.list]:
            print(f"{micros(r):8.2f} us  grid {r.get('Grid Size', '?'):>14} block {r.get('Block Size', '?'):>12}  "
                  f"{r['Kernel Name'][:90]}")
        return 0
    total = collections.defaultdict(float)
    count = collections.Counter()
    for r in launches:
        total[r["Kernel Name"]] += micros(r)
        count[r["Kernel Name"]] += 1
    overall = sum(total.values())
    print(f"{len(launches)} launches, {overall:.1f} us in kernels")
    print(f"{'launches':>8} {'total us':>10} {'mean us':>8} {'share':>6}  kernel")
    for name, t in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"{count[name]:>8} {t:>10.1f} {t / count[name]:>8.2f} {100 * t / overall:>5.1f}%  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
