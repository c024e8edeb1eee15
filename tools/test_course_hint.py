#!/usr/bin/env python3
"""./course hint, as a learner calls it: one hint per call, how many remain, --reset.

    test_course_hint.py --source DIR

Runs on a scratch copy of the `course` script and exercises/ (the command keeps its state in the
copy's build/.hints/, never in the real build/): for every exercise, the first call shows hint 1
of n with its text and no code fence; the calls after it show 2 .. n, each saying how many remain;
one more shows the last again; --reset starts over at 1; a name that is no exercise exits 2.
Exit 0 when all of it holds, 1 otherwise. Standard library only.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(root, *args):
    p = subprocess.run([os.path.join(root, "course"), "hint"] + list(args), cwd=root,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser(prog="test_course_hint.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="the course's source folder")
    args = ap.parse_args()
    failures = []

    def expect(cond, what, out):
        if not cond:
            failures.append("%s\n%s" % (what, "\n".join("    " + l for l in out.splitlines()[-8:])))

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy2(os.path.join(args.source, "course"), os.path.join(tmp, "course"))
        shutil.copytree(os.path.join(args.source, "exercises"), os.path.join(tmp, "exercises"))
        ids = sorted("ex" + d[:2] for d in os.listdir(os.path.join(tmp, "exercises")) if re.match(r"^\d\d_", d))
        for ex in ids:
            rc, out = run(tmp, ex)
            m = re.search(r"%s, hint 1 of (\d+):" % ex, out)
            expect(rc == 0 and m, "%s: the first call shows hint 1 of n" % ex, out)
            if not m:
                continue
            total = int(m.group(1))
            text = out.split(m.group(0), 1)[1].split("\nnext:", 1)[0]
            expect(text.strip() and "```" not in text, "%s: hint 1 has text and no code fence" % ex, out)
            for k in range(2, total + 1):
                rc, out = run(tmp, ex)
                expect(rc == 0 and ("%s, hint %d of %d:" % (ex, k, total)) in out, "%s: call %d shows hint %d" % (ex, k, k), out)
                if k < total:
                    left = total - k
                    expect(("%d more hint%s" % (left, "" if left == 1 else "s")) in out,
                           "%s: hint %d says %d remain" % (ex, k, left), out)
            expect("that was the last hint" in out, "%s: the last hint says so" % ex, out)
            rc, out = run(tmp, ex)
            expect(rc == 0 and "the last one again" in out and ("hint %d of %d" % (total, total)) in out,
                   "%s: a call past the last shows the last again" % ex, out)
            rc, out = run(tmp, ex, "--reset")
            expect(rc == 0 and "reset" in out, "%s: --reset" % ex, out)
            rc, out = run(tmp, ex)
            expect(rc == 0 and ("%s, hint 1 of" % ex) in out, "%s: after --reset, hint 1 again" % ex, out)
        rc, out = run(tmp, "ex99")
        expect(rc == 2, "ex99: not an exercise, exit 2", out)
        rc, out = run(tmp)
        expect(rc == 2, "no exercise named: exit 2", out)
        expect(not os.path.exists(os.path.join(args.source, "build", ".hints", "ex99")), "state only in the copy", "")

    for f in failures:
        print("FAIL  " + f)
    if failures:
        print("%d problem(s)" % len(failures))
        return 1
    print("ok    ./course hint: %d exercises, one hint per call, the count of those left, --reset" % len(ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
