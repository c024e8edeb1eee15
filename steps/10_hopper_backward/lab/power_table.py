#!/usr/bin/env python3
"""power_table.py — the table of the power study (run_on_gpu.sh OUT BUILD power A B): for each
variant and number of timed runs, the median's TFLOP/s in each round and the fastest run's; then
what nvidia-smi saw while the GPU was busy: the SM clock and how often the driver's power cap held
it down. A kernel that draws the board's whole power budget runs its first repetitions at the full
clock and the later ones slower, so its median falls as the timed runs grow while its fastest run
stays.

    python3 steps/10_hopper_backward/lab/power_table.py OUT
"""
import csv
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict

BUSY_WATTS = 300.0  # samples above this are taken as "a kernel is running" (idle: 70-140 W)
SW_POWER_CAP = 0x4  # nvidia-smi clocks_event_reasons: the driver lowers the clock to hold the power limit


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: power_table.py OUT", file=sys.stderr)
        return 2
    out = sys.argv[1]
    files = sorted(glob.glob(os.path.join(out, "power_*_r*_*.json")))
    if not files:
        print(f"power_table.py: error: no power_*_r*_*.json in {out}", file=sys.stderr)
        return 2
    median, fastest = defaultdict(list), defaultdict(list)  # (variant, reps) -> one figure per round
    for path in files:
        reps = int(re.search(r"_r(\d+)_\d+\.json$", path).group(1))
        with open(path) as f:
            for row in json.load(f)["results"]:
                if row["stage"] == "10" and row["status"] == "ok":
                    median[(row["variant"], reps)].append(row["tflops"])
                    fastest[(row["variant"], reps)].append(row["flops"] / (row["min_ms"] * 1e-3) / 1e12)
    print("| variant | timed runs | median TFLOP/s, each round | fastest run's TFLOP/s |")
    print("|---|---|---|---|")
    for variant, reps in sorted(median):
        cells = [" / ".join(f"{x:.1f}" for x in v[(variant, reps)]) for v in (median, fastest)]
        print(f"| {variant} | {reps} | {cells[0]} | {cells[1]} |")
    smi = os.path.join(out, "power_smi.csv")
    if not os.path.exists(smi):
        print(f"power_table.py: error: no {smi}", file=sys.stderr)
        return 2
    busy = []  # (SM clock in MHz, watts, reasons) while a kernel runs
    with open(smi) as f:
        for fields in csv.reader(f, skipinitialspace=True):
            if len(fields) == 4 and fields[2].endswith("W") and float(fields[2].split()[0]) > BUSY_WATTS:
                busy.append((int(fields[1].split()[0]), float(fields[2].split()[0]), int(fields[3], 16)))
    if not busy:
        print("power_table.py: error: no busy samples in power_smi.csv", file=sys.stderr)
        return 2
    clocks = sorted(c for c, _, _ in busy)
    capped = sum(1 for _, _, r in busy if r & SW_POWER_CAP)
    print(f"\nnvidia-smi, {len(busy)} samples above {BUSY_WATTS:.0f} W: SM clock {clocks[0]}-{clocks[-1]} MHz "
          f"(median {statistics.median(clocks):.0f}), power up to {max(w for _, w, _ in busy):.0f} W, "
          f"the power cap holding the clock in {capped} ({100 * capped / len(busy):.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
