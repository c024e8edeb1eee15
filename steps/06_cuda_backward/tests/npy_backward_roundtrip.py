#!/usr/bin/env python3
"""Stage 06's --load/--save round trip for the backward, checked against float64 in Python.

    npy_backward_roundtrip.py EXE

Writes q.npy, k.npy, v.npy and do.npy ([1, 2, 6, 4, 32], causal: the first two query rows see no
key), runs EXE --load DIR --save DIR2 --causal --json FILE, and checks dq.npy, dk.npy and dv.npy
(and o.npy, lse.npy) against a float64 backward computed here from the definition:
    dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(dO ∘ O)),  dQ = scale dS K,  dK = scale dSᵀ Q.
Exit 0 pass, 1 fail, 77 when EXE is skipped (no CUDA device). Standard library only.
"""
import math
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
from run_and_check import read_npy, write_npy  # noqa: E402  (the course's own .npy helpers)

B, H, NQ, NK, D = 1, 2, 6, 4, 32  # D = 32: the smallest head dim of the stage


def backward_f64(q, k, v, do, scale):
    """One head: lists of rows. Returns o, lse, dq, dk, dv."""
    nq, nk = len(q), len(k)
    off = nk - nq
    o, lse, dq = [[0.0] * D for _ in range(nq)], [0.0] * nq, [[0.0] * D for _ in range(nq)]
    dk, dv = [[0.0] * D for _ in range(nk)], [[0.0] * D for _ in range(nk)]
    for i in range(nq):
        seen = [j for j in range(nk) if j <= i + off]
        if not seen:
            lse[i] = -math.inf
            continue
        s = {j: scale * sum(q[i][d] * k[j][d] for d in range(D)) for j in seen}
        m = max(s.values())
        lse[i] = m + math.log(sum(math.exp(x - m) for x in s.values()))
        p = {j: math.exp(s[j] - lse[i]) for j in seen}
        o[i] = [sum(p[j] * v[j][d] for j in seen) for d in range(D)]
        delta = sum(do[i][d] * o[i][d] for d in range(D))
        for j in seen:
            dp = sum(do[i][d] * v[j][d] for d in range(D))
            ds = p[j] * (dp - delta)
            for d in range(D):
                dv[j][d] += p[j] * do[i][d]
                dk[j][d] += scale * ds * q[i][d]
                dq[i][d] += scale * ds * k[j][d]
    return o, lse, dq, dk, dv


def main():
    exe = sys.argv[1]
    rng = random.Random(6)
    shape_q, shape_k = (B, H, NQ, D), (B, H, NK, D)
    tensors = {name: [rng.gauss(0.5, 1.0) for _ in range(B * H * n * D)]
               for name, n in (("q", NQ), ("k", NK), ("v", NK), ("do", NQ))}
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        os.makedirs(src)
        for name, shape in (("q", shape_q), ("k", shape_k), ("v", shape_k), ("do", shape_q)):
            write_npy(os.path.join(src, name + ".npy"), shape, tensors[name])
        proc = subprocess.run([exe, "--load", src, "--save", dst, "--causal", "--reps", "1", "--warmup", "0",
                               "--json", os.path.join(tmp, "r.json")], capture_output=True, text=True)
        if proc.returncode == 77:
            print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "skipped")  # "skipped: WHY"
            return 77
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr)
            print("FAIL: exit %d" % proc.returncode)
            return 1
        # Inputs as the files store them (float32), read back.
        vals = {name: read_npy(os.path.join(src, name + ".npy"))[1] for name in tensors}
        got = {name: read_npy(os.path.join(dst, name + ".npy")) for name in ("o", "lse", "dq", "dk", "dv")}
    scale = 1.0 / math.sqrt(D)
    want = {"o": [], "lse": [], "dq": [], "dk": [], "dv": []}
    for bh in range(B * H):
        rows = lambda name, n: [vals[name][(bh * n + r) * D:(bh * n + r + 1) * D] for r in range(n)]
        o, lse, dq, dk, dv = backward_f64(rows("q", NQ), rows("k", NK), rows("v", NK), rows("do", NQ), scale)
        want["o"] += sum(o, [])
        want["lse"] += lse
        want["dq"] += sum(dq, [])
        want["dk"] += sum(dk, [])
        want["dv"] += sum(dv, [])
    failed = False
    expected_shapes = {"o": shape_q, "lse": (B, H, NQ), "dq": shape_q, "dk": shape_k, "dv": shape_k}
    for name in ("dq", "dk", "dv", "o", "lse"):
        shape, values = got[name]
        if tuple(shape) != expected_shapes[name]:
            print("FAIL %s: shape %s, expected %s" % (name, shape, expected_shapes[name]))
            failed = True
            continue
        ref = want[name]
        big = max(abs(x) for x in ref if math.isfinite(x))
        bad = [i for i, (g, r) in enumerate(zip(values, ref))
               if not (g == r or abs(g - r) <= 1e-4 * big + 1e-4 * abs(r))]  # NaN fails
        worst = max((abs(g - r) for g, r in zip(values, ref) if math.isfinite(r)), default=0.0)
        print("%-3s %s  max abs error %.3g (max |ref| %.3g), %d bad of %d" %
              (name, "ok  " if not bad else "FAIL", worst, big, len(bad), len(ref)))
        failed = failed or bool(bad)
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
