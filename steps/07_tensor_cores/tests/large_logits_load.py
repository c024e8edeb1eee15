#!/usr/bin/env python3
"""large_logits_load.py — stage 07 on bf16 inputs with large scores, loaded from .npy files.

Builds Q, K, V with NumPy: q, k ~ N(0.3, 1) and v ~ N(0.5, 1), rounded to bfloat16, then q and k
multiplied by 2 (exact in bf16), so that the scaled scores are about four times the usual ones. Runs
`step07_tensor_cores --load DIR --save OUT` on them at the head dims and shapes below and expects exit
0: the stage's own check (float64, with the rule of docs/tolerance.md) must pass a correct output.

So that a pass means the output is right and not only that a bound is loose, it then reads the saved
O and LSE and checks them against float64 with FlashAttention's own test rule: max|O - ref| at most
twice the error of an implementation that rounds S, P and O to bf16, plus 1e-5 (the rule of
flash-attention's tests/test_flash_attn.py), and LSE against float64 within 1e-3 relative.

    python3 steps/07_tensor_cores/tests/large_logits_load.py build/steps/07_tensor_cores/step07_tensor_cores

Exit: 0 every case passed; 1 a case failed; 77 skipped (no GPU, or NumPy is not installed).
"""
import os
import subprocess
import sys
import tempfile

# (D, Nq, Nk, causal): D = 256 and 96, which stage 05 (the comparison beside the float64 check)
# does not run, so that the float64 check must stand alone there; and the fast D = 64 and 128.
CASES = [(256, 200, 333, True), (96, 211, 150, False), (64, 200, 333, True), (128, 211, 150, False)]
BATCH, HEADS = 1, 2


def to_bf16(x, np):
    """float32 -> the nearest bfloat16 (ties to even), returned as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def attention_f64(q, k, v, causal, np):
    """[B,H,Nq,D] float64 attention and LSE, the bottom-right causal mask; rows that see no key: O = 0."""
    d, nq, nk = q.shape[-1], q.shape[-2], k.shape[-2]
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(d)
    if causal:
        visible = np.arange(nk)[None, :] <= np.arange(nq)[:, None] + (nk - nq)
        s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p / np.where(l > 0, l, 1.0), v.astype(np.float64))
    lse = np.where(l[..., 0] > 0, (m_safe + np.log(np.where(l > 0, l, 1.0)))[..., 0], -np.inf)
    return o, lse


def attention_bf16(q, k, v, causal, np):
    """FlashAttention's test reference in bf16: S rounded to bf16, softmax in float32, P rounded to
    bf16, O = P·V rounded to bf16 (the products summed in float32)."""
    d, nq, nk = q.shape[-1], q.shape[-2], k.shape[-2]
    s = to_bf16(np.einsum("bhid,bhjd->bhij", q, k).astype(np.float32) / np.float32(np.sqrt(d)), np)
    if causal:
        visible = np.arange(nk)[None, :] <= np.arange(nq)[:, None] + (nk - nq)
        s = np.where(visible, s, -np.inf).astype(np.float32)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0)).astype(np.float32)
    l = p.sum(axis=-1, keepdims=True)
    p = to_bf16(p / np.where(l > 0, l, 1.0), np)
    return to_bf16(np.einsum("bhij,bhjd->bhid", p, v).astype(np.float32), np)


def run_case(exe, dim, seq_q, seq_k, causal, seed, np):
    rng = np.random.default_rng(seed)
    shape_q, shape_k = (BATCH, HEADS, seq_q, dim), (BATCH, HEADS, seq_k, dim)
    q = 2 * to_bf16(rng.normal(0.3, 1.0, shape_q).astype(np.float32), np)
    k = 2 * to_bf16(rng.normal(0.3, 1.0, shape_k).astype(np.float32), np)
    v = to_bf16(rng.normal(0.5, 1.0, shape_k).astype(np.float32), np)
    what = f"D = {dim}, Nq = {seq_q}, Nk = {seq_k}{', causal' if causal else ''}"
    with tempfile.TemporaryDirectory() as inputs, tempfile.TemporaryDirectory() as outputs:
        for name, x in (("q", q), ("k", k), ("v", v)):
            np.save(os.path.join(inputs, f"{name}.npy"), x)
        command = [exe, "--load", inputs, "--save", outputs, "--dtype", "bfloat16", "--reps", "1", "--warmup", "0"]
        if causal:
            command.append("--causal")
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode == 77:
            print(proc.stdout)
            return 77
        if proc.returncode != 0:
            print(proc.stdout)
            print(f"FAIL: {what}: the stage exited {proc.returncode} (expected 0)")
            return 1
        o = np.load(os.path.join(outputs, "o.npy")).astype(np.float64)
        lse = np.load(os.path.join(outputs, "lse.npy")).astype(np.float64)
    ref_o, ref_lse = attention_f64(q, k, v, causal, np)
    error = np.abs(o - ref_o).max()
    allowed = 2 * np.abs(attention_bf16(q, k, v, causal, np).astype(np.float64) - ref_o).max() + 1e-5
    finite = np.isfinite(ref_lse)
    lse_ok = np.array_equal(np.isfinite(lse), finite) and np.all(
        np.abs(lse[finite] - ref_lse[finite]) <= 1e-3 * np.maximum(1.0, np.abs(ref_lse[finite])))
    ok = bool(error <= allowed and lse_ok)
    print(f"{'ok  ' if ok else 'FAIL'}: {what}: stage exit 0; max|O - float64| = {error:.3g}, "
          f"{error / allowed:.2f} of FlashAttention's rule ({allowed:.3g}); LSE {'within' if lse_ok else 'OUTSIDE'} 1e-3")
    return 0 if ok else 1


def main():
    if len(sys.argv) != 2:
        print("usage: large_logits_load.py PATH/TO/step07_tensor_cores", file=sys.stderr)
        return 2
    try:
        import numpy as np
    except ImportError:
        print("large_logits_load.py: skipped: NumPy is not installed (pip install numpy)")
        return 77
    results = [run_case(sys.argv[1], *case, seed=7 + n, np=np) for n, case in enumerate(CASES)]
    if all(r == 77 for r in results):
        return 77
    failed = sum(r == 1 for r in results)
    print(f"{'FAIL' if failed else 'PASS'}: {len(CASES) - failed} of {len(CASES)} large-logit cases")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
