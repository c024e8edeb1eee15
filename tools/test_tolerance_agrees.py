#!/usr/bin/env python3
"""test_tolerance_agrees.py — the C++ and the Python tolerance rules give the same answers.

    test_tolerance_agrees.py TOLERANCE_RULE_EXE

The rule lives once per language: common/src/verify.cpp and compare.cpp (what every stage's check
uses) and tools/flashcourse/tolerance.py (what the PyTorch comparisons use). This test writes one
table of cases, has the C++ side evaluate it (tolerance_rule, built from tools/tolerance_rule.cpp),
evaluates it with the package, and fails on any difference, to the last bit:
  * the bounds atol and rtol of the 16-bit rule (float16, bfloat16) and of the float32 rule, for
    plain errors and output magnitudes from 0 to large;
  * the 10x widening for large logits (tolerance_for);
  * the verdict on element lists: exact matches, -inf against -inf (an LSE row that sees no key),
    NaN and Inf where a finite value is right, values just inside and just outside the bound, a
    zero reference, an empty list; with the report's count, bad, first_bad, max_abs, max_rel and
    rel_frobenius;
  * the rule end to end (bounds from a plain error, then the verdict with them).
Exit 0 when every case agrees, 1 when one does not (each difference printed), 2 bad usage.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import tolerance  # noqa: E402

INF, NAN = math.inf, math.nan


def f32(x):
    """x as the float32 a stage's output holds (fa::compare takes got as float)."""
    return struct.unpack("<f", struct.pack("<f", x))[0] if math.isfinite(x) else x


def encoded(x):
    """JSON has no NaN or infinity: the C++ side reads them as strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def decoded(x):
    return {"nan": NAN, "inf": INF, "-inf": -INF}.get(x, x) if isinstance(x, str) else x


def cases():
    out = []
    for dtype in ("float32", "float16", "bfloat16"):
        for e, m in ((0.0, 0.0), (1e-3, 2.0), (3.7e-7, 0.8125), (0.051, 13.25), (2.5e-4, 1e4)):
            out.append({"kind": "bounds", "dtype": dtype, "plain_error": e, "max_abs_ref": m})
    for large in (False, True):
        out.append({"kind": "widened", "atol": 2e-5, "rtol": 2e-5, "large_logits": large})
        out.append({"kind": "widened", "atol": 1e-3, "rtol": 0.0, "large_logits": large})
    ref = [1.0, -2.0, 0.5, 0.0, 3.0e-3, -7.25]
    lists = [
        (ref, ref, 0.0, 0.0),                                           # exact
        ([x + 0.009 for x in ref], ref, 0.01, 0.0),                     # inside
        ([x + 0.011 for x in ref], ref, 0.01, 0.0),                     # outside
        ([1.0, -2.0 + 0.02, 0.5], [1.0, -2.0, 0.5], 0.01, 0.005),        # inside by the relative term
        ([-INF, 2.0 + 1e-7, -INF], [-INF, 2.0, -INF], 1e-6, 0.0),       # rows that see no key
        ([0.0, 2.0, -INF], [-INF, 2.0, -INF], 1e9, 1e9),                # finite where -inf is right
        ([-INF, INF, -INF], [-INF, 2.0, -INF], 1e9, 1e9),               # Inf where a finite value is right
        ([1.0, NAN, 0.5], [1.0, -2.0, 0.5], 1e9, 1e9),                  # NaN fails whatever the bound
        ([0.0, 0.0], [0.0, 0.0], 0.0, 0.0),                             # a zero reference
        ([1e-3, -1e-3], [0.0, 0.0], 1e-4, 0.1),
        ([], [], 1.0, 1.0),                                             # nothing compared: not a pass
    ]
    for got, r, atol, rtol in lists:
        out.append({"kind": "compare", "got": [f32(x) for x in got], "ref": r, "atol": atol, "rtol": rtol})
    for dtype, e, got_shift in (("bfloat16", 0.01, 0.039), ("bfloat16", 0.01, 0.08), ("float16", 1e-3, 3e-3),
                                ("float32", 2e-7, 1e-6), ("float32", 2e-7, 1e-3)):
        out.append({"kind": "rule", "dtype": dtype, "plain_error": e, "max_abs_ref": 7.25,
                    "got": [f32(x + got_shift) for x in ref], "ref": ref})
    return out


def python_side(c):
    kind = c["kind"]
    if kind == "bounds":
        atol, rtol = tolerance.tolerance_from_plain(c["plain_error"], c["max_abs_ref"], c["dtype"])
        return {"atol": atol, "rtol": rtol}
    if kind == "widened":
        atol, rtol = tolerance.tolerance_for((c["atol"], c["rtol"]), c["large_logits"])
        return {"atol": atol, "rtol": rtol}
    if kind == "rule":
        atol, rtol = tolerance.tolerance_from_plain(c["plain_error"], c["max_abs_ref"], c["dtype"])
    else:
        atol, rtol = c["atol"], c["rtol"]
    r = tolerance.compare(c["got"], c["ref"], atol, rtol)
    r.update(atol=atol, rtol=rtol)
    return r


REPORT = {"count", "bad", "first_bad", "max_abs", "max_rel", "rel_frobenius", "ok", "atol", "rtol"}


def same(a, b):
    """Equal to the last bit (NaN equals NaN; a verdict is not a number)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b


def main(argv):
    ap = argparse.ArgumentParser(prog="test_tolerance_agrees.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("exe", help="tolerance_rule, built from tools/tolerance_rule.cpp")
    exe = ap.parse_args(argv[1:]).exe
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        print("test_tolerance_agrees.py: error: %s is not an executable (build tolerance_rule)" % exe, file=sys.stderr)
        return 2
    table = cases()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "cases.json")
        with open(path, "w") as f:
            json.dump({"cases": [{k: ([encoded(x) for x in v] if isinstance(v, list) else encoded(v))
                                  for k, v in c.items()} for c in table]}, f)
        proc = subprocess.run([exe, path], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        print("tolerance_rule exited %d: %s" % (proc.returncode, proc.stderr.strip()))
        return 1
    cpp = json.loads(proc.stdout)["results"]
    if len(cpp) != len(table):
        print("tolerance_rule answered %d cases of %d" % (len(cpp), len(table)))
        return 1
    differences = 0
    for n, (c, theirs) in enumerate(zip(table, cpp)):
        ours = python_side(c)
        keys = {"atol", "rtol"} if c["kind"] in ("bounds", "widened") else REPORT
        if set(theirs) != keys:
            differences += 1
            print("case %d (%s): the C++ side answered %s, expected %s" % (n, c["kind"], sorted(theirs), sorted(keys)))
            continue
        for key, value in theirs.items():
            if not same(ours.get(key), decoded(value)):
                differences += 1
                print("case %d (%s): %s is %r in C++, %r in Python" % (n, c["kind"], key, decoded(value), ours.get(key)))
    verdicts = sum(1 for c in table if c["kind"] in ("compare", "rule"))
    failing = sum(1 for r in cpp if r.get("ok") is False)
    print("%d cases (%d verdicts, %d of them failing by both rules' account): %s" % (
        len(table), verdicts, failing, "the C++ and Python rules agree" if not differences
        else "%d DIFFERENCES" % differences))
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
