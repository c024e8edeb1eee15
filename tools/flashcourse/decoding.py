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


# What a figure or a fit of decoding rows can take: counts of at most 2^40 (a cache of 2^40 keys is
# past any GPU's memory) and times from a picosecond to a day, in ms. A row past them is not a
# measurement, and its arithmetic would leave float64's range or divide by zero.
MAX_COUNT = 2 ** 40
MS_RANGE = (1e-9, 86400e3)


def check_row(row, where, counts=("batch", "heads", "seq_k", "dim")):
    """guard.BadInput naming `where` and the field unless `row` (an ok row to draw or fit) has the
    counts named, a dtype and the median a decoding step's time needs (heads_kv: null or a count)."""
    from . import guard
    for key in counts:
        guard.number(row.get(key), "%s: %s" % (where, key), 1, MAX_COUNT, integer=True)
    if row.get("heads_kv") is not None:
        guard.number(row["heads_kv"], "%s: heads_kv" % where, 1, MAX_COUNT, integer=True)
    guard.number(row.get("median_ms"), "%s: median_ms" % where, *MS_RANGE)
    if not isinstance(row.get("dtype"), str):
        raise guard.BadInput("%s: dtype should be text, got %s" % (where, guard.brief(row.get("dtype"))))
