#!/usr/bin/env python3
"""Runs a stage executable and checks what it promises on the command line.

    run_and_check.py --expect CODE [--json FILE] [--stage ID] [--mode MODE] -- command [args...]
    run_and_check.py --self-test

Every mode checks the exit code (CODE), and when CODE is 2 (bad usage or input) that stderr is
exactly one line. A command that exits 77 (skipped: no CUDA device) makes this script exit 77
too, so that CTest reports the test skipped, not passed.

Modes:
  run            run the command as given. With --json FILE: the results file it writes must
                 parse and hold the fields of the course design; with --stage ID, every row of
                 stage ID must have status ok and a verification that ran and passed, except the
                 rows marked "comparison": true (measured beside the stage, never verified, such as
                 stage 11's read_cache). A comparison row must not say it was verified, and a row of
                 another stage must be a comparison (files from before the field: not checked).
  npy-roundtrip  write q.npy (float32), k.npy (float16) and v.npy (float32) into a temporary
                 folder, run the command with --load DIR --save DIR2 --json FILE, and check o.npy
                 and lse.npy against a float64 attention computed here (--causal and --scale in
                 the command are honoured). Shape: --npy-shape B,H,NQ,NK,D or B,H,HKV,NQ,NK,D (default 1,2,6,4,8:
                 with --causal, the first two query rows see no key).
  bad-npy        write a k.npy whose data is cut short, run the command with --load DIR, and
                 expect exit 2 with one line on stderr that names k.npy.
  nan-npy        write q.npy with a NaN at [0,1,2,3] (and k, v finite), run the command with
                 --load DIR, and expect exit 2 with one line naming q[0,1,2,3].

--require TEXT / --forbid TEXT (repeatable): the command's stdout and stderr together must (not)
contain TEXT, e.g. --forbid "PASS:" for a run in which nothing may pass.

Standard library only (tools/flashcourse is too): it runs under whatever python3 CI has, without NumPy.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import guard, npy, results, tolerance  # noqa: E402

TIMEOUT_S = 600
LAST = []  # the last command run, for its output when a check fails

class CheckFailed(Exception):
    pass


# ---- .npy files with the struct module -------------------------------------------------------

def write_npy(path, shape, values, dtype="<f4"):
    npy.write_npy_values(path, shape, values, dtype)


def read_npy(path):
    """(shape, values) of a float32 .npy file in C order (CheckFailed otherwise)."""
    try:
        descr, shape, values = npy.read_npy_values(path)
    except (OSError, ValueError) as e:
        raise CheckFailed(str(e)) from None
    if descr != "<f4":
        raise CheckFailed("%s: expected little-endian float32 in C order, got %r" % (path, descr))
    return shape, values


round_trip = npy.round_trip
to_bfloat16 = npy.to_bfloat16


def as_dtype(values, dtype):
    """What a stage of `dtype` computes with: --load rounds the file's values to it."""
    if dtype == "bfloat16":
        return [to_bfloat16(x) for x in values]
    if dtype == "float16":
        return round_trip(values, "<f2")
    return values


def results_dtype(path):
    """The dtype the stage ran (its results file's first row), float32 if it does not say."""
    try:
        rows = results.read_results(path)["results"]
    except results.ResultsError:
        return "float32"  # the comparison's own check of the file says what is wrong with it
    dtype = rows[0].get("dtype") if rows else None
    return dtype if isinstance(dtype, str) else "float32"


def attention_f64(q, k, v, b, h, nq, nk, d, causal, scale, hkv=None):
    """O [B,H,NQ,D] and LSE [B,H,NQ] in float64, from the definition; K, V [B,HKV,NK,D], query head
    h reading K/V head h // (H / HKV) (HKV = H when not given)."""
    hkv = hkv or h
    o, lse = [0.0] * (b * h * nq * d), [0.0] * (b * h * nq)
    for bh in range(b * h):
        kv = bh // h * hkv + bh % h // (h // hkv)  # the K/V head (b, h // G) of query head (b, h)
        for i in range(nq):
            visible = min(max(i + (nk - nq) + 1, 0), nk) if causal else nk
            row = bh * nq + i
            if visible == 0:
                lse[row] = -math.inf
                continue
            s = [scale * sum(q[row * d + c] * k[(kv * nk + j) * d + c] for c in range(d)) for j in range(visible)]
            m = max(s)
            l = sum(math.exp(x - m) for x in s)
            lse[row] = m + math.log(l)
            for j in range(visible):
                p = math.exp(s[j] - lse[row])
                for c in range(d):
                    o[row * d + c] += p * v[(kv * nk + j) * d + c]
    return o, lse


