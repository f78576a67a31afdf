#!/usr/bin/env python3
"""Per-kernel totals of an Nsight Compute CSV log (ncu --csv --metrics gpu__time_duration.sum).

    python3 scripts/device/ncu_summary.py ncu.csv [--skip N]

Groups the launches by kernel name (template arguments kept, so each instantiation is its own row)
and prints count, total and mean time, largest total first. --skip N drops the first N launches
(prefill, warm-up) so the rest is steady-state decoding.
"""
import argparse
import collections
import csv
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv_path")
    ap.add_argument("--skip", type=int, default=0, help="launches to drop from the start")
    args = ap.parse_args()
    with open(args.csv_path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu prints notes before the table
    rows = list(csv.DictReader(lines))
    launches = [r for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]
    if not launches:
        print("no gpu__time_duration.sum rows", file=sys.stderr)
        return 1
    launches = launches[args.skip:]
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}
    total = collections.defaultdict(float)
    count = collections.Counter()
    for r in launches:
        us = float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1.0)
        total[r["Kernel Name"]] += us
        count[r["Kernel Name"]] += 1
    overall = sum(total.values())
    print(f"{len(launches)} launches, {overall:.1f} us in kernels")
    print(f"{'launches':>8} {'total us':>10} {'mean us':>8} {'share':>6}  kernel")
    for name, t in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"{count[name]:>8} {t:>10.1f} {t / count[name]:>8.2f} {100 * t / overall:>5.1f}%  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
