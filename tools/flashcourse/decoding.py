"""flashcourse.decoding — what the decoding comparisons (compare_decode.py, compare_decode_stream.py)
share: a case's inputs (a few queries against a long K/V cache with grouped heads), an anchor row of
the case, and the rates against the cache's bytes and the copy bandwidth."""
import math


def case_inputs(gpu, args, b, nk, seed=None):
    """Q [b, Hq, Nq, D], K, V [b, Hkv, nk, D] of one case, drawn from `seed` (default --seed): the
    same in every process."""
    torch = gpu.torch
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed if seed is None else seed)
    q = torch.randn((b, args.heads, args.seq_q, args.dim), generator=gen, device="cuda", dtype=gpu.dtype)
    k = torch.randn((b, args.heads_kv, nk, args.dim), generator=gen, device="cuda", dtype=gpu.dtype)
    v = torch.randn((b, args.heads_kv, nk, args.dim), generator=gen, device="cuda", dtype=gpu.dtype)
    return q, k, v


def anchor_row(variant, b, args, nk):
    """An anchor's row of one decoding case, not yet timed (not causal: SDPA's is_causal is aligned
    top-left, the course's bottom-right, and with Nq = 1 the course's causal row sees every key)."""
    return {"stage": "anchor", "variant": variant, "pass": "fwd", "batch": b, "heads": args.heads,
            "heads_kv": args.heads_kv, "seq_q": args.seq_q, "seq_k": nk, "dim": args.dim, "dtype": args.dtype,
            "causal": False, "scale": 1.0 / math.sqrt(args.dim), "status": "ok", "note": "", "median_ms": None,
            "min_ms": None, "max_ms": None, "reps": 0, "tflops": None, "gbps": None, "verified": False}


def cache_bytes(row):
    """K and V of the row's case read once, 16-bit elements."""
    return 2.0 * row["batch"] * row["heads_kv"] * row["seq_k"] * row["dim"] * 2


def add_rates(row, copy_gbps):
    """cache_gbps (the cache's bytes over the row's median) and of_copy (that over the copy rate)."""
    if row.get("status") == "ok" and row.get("median_ms"):
        row["cache_gbps"] = cache_bytes(row) / (row["median_ms"] * 1e-3) / 1e9
        row["of_copy"] = row["cache_gbps"] / copy_gbps if copy_gbps else None


def decode_tflops(row):
    """4·B·Hq·Nq·Nk·D over the row's median (a decoding step's FLOPs, no mask)."""
    return 4.0 * row["batch"] * row["heads"] * row["seq_q"] * row["seq_k"] * row["dim"] / (row["median_ms"] * 1e-3) / 1e12
