#!/usr/bin/env python3
"""The course tour: run every stage this machine can run, in order, then make the plots.

Each stage runs with its default (short) sweep and prints its verification against the previous
stage, its table and its memory and time charts; its results go to RESULTS/stepNN.json. A GPU
stage says in one line why it is skipped: it prints the reason itself where there is no GPU
(exit 77); the tour says why it was not built (no CUDA compiler, FA_ENABLE_CUDA=OFF).

Usage: tour.py --source DIR --build DIR [--results DIR] [--plots DIR] [--plot-python PY]
Exit code: 0 when every stage that ran passed, 1 otherwise.
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import guard  # noqa: E402  (one-line errors, exit 2)


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


def cmake_cache(build):
    """The build's CMakeCache.txt as {NAME: value} (empty when there is none)."""
    entries = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r"([A-Za-z_][A-Za-z0-9_]*):[A-Z]+=(.*)$", line.rstrip("\n"))
                if m:
                    entries[m.group(1)] = m.group(2)
    except OSError:
        pass
    return entries


def not_built_reason(build, name):
    """Why a stage's executable is missing, in the words the learner can act on."""
    cache = cmake_cache(build)
    if cache.get("FA_ENABLE_CUDA", "ON").upper() in ("OFF", "FALSE", "0", "NO"):
        return "not built: configured with FA_ENABLE_CUDA=OFF (GPU stages left out)"
    compiler = cache.get("CMAKE_CUDA_COMPILER", "")
    if not compiler or compiler.endswith("NOTFOUND"):
        return "not built: no CUDA compiler (nvcc) was found when %s was configured" % build
    return "not built yet: cmake --build %s --target %s" % (build, name)


def gpu_device_nodes():
    """Whether the kernel shows an NVIDIA GPU (Linux's device node, or WSL's)."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/dxg")


def run_with_ticks(command, what, every=20):
    """Runs command; while it runs, a line every `every` seconds says it is still working."""
    process = subprocess.Popen(command)
    t0 = time.monotonic()
    while True:
        try:
            return process.wait(timeout=every)
        except subprocess.TimeoutExpired:
            print("  ... still %s (%.0f s)" % (what, time.monotonic() - t0), flush=True)


def main():
    ap = guard.OneLineParser(description=__doc__.splitlines()[0])
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
            reason = not_built_reason(args.build, name)
            print("skipped: %s" % reason, flush=True)
            summary.append((name, "skipped (%s)" % reason.split(":")[0], 0.0))
            continue
        json_path = os.path.join(results, "step%s.json" % number)
        t0 = time.monotonic()
        rc = subprocess.call([exe, "--json", json_path])
        took = time.monotonic() - t0
        # Exit 77: the stage has printed its one "skipped: <why>" line itself.
        skipped = "skipped (no GPU)" if not gpu_device_nodes() else "skipped (why: above)"
        status = {0: "passed", 77: skipped}.get(rc, "FAILED (exit %d)" % rc)
        summary.append((name, status, took))

    plot_status = "not made (no matplotlib)"
    if args.plot_python:
        jsons = sorted(os.path.join(results, f) for f in os.listdir(results) if f.endswith(".json"))
        tool = os.path.join(args.source, "docs", "plots", "plot_results.py")
        if jsons and os.path.exists(tool):
            print("\n[plots] %s -> %s (a minute or two)" % (", ".join(os.path.basename(j) for j in jsons), plots),
                  flush=True)
            rc = run_with_ticks([args.plot_python, tool, *jsons, "--out", plots], "drawing the plots")
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
    sys.exit(guard.run_main("tour.py", main))
