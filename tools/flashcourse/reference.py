"""flashcourse.reference — attention from its definition in PyTorch (float64 by default, TF32 off),
forward and, by autograd, backward; PyTorch's flash LSE; and the verdict of the tolerance rule on
tensors (flashcourse.tolerance) with PyTorch's error in the place of the plain implementation's.
torch is passed in: importing the package never needs PyTorch."""
import math

from .tolerance import compare_arrays, max_finite_abs, plain_error_arrays, tolerance_from_plain


def dtypes_of(torch):
    """The reference's precisions by name."""
    return {"float64": torch.float64, "float32": torch.float32}


def reference_attention(torch, q, k, v, causal, scale, dtype, budget_bytes=1 << 30):
    """O [B,H,Nq,D] and LSE [B,H,Nq] in `dtype` from the definition, softmax(Q·Kᵀ·scale + mask)·V with
    the bottom-right causal mask, in chunks of heads and rows so that the scores of one chunk stay
    under budget_bytes. A row that sees no key: O = 0, LSE = -inf. TF32 is off while it runs."""
    b, h, nq, d = q.shape
    nk = k.shape[2]
    bh = b * h
    qf, kf, vf = (t.reshape(bh, t.shape[2], d) for t in (q, k, v))
    o = torch.empty((bh, nq, d), dtype=dtype, device=q.device)
    lse = torch.empty((bh, nq), dtype=dtype, device=q.device)
    per_row = nk * torch.empty((), dtype=dtype).element_size() * 2  # the scores and one temporary
    rows = max(1, min(nq, budget_bytes // per_row))
    heads = max(1, min(bh, budget_bytes // (per_row * nq))) if rows == nq else 1
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            cols = torch.arange(nk, device=q.device).unsqueeze(0)
            for h0 in range(0, bh, heads):
                h1 = min(bh, h0 + heads)
                kk, vv = kf[h0:h1].to(dtype), vf[h0:h1].to(dtype)
                for r0 in range(0, nq, rows):
                    r1 = min(nq, r0 + rows)
                    s = torch.matmul(qf[h0:h1, r0:r1].to(dtype), kk.transpose(-1, -2))
                    s.mul_(scale)
                    if causal:
                        i = torch.arange(r0, r1, device=q.device).unsqueeze(1)
                        s.masked_fill_(cols > i + (nk - nq), -math.inf)
                    m = s.amax(dim=-1, keepdim=True)
                    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
                    s.sub_(m).exp_()
                    ssum = s.sum(dim=-1, keepdim=True)
                    po = torch.matmul(s, vv)
                    o[h0:h1, r0:r1] = torch.where(ssum > 0, po / ssum, torch.zeros_like(po))
                    lse[h0:h1, r0:r1] = (m + torch.log(ssum)).squeeze(-1)
                    del s, po
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    return o.reshape(b, h, nq, d), lse.reshape(b, h, nq)


def reference_gradients(torch, q, k, v, d_o, causal, scale, dtype):
    """O, LSE [B,H,Nq], dQ, dK, dV in `dtype` from the definition, by autograd one head at a time
    (the scores of one head, N², a few times over: 8 GiB in float64 at N = 16k). A row that sees no
    key: O = 0, LSE = -inf, and it adds nothing to any gradient. TF32 is off while it runs."""
    b, h, nq, d = q.shape
    nk = k.shape[2]
    o, dq = (torch.empty((b, h, nq, d), dtype=dtype, device=q.device) for _ in range(2))
    lse = torch.empty((b, h, nq), dtype=dtype, device=q.device)
    dk, dv = (torch.empty((b, h, nk, d), dtype=dtype, device=q.device) for _ in range(2))
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        cols = torch.arange(nk, device=q.device).unsqueeze(0)
        rows = torch.arange(nq, device=q.device).unsqueeze(1)
        for bi in range(b):
            for hi in range(h):
                qq, kk, vv = (t[bi, hi].to(dtype).requires_grad_(True) for t in (q, k, v))
                s = torch.matmul(qq, kk.transpose(0, 1)) * scale
                if causal:
                    s = s.masked_fill(cols > rows + (nk - nq), -math.inf)
                m = torch.logsumexp(s, dim=-1, keepdim=True)
                seen = torch.isfinite(m)
                p = torch.where(seen, torch.exp(s - torch.where(seen, m, torch.zeros_like(m))), torch.zeros_like(s))
                oo = torch.matmul(p, vv)
                oo.backward(d_o[bi, hi].to(dtype))
                o[bi, hi], lse[bi, hi] = oo.detach(), m.detach().squeeze(-1)
                dq[bi, hi], dk[bi, hi], dv[bi, hi] = qq.grad, kk.grad, vv.grad
                del qq, kk, vv, s, m, p, oo
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    return o, lse, dq, dk, dv


def flash_lse(torch, q, k, v, causal, scale):
    """PyTorch's flash backend's LSE [B,H,Nq] (float32), through its private op; None where this
    PyTorch has no such op or it refuses the case."""
    try:
        with torch.no_grad():
            if q.device.type == "cpu":  # PyTorch's CPU build of the flash kernel (for tests without a GPU)
                res = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
            else:
                res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
        lse = res[1]
        nq = q.shape[2]
        if lse.dim() != 3 or lse.shape[2] < nq:
            return None
        return lse[..., :nq].float()
    except (AttributeError, RuntimeError, TypeError):
        return None


def judge(torch, got, ref, plain, dtype):
    """The rule against ref (on ref's device, in float64), with e = max|plain − ref| over the finite
    pairs (plain None: e = 0); dtype names u (or is u). The compare_arrays figures, plus plain_error,
    atol and rtol."""
    ref = ref.to(torch.float64)
    got = got.to(device=ref.device, dtype=torch.float64)
    if plain is not None:
        e, max_ref = plain_error_arrays(torch, plain.to(device=ref.device, dtype=torch.float64), ref)
    else:
        e, max_ref = 0.0, max_finite_abs(torch, ref)
    atol, rtol = tolerance_from_plain(e, max_ref, dtype)
    res = compare_arrays(torch, got, ref, atol, rtol)
    res.update(plain_error=e, atol=atol, rtol=rtol)
    return res
