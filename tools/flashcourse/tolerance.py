"""flashcourse.tolerance — the course's tolerance rule (docs/tolerance.md), the Python side.

The C++ side is `tolerance_from_plain` and `tolerance_for` in common/src/verify.cpp and `compare` in
common/src/compare.cpp; test_tolerance_agrees.py runs both on one table of cases and fails on any
difference. The rule, for an output in a dtype of unit roundoff u:

    e      max |plain − ref| over the finite pairs (plain: the plainest implementation, or PyTorch's)
    atol   max(4·e, 2√Nk·u32·max|ref|) + 4u·max|ref|   rtol   4u   (the √Nk floor for O, over Nk keys)
    pass   got == ref  or  |got − ref| <= atol + rtol·|ref|     (NaN and an unmatched Inf fail)

O uses its dtype's u (the 16-bit rule for float16 and bfloat16); LSE uses float32's (the float32
rule), whatever the output's dtype.
"""
import math

# The unit roundoff of each dtype (fa/dtype.hpp's unit_roundoff).
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
PLAIN_ERROR_MULTIPLE = 4.0  # kPlainErrorMultiple of fa/verify.hpp
LARGE_LOGITS_WIDENING = 10.0  # tolerance_for: intermediates of scores of 50 to 200


def unit_roundoff(dtype):
    """u of a dtype name ('float32', 'float16', 'bfloat16'), or u itself when given a number."""
    return dtype if isinstance(dtype, float) else UNIT_ROUNDOFF[dtype]


def tolerance_from_plain(plain_error, max_abs_ref, dtype, summed_keys=0):
    """(atol, rtol) from the plain implementation's error e and max|ref| (fa::tolerance_from_plain);
    summed_keys > 0: the floor 2·√Nk·u32·max|ref| of a float32 sum over that many keys."""
    u = unit_roundoff(dtype)
    sum_floor = 2 * math.sqrt(summed_keys) * UNIT_ROUNDOFF["float32"] * max_abs_ref
    return max(PLAIN_ERROR_MULTIPLE * plain_error, sum_floor) + 4 * u * max_abs_ref, 4 * u


def tolerance_for(tol, large_logits):
    """fa::tolerance_for: a fixed tolerance, 10x wider for large-logit inputs."""
    atol, rtol = tol
    return (atol * LARGE_LOGITS_WIDENING, rtol * LARGE_LOGITS_WIDENING) if large_logits else (atol, rtol)


def element_ok(got, ref, atol, rtol):
    """One element: equal (so -inf matches -inf), or a finite ref within the bound (NaN fails)."""
    return got == ref or (math.isfinite(ref) and abs(got - ref) <= atol + rtol * abs(ref))


def plain_error(plain, ref):
    """(e, max|ref|) over the pairs where both are finite, as verify.cpp's Errors adds them up."""
    e = max_ref = 0.0
    for p, r in zip(plain, ref):
        if math.isfinite(p) and math.isfinite(r):
            e, max_ref = max(e, abs(p - r)), max(max_ref, abs(r))
    return e, max_ref


def compare(got, ref, atol, rtol):
    """fa::compare on two sequences of numbers: count, bad, first_bad (-1: none), max_abs, max_rel,
    rel_frobenius and ok, as CompareReport holds them (max_abs and rel_frobenius are inf when a
    non-finite value is not matched exactly)."""
    if len(got) != len(ref):
        raise ValueError("compare: sizes differ (%d vs %d)" % (len(got), len(ref)))
    r = {"count": len(got), "bad": 0, "first_bad": -1, "max_abs": 0.0, "max_rel": 0.0}
    diff_sq = ref_sq = 0.0
    mismatch = False
    for i, (g, e) in enumerate(zip(got, ref)):
        if math.isfinite(g) and math.isfinite(e):
            diff = abs(g - e)
            r["max_abs"] = max(r["max_abs"], diff)
            if e != 0:
                r["max_rel"] = max(r["max_rel"], diff / abs(e))
            diff_sq += diff * diff
            ref_sq += e * e
        elif not g == e:
            mismatch = True
        if not element_ok(g, e, atol, rtol):
            if r["bad"] == 0:
                r["first_bad"] = i
            r["bad"] += 1
    r["rel_frobenius"] = math.sqrt(diff_sq / ref_sq) if ref_sq > 0 else math.sqrt(diff_sq)
    if mismatch:
        r["max_abs"] = r["rel_frobenius"] = math.inf
    r["ok"] = r["bad"] == 0 and r["count"] > 0
    return r


# ---- the same on whole arrays, for NumPy (xp = numpy) and PyTorch (xp = torch) alike ----------------

def _count(a):
    return a.numel() if hasattr(a, "numel") else a.size  # torch, numpy


def max_finite_abs(xp, a):
    """max |a| over its finite elements (0 for none)."""
    finite = xp.where(xp.isfinite(a), a, xp.zeros_like(a))
    return float(abs(finite).max()) if _count(a) else 0.0


def compare_arrays(xp, got, ref, atol, rtol):
    """compare() on whole arrays in float64: bad (the count of failing elements), first_bad (the flat
    index of the first, or None), max_abs and rel_frobenius over the finite pairs (inf when a
    non-finite value is not matched exactly)."""
    if tuple(got.shape) != tuple(ref.shape):
        raise ValueError("shapes differ: %s and %s" % (tuple(got.shape), tuple(ref.shape)))
    equal = got == ref
    both = xp.isfinite(got) & xp.isfinite(ref)
    diff = xp.where(both, abs(xp.where(both, got, xp.zeros_like(got)) - xp.where(both, ref, xp.zeros_like(ref))),
                    xp.zeros_like(ref))
    finite_ref = xp.where(xp.isfinite(ref), ref, xp.zeros_like(ref))
    ref_both = xp.where(both, ref, xp.zeros_like(ref))
    # NaN compares false: it fails; an infinite ref is matched only by itself.
    good = equal | (xp.isfinite(ref) & (abs(got - finite_ref) <= atol + rtol * abs(finite_ref)))
    bad_mask = ~good
    bad = int(bad_mask.sum())
    mismatch = bool((~both & ~equal).any())
    norm_ref = float((ref_both * ref_both).sum())
    norm_diff = float((diff * diff).sum())
    first = int(bad_mask.reshape(-1).nonzero()[0][0]) if bad else None
    if mismatch:
        max_abs = rel = math.inf
    else:
        max_abs = float(diff.max()) if _count(diff) else 0.0
        rel = math.sqrt(norm_diff / norm_ref) if norm_ref > 0 else math.sqrt(norm_diff)
    return {"max_abs": max_abs, "rel_frobenius": rel, "bad": bad, "first_bad": first}


def plain_error_arrays(xp, plain, ref):
    """plain_error() on whole arrays: (e, max|ref|) over the pairs where both are finite."""
    both = xp.isfinite(plain) & xp.isfinite(ref)
    if not _count(ref) or not bool(both.any()):
        return 0.0, 0.0
    zero = xp.zeros_like(ref)
    diff = abs(xp.where(both, plain, zero) - xp.where(both, ref, zero))
    return float(diff.max()), float(abs(xp.where(both, ref, zero)).max())


def unravel(index, shape):
    """A flat C-order index as a list of indices into shape."""
    out = []
    for n in reversed(shape):
        out.append(index % n)
        index //= n
    return list(reversed(out))
