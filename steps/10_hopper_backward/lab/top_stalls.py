#!/usr/bin/env python3
"""top_stalls.py — the SASS lines of one Nsight Compute report where the warps' stall samples fall.

    top_stalls.py REPORT.sass.csv      (ncu -i REPORT --page source --csv --print-source sass)

Prints the total of "Warp Stall Sampling (All Samples)" and the 45 lines with the most samples, each
with its share and the stall reasons that hold at least 5 % of its samples (stall_long_sb: waiting
for global memory; stall_barrier: a block or warpgroup barrier; stall_lg: the queue to the L1/global
unit is full; stall_mio: the queue to shared memory or the special-function unit)."""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


rows = list(csv.reader(open(sys.argv[1])))
header_at = next(i for i, r in enumerate(rows) if "Source" in r)
header, data = rows[header_at], rows[header_at + 1:]
samples = next(i for i, c in enumerate(header) if "Warp Stall Sampling (All" in c)
source = header.index("Source")
data = [r for r in data if len(r) > samples]
total = sum(number(r[samples]) for r in data)
print("columns:", header)
print("total samples", total)
for r in sorted(data, key=lambda r: -number(r[samples]))[:45]:
    reasons = " ".join(f"{header[i]}={r[i]}" for i in range(len(header))
                       if "stall" in header[i].lower() and number(r[i]) > 0.05 * number(r[samples]))
    print(f"{number(r[samples]):8.0f} {100 * number(r[samples]) / max(total, 1):5.1f}%  {r[source]}   | {reasons[:400]}")