def compare(name, got, want, tol=1e-5):
    """The course's element rule (flashcourse.tolerance) with atol = rtol = tol: NaN and an unmatched
    Inf fail, -inf matches -inf."""
    if len(got) != len(want):
        raise CheckFailed("%s: %d values, expected %d" % (name, len(got), len(want)))
    r = tolerance.compare(got, want, tol, tol)
    if r["bad"]:
        i = r["first_bad"]
        raise CheckFailed("%s: %d of %d values differ from the float64 attention; first at [%d]: got %r, want %r"
                          % (name, r["bad"], len(got), i, got[i], want[i]))


# ---- checks -----------------------------------------------------------------------------------

def run(command):
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
        LAST[:] = [proc]
        return proc
    except FileNotFoundError:
        raise CheckFailed("cannot run %s: not found" % command[0])
    except subprocess.TimeoutExpired:
        raise CheckFailed("%s did not finish within %d s" % (command[0], TIMEOUT_S))


def check_exit(proc, expect):
    if proc.returncode != expect:
        raise CheckFailed("exit code %d, expected %d" % (proc.returncode, expect))
    if expect == 2:
        lines = proc.stderr.splitlines()
        if len(lines) != 1 or not lines[0].strip():
            raise CheckFailed("an error must be exactly one line on stderr, got %d:\n%s" % (len(lines), proc.stderr))
        print("error line: " + lines[0])


def check_json(path, stage):
    """The results file the command wrote: its fields, and with `stage` its rows verified
    (flashcourse.results.check_document says what is checked)."""
    try:
        count = results.check_document(results.read_results(path), path, stage)
    except results.ResultsError as e:
        raise CheckFailed(str(e)) from None
    print("%s: %d result rows, well formed%s" % (path, count, ", stage %s verified" % stage if stage else ""))


def flag_value(command, flag):
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def npy_roundtrip(command, expect, stage, shape):
    b, h, hkv, nq, nk, d = shape if len(shape) == 6 else (shape[0], shape[1], shape[1]) + tuple(shape[2:])
    causal = "--causal" in command
    scale = float(flag_value(command, "--scale") or 1.0 / math.sqrt(d))
    # Non-zero means and distinct values, so that a transposed or shifted layout cannot pass.
    q = round_trip([0.3 + 0.5 * math.sin(0.7 * n) for n in range(b * h * nq * d)], "<f4")
    k = round_trip([0.2 + 0.5 * math.cos(0.3 * n + 1.0) for n in range(b * hkv * nk * d)], "<f2")
    v = round_trip([0.5 + math.sin(0.11 * n * n + 0.5) for n in range(b * hkv * nk * d)], "<f4")
    with tempfile.TemporaryDirectory(prefix="fa_npy_") as tmp:
        src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        os.mkdir(src)
        write_npy(os.path.join(src, "q.npy"), (b, h, nq, d), q)
        write_npy(os.path.join(src, "k.npy"), (b, hkv, nk, d), k, "<f2")
        write_npy(os.path.join(src, "v.npy"), (b, hkv, nk, d), v)
        results = os.path.join(tmp, "results.json")
        proc = run(command + ["--load", src, "--save", dst, "--json", results])
        if proc.returncode == 77 and expect != 77:
            return proc
        check_exit(proc, expect)
        o_shape, o = read_npy(os.path.join(dst, "o.npy"))
        lse_shape, lse = read_npy(os.path.join(dst, "lse.npy"))
        if o_shape != (b, h, nq, d) or lse_shape != (b, h, nq):
            raise CheckFailed("o.npy %s and lse.npy %s, expected %s and %s"
                              % (o_shape, lse_shape, (b, h, nq, d), (b, h, nq)))
        # A 16-bit stage (07 on) computes with the inputs rounded to its dtype and rounds O to it:
        # O is then good to a few units of the dtype's roundoff u (2^-8 bf16, 2^-11 fp16). Its LSE
        # is float32 arithmetic on those inputs, but with P from MUFU.EX2 (relative error ~2^-22)
        # and tensor-core sums: 1e-4 rather than float32's 1e-5 (stage 07's LSE is within ~1.5e-6
        # of float64 at N = 16k: docs/results/compare_07_h100.json).
        dtype = results_dtype(results)
        u = tolerance.UNIT_ROUNDOFF[dtype] if dtype in ("bfloat16", "float16") else None
        want_o, want_lse = attention_f64(as_dtype(q, dtype), as_dtype(k, dtype), as_dtype(v, dtype),
                                         b, h, nq, nk, d, causal, scale, hkv)
        compare("o.npy", o, want_o, 4 * u if u else 1e-5)
        compare("lse.npy", lse, want_lse, 1e-4 if u else 1e-5)
        print("o.npy and lse.npy %s match a float64 attention computed in Python (%s)"
              % ((b, h, hkv, nq, nk, d) if hkv != h else (b, h, nq, nk, d), "causal" if causal else "not causal"))
        check_json(results, stage)
    return proc


