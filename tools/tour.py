#!/usr/bin/env python3
"""The course tour: run every stage this machine can run, in order, then make the plots.

Each stage runs with its default (short) sweep and prints its verification against the previous
stage, its table and its memory and time charts; its results go to RESULTS/stepNN.json. GPU
stages report "skipped" where there is no GPU (exit 77) or no CUDA compiler (not built).

Usage: tour.py --source DIR --build DIR [--results DIR] [--plots DIR] [--plot-python PY]
Exit code: 0 when every stage that ran passed, 1 otherwise.
"""
import argparse
import os
import re
import subprocess
import sys
import time


def stages(source, build):
    """(number, name, executable path or None) for every steps/NN_name folder, in order."""
    found = []
    for entry in sorted(os.listdir(os.path.join(source, "steps"))):
        m = re.fullmatch(r"(\d\d)_(\w+)", entry)
        if not m or not os.path.isdir(os.path.join(source, "steps", entry)):
            continue
        exe = os.path.join(build, "steps", entry, "step%s_%s" % (m.group(1), m.group(2)))
        found.append((m.group(1), "step%s_%s" % (m.group(1), m.group(2)), exe if os.path.exists(exe) else None))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--results")
    ap.add_argument("--plots")
    ap.add_argument("--plot-python", default="", help="a Python with matplotlib; empty: no plots")
    ap.add_argument("--stages", default="", help="comma-separated stage numbers to run (default: all)")
    ap.add_argument("--require-plots", action="store_true",
                    help="fail unless the plot tool wrote at least one non-empty PNG (for the tour's test)")
    args = ap.parse_args()
    results = args.results or os.path.join(args.build, "results")
    plots = args.plots or os.path.join(args.build, "plots")
    os.makedirs(results, exist_ok=True)

    todo = stages(args.source, args.build)
    if args.stages:
        wanted = set(args.stages.split(","))
        todo = [s for s in todo if s[0] in wanted]
    start = time.monotonic()
    summary = []
    for k, (number, name, exe) in enumerate(todo, 1):
        elapsed = time.monotonic() - start
        print("\n" + "=" * 100, flush=True)
        print("[stage %d of %d] %s   (tour elapsed %.0f s)" % (k, len(todo), name, elapsed), flush=True)
        print("=" * 100, flush=True)
        if exe is None:
            print("skipped: not built here (GPU stages need a CUDA compiler)", flush=True)
            summary.append((name, "skipped (not built)", 0.0))
            continue
        json_path = os.path.join(results, "step%s.json" % number)
        t0 = time.monotonic()
        rc = subprocess.call([exe, "--json", json_path])
        took = time.monotonic() - t0
        status = {0: "passed", 77: "skipped (no CUDA device)"}.get(rc, "FAILED (exit %d)" % rc)
        if rc == 77:
            print("skipped: no CUDA device on this machine", flush=True)
        summary.append((name, status, took))

    plot_status = "not made (no matplotlib)"
    if args.plot_python:
        jsons = sorted(os.path.join(results, f) for f in os.listdir(results) if f.endswith(".json"))
        tool = os.path.join(args.source, "docs", "plots", "plot_results.py")
        if jsons and os.path.exists(tool):
            print("\n[plots] %s -> %s" % (", ".join(os.path.basename(j) for j in jsons), plots), flush=True)
            rc = subprocess.call([args.plot_python, tool, *jsons, "--out", plots])
            plot_status = "written to %s" % plots if rc == 0 else "FAILED (exit %d)" % rc
            if rc != 0:
                summary.append(("plots", plot_status, 0.0))

    print("\n" + "=" * 100)
    print("tour finished in %.0f s" % (time.monotonic() - start))
    for name, status, took in summary:
        print("  %-28s %-28s %6.1f s" % (name, status, took))
    print("  results: %s" % results)
    print("  plots:   %s" % plot_status)
    failed = [s for s in summary if s[1].startswith("FAILED")]
    if args.require_plots:
        pngs = [f for f in os.listdir(plots) if f.endswith(".png")] if os.path.isdir(plots) else []
        good = [f for f in pngs if os.path.getsize(os.path.join(plots, f)) > 1000]
        print("  plots check: %d PNG files, %d non-empty" % (len(pngs), len(good)))
        if not good:
            failed.append(("plots", "no PNG written", 0.0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
