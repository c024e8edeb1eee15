#!/usr/bin/env python3
"""speed_table.py — the before-and-after table of gpu_check.sh's speed part.

    speed_table.py DIR [--bar 0.98]
    speed_table.py --self-test

DIR holds results files named old1_CASE.json, old2_CASE.json, new1_CASE.json, new2_CASE.json: each
case run twice from a baseline build and twice from the new one, interleaved, on one GPU. For every
case and every variant of the file's own stage (its comparison rows left out) that ran ok in all
four, one line: both builds' medians, the spread between two runs of one build, and the speed of the
new build against the old one, old ms / new ms over the two runs of each (above 1: faster). Exit 0
when every case has such a variant and none is slower than --bar (0.98: within 2 %); 1 otherwise,
naming what was slower or missing; 2 bad usage.
"""
import glob
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import guard  # noqa: E402
from flashcourse.results import ResultsError, read_results, write_results  # noqa: E402

RUNS = ("old1", "old2", "new1", "new2")


def own_rows(path):
    """{variant: median_ms} of the file's own stage, status ok, not a comparison ({} if no file)."""
    try:
        doc = read_results(path)
    except ResultsError:
        return {}
    return {r["variant"]: r["median_ms"] for r in doc["results"]
            if isinstance(r, dict) and r.get("stage") == doc.get("stage") and r.get("status") == "ok"
            and not r.get("comparison") and r.get("median_ms")}


def table(folder, bar):
    """The lines of the table and the problems (slower or missing), case by case."""
    names = sorted({m.group(2) for f in glob.glob(os.path.join(folder, "*.json"))
                    for m in [re.match(r"(old1|old2|new1|new2)_(.+)\.json$", os.path.basename(f))] if m})
    lines = ["%-20s %-28s %18s %18s %9s" % ("case", "variant", "old ms (2 runs)", "new ms (2 runs)", "old/new")]
    problems = []
    if not names:
        problems.append("no results files in %s" % folder)
    for name in names:
        runs = [own_rows(os.path.join(folder, "%s_%s.json" % (tag, name))) for tag in RUNS]
        common = sorted(set(runs[0]).intersection(*runs[1:]))
        if not common:
            problems.append("%s: no variant ran ok in all four runs" % name)
            continue
        for variant in common:
            o1, o2, n1, n2 = (r[variant] for r in runs)
            speed = (o1 + o2) / (n1 + n2)
            slower = speed < bar
            lines.append("%-20s %-28s %8.4f %9.4f %8.4f %9.4f %8.3f%s" % (
                name, variant, o1, o2, n1, n2, speed, "  SLOWER" if slower else ""))
            if slower:
                problems.append("%s %s: %.3f of the old speed" % (name, variant, speed))
    return lines, problems


def self_test():
    def doc(stage, rows):
        return {"schema": "flash-course-results/2", "stage": stage, "command": "", "date": "", "git_commit": "",
                "device": {}, "results": [dict(stage=stage, variant=v, status="ok", median_ms=ms) for v, ms in rows]}
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        times = {"old1": 1.00, "old2": 1.02, "new1": 1.01, "new2": 0.99}
        for tag, ms in times.items():
            stage = "10" if tag.startswith("old") else "11"  # renumbered: the file's own stage counts
            write_results(os.path.join(folder, "%s_dec.json" % tag), doc(stage, [("split", ms), ("one", 2 * ms)]))
        lines, problems = table(folder, 0.98)
        ok = not problems and len(lines) == 3
        failures += not ok
        print("%s: the same speed under a new stage number passes (%s)" % ("ok" if ok else "WRONG", problems))
        write_results(os.path.join(folder, "new2_dec.json"), doc("11", [("split", 1.1), ("one", 2.0)]))
        _, problems = table(folder, 0.98)
        ok = len(problems) == 1 and "dec split" in problems[0]
        failures += not ok
        print("%s: 5 %% slower fails, naming the variant (%s)" % ("ok" if ok else "WRONG", problems))
        os.remove(os.path.join(folder, "old1_dec.json"))
        _, problems = table(folder, 0.98)
        ok = len(problems) == 1 and "no variant" in problems[0]
        failures += not ok
        print("%s: a missing run fails (%s)" % ("ok" if ok else "WRONG", problems))
    print("self-test: %s" % ("all as expected" if not failures else "%d WRONG" % failures))
    return 1 if failures else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--self-test"]:
        return self_test()
    ap = guard.OneLineParser(prog="speed_table.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--bar", type=float, default=0.98, help="the slowest speed allowed, new against old")
    args = ap.parse_args(argv)
    lines, problems = table(args.folder, args.bar)
    print("\n".join(lines))
    for p in problems:
        print("speed: " + p)
    print("speed: %s" % ("every case within %.0f %%" % (100 * (1 - args.bar)) if not problems
                         else "%d problem(s)" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(guard.run_main("speed_table.py", main))