def bad_npy(command, expect):
    with tempfile.TemporaryDirectory(prefix="fa_badnpy_") as tmp:
        shape = (1, 1, 4, 8)
        write_npy(os.path.join(tmp, "q.npy"), shape, [0.5] * 32)
        write_npy(os.path.join(tmp, "v.npy"), shape, [0.5] * 32)
        write_npy(os.path.join(tmp, "k.npy"), shape, [0.5] * 32)
        with open(os.path.join(tmp, "k.npy"), "r+b") as f:  # cut the data short
            f.truncate(os.path.getsize(os.path.join(tmp, "k.npy")) - 10)
        proc = run(command + ["--load", tmp])
        if proc.returncode == 77 and expect != 77:
            return proc
        check_exit(proc, expect)
        if expect == 2 and "k.npy" not in proc.stderr:
            raise CheckFailed("the error line does not name the malformed file k.npy: " + proc.stderr.strip())
    return proc


def nan_npy(command, expect):
    with tempfile.TemporaryDirectory(prefix="fa_nannpy_") as tmp:
        shape = (1, 2, 5, 4)
        q = [0.5] * 40
        q[(1 * 5 + 2) * 4 + 3] = float("nan")  # [b=0, h=1, i=2, d=3]
        write_npy(os.path.join(tmp, "q.npy"), shape, q)
        write_npy(os.path.join(tmp, "k.npy"), shape, [0.25] * 40)
        write_npy(os.path.join(tmp, "v.npy"), shape, [0.75] * 40)
        proc = run(command + ["--load", tmp])
        if proc.returncode == 77 and expect != 77:
            return proc
        check_exit(proc, expect)
        if expect == 2 and "q[0,1,2,3]" not in proc.stderr:
            raise CheckFailed("the error line does not name the first bad element q[0,1,2,3]: " + proc.stderr.strip())
    return proc


def check_text(proc, require, forbid):
    text = proc.stdout + proc.stderr
    for t in require:
        if t not in text:
            raise CheckFailed("the output does not contain %r" % t)
    for t in forbid:
        if t in text:
            raise CheckFailed("the output contains %r, which it must not" % t)


def print_output(proc):
    for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        if text.strip():
            tail = text.splitlines()[-40:]
            print("---- %s of the command (last %d lines)\n%s" % (name, len(tail), "\n".join(tail)))


