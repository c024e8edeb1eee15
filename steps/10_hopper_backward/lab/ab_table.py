#!/usr/bin/env python3
"""ab_table.py — the table of an alternating comparison (run_on_gpu.sh OUT BUILD ab A B): for each
head dim, mask and length, each variant's TFLOP/s in its rounds and B / A as the ratio of the
rounds' means. Stage 08's rows, which every run prints beside its variant, are left out.

    python3 steps/10_hopper_backward/lab/ab_table.py OUT heavy_first deterministic
"""
import glob
import json
import os
import statistics
import sys
from collections import defaultdict


def main() -> int:
    if len(sys.argv) != 4:
        print("usage: ab_table.py OUT VARIANT_A VARIANT_B", file=sys.stderr)
        return 2
    out, a, b = sys.argv[1:]
    files = sorted(glob.glob(os.path.join(out, "ab_*.json")))
    if not files:
        print(f"ab_table.py: error: no ab_*.json in {out}", file=sys.stderr)
        return 2
    tflops = defaultdict(list)  # (dim, causal, seq_q, variant) -> one figure per round
    for path in files:
        with open(path) as f:
            for row in json.load(f)["results"]:
                if row["variant"] in (a, b) and row["status"] == "ok":
                    tflops[(row["dim"], row["causal"], row["seq_q"], row["variant"])].append(row["tflops"])
    print(f"| D | causal | N | {a} (TFLOP/s, each round) | {b} | {b} / {a} (means) |")
    print("|---|---|---|---|---|---|")
    shapes = sorted({key[:3] for key in tflops})
    missing = 0
    for dim, causal, n in shapes:
        fa, fb = tflops.get((dim, causal, n, a), []), tflops.get((dim, causal, n, b), [])
        ratio = f"{statistics.mean(fb) / statistics.mean(fa):.2f}" if fa and fb else "missing"
        missing += ratio == "missing"
        cells = [" / ".join(f"{x:.1f}" for x in v) or "—" for v in (fa, fb)]
        print(f"| {dim} | {'yes' if causal else 'no'} | {n} | {cells[0]} | {cells[1]} | {ratio} |")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