def self_test():
    """check_json on made-up results files: what it must accept and what it must refuse."""
    ours = {"stage": "11", "variant": "split_kv", "pass": "fwd", "device": "test", "cuda_runtime": "",
            "cuda_driver": "", "git_commit": "", "batch": 1, "heads": 2, "heads_kv": 2, "seq_q": 1,
            "seq_k": 8, "dim": 8, "dtype": "bfloat16", "causal": False, "status": "ok", "median_ms": 0.01,
            "tflops": 0.1, "gbps": 1.0, "peak_bytes": 100, "extra_bytes": 0, "driver_bytes": None,
            "reference": "float64 (all rows)", "verified": True, "verification_ok": True,
            "max_abs_error": 1e-3, "max_rel_error": 1e-2, "rel_error": 1e-3, "error_vs_plain": 1.0,
            "comparison": False}
    # stage 11's read_cache: the stage's own number, measured, never verified
    plain_read = dict(ours, variant="read_cache", reference="", verified=False, verification_ok=None,
                      max_abs_error=None, max_rel_error=None, rel_error=None, error_vs_plain=None,
                      comparison=True)
    unmarked = {k: v for k, v in plain_read.items() if k != "comparison"}  # a file from before the field
    cases = [
        ("a verified row beside a comparison row of the same stage", [ours, plain_read], True),
        ("the same, the comparison row not marked", [ours, unmarked], False),
        ("another stage's row, not verified", [ours, dict(unmarked, stage="07")], True),
        ("a row of the stage whose verification failed", [dict(ours, verification_ok=False), plain_read], False),
        ("only comparison rows: nothing of the stage verified", [plain_read], False),
        ("another stage's row marked as not a comparison", [ours, dict(plain_read, stage="07", comparison=False)], False),
        ("a comparison row that says it was verified", [ours, dict(plain_read, verified=True, verification_ok=True)], False),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        for name, rows, accept in cases:
            path = os.path.join(folder, "results.json")
            with open(path, "w") as f:
                json.dump({"schema": "flash-course-results/2", "stage": "11", "command": "test", "date": "",
                           "git_commit": "", "device": "test", "results": rows}, f)
            try:
                check_json(path, "11")
                accepted = True
            except CheckFailed:
                accepted = False
            ok = accepted == accept
            failures += not ok
            print("%s: %s (%s)" % ("ok" if ok else "WRONG", name, "accepted" if accepted else "refused"))
    print("self-test: %d of %d cases as expected" % (len(cases) - failures, len(cases)))
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    parser = guard.OneLineParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s --expect CODE [--json FILE] [--stage ID] [--mode MODE] -- command...")
    parser.add_argument("--expect", type=int, required=True, help="the exit code the command must return")
    parser.add_argument("--json", help="the results file the command writes (checked after the run)")
    parser.add_argument("--stage", help="the stage id whose result rows must be ok and verified")
    parser.add_argument("--mode", choices=["run", "npy-roundtrip", "bad-npy", "nan-npy"], default="run")
    parser.add_argument("--require", action="append", default=[], help="text the output must contain")
    parser.add_argument("--forbid", action="append", default=[], help="text the output must not contain")
    parser.add_argument("--npy-shape", default="1,2,6,4,8",
                        help="B,H,NQ,NK,D (or B,H,HKV,NQ,NK,D: grouped heads) of the npy-roundtrip inputs")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    print("command: " + " ".join(command))
    proc = None
    try:
        if args.mode == "run":
            if args.json and os.path.exists(args.json):
                os.remove(args.json)  # a file left by an earlier run must not pass for this one
            proc = run(command)
            if not (proc.returncode == 77 and args.expect != 77):
                check_exit(proc, args.expect)
                if args.json:
                    check_json(args.json, args.stage)
        elif args.mode == "npy-roundtrip":
            try:
                shape = [int(x) for x in args.npy_shape.split(",")]
            except ValueError:
                shape = []
            if len(shape) not in (5, 6) or min(shape) < 1 or max(shape) > 4096 or (len(shape) == 6 and shape[1] % shape[2] != 0):
                parser.error("--npy-shape takes B,H,NQ,NK,D or B,H,HKV,NQ,NK,D (H a multiple of HKV)")
            proc = npy_roundtrip(command, args.expect, args.stage, shape)
        elif args.mode == "bad-npy":
            proc = bad_npy(command, args.expect)
        else:
            proc = nan_npy(command, args.expect)
        if proc.returncode != 77 or args.expect == 77:
            check_text(proc, args.require, args.forbid)
    except CheckFailed as e:
        if LAST:
            print_output(LAST[0])
        print("FAIL: " + guard.one_line(e))
        return 1
    if proc.returncode == 77 and args.expect != 77:
        print("skipped: the command exited 77 (%s)" % (proc.stdout.strip().splitlines() or ["no reason given"])[-1])
        return 77
    print("PASS: exit %d as expected" % proc.returncode)
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main("run_and_check.py", main))
