#!/usr/bin/env python3
"""compare_pytorch.py — PyTorch's attention backends, measured on this GPU, as rows of a results file;
and a stage executable run beside them on the same inputs, its output checked against theirs.

    compare_pytorch.py --json OUT.json [--dtype bfloat16,float16] [--dim 64,128] [--causal both]
                       [--pass fwd,bwd] [--seq 512,1k,2k,4k,8k,16k] [--tokens 16k] [--hidden 2048]
                       [--backends flash,cudnn,efficient,math] [--reps 20] [--warmup 5] [--seed 0]
                       [--commit SHA] [--quick]
                       [--stage-exe EXE[,EXE2] ...] [--stage-variants V1,V2] [--stage-args="ARGS"]
                       [--ref-dtype float64|float32] [--keep DIR] [--stage-timeout 600]

The anchors. For each shape, dtype and pass it runs torch.nn.functional.scaled_dot_product_attention
with one backend forced at a time (torch.nn.attention.sdpa_kernel) and writes one row per run in the
course's results format (docs/results_schema.md, `flash-course-results/2`) with "stage": "anchor"
and "variant": "sdpa_flash" | "sdpa_cudnn" | "sdpa_efficient" | "sdpa_math", so that the plot tool
and the chapters read the anchors like any other row, from a file measured in one run.

Shapes: the FlashAttention papers' sweep by default: B·N = --tokens (16k) and H·D = --hidden (2048),
so B = tokens / N and H = hidden / D; Nq = Nk = N (SDPA's is_causal is top-left aligned, the
course's mask bottom-right: the two agree only when Nq = Nk). Inputs: Q, K, V (and dO) drawn once
per case with torch.randn from a generator seeded with --seed, in the case's dtype, on the GPU; every
backend and the stage see the same ones. Times: CUDA events around each call, --warmup calls first,
the median of --reps. FLOPs as the course counts them: forward 4·B·H·D·(visible query-key pairs),
the backward 2.5 times that. Memory: PyTorch's allocator (max_memory_allocated) above what was
allocated before the call, plus Q, K, V (and dO): peak_bytes; extra_bytes beyond Q, K, V, O (and
dO, dQ, dK, dV for bwd; the LSE is internal to each backend and counts as extra). A backend that
refuses the case is a `skipped` row with its reason, an out-of-memory run an `oom` row. The anchors
are not verified (verified: false).

The stage. With --stage-exe (repeatable, or a comma list: stage 07 now, 08 and 09 later), for every
forward case it also
  1. saves Q, K, V into a temporary folder as q.npy, k.npy, v.npy, [B, H, N, D], as the stages'
     --load reads them: float16 as float16 ('<f2'); bfloat16 as float32 arrays holding exactly the
     bf16 values (the course's reader takes float32 and float16; --dtype bfloat16 then rounds them
     to bf16, which is exact); float32 as float32;
  2. runs   EXE --dtype DTYPE --causal|--causal=false --load DIR --save OUTDIR --json FILE
                --reps R --warmup W [--variant V] [ARGS of --stage-args="ARGS", e.g. "--no-verify"]
     (--load sets B, H, N, D from the files; the stage writes o.npy and lse.npy as float32) and
     merges the rows of its --json file into this file unchanged (their stage, variant, verified,
     tflops, median_ms, ...); with --stage-variants it runs once per variant (--variant V), and a
     row that two runs of one case both wrote (the previous stage's comparison row) is kept once;
  3. compares the stage's O with PyTorch's: the output of the first backend that ran, in the order
     flash, cudnn, efficient, math, and both with a reference computed here by torch on the same
     inputs, softmax(Q·Kᵀ·scale + mask)·V in --ref-dtype (float64 by default, in chunks of rows to
     bound its memory; TF32 off). The bound is the course's tolerance rule (docs/tolerance.md) with
     PyTorch's backend in the place of the plain implementation: with e = max|torch − ref| and
     u the unit roundoff of the dtype (float32 2⁻²⁴, float16 2⁻¹¹, bfloat16 2⁻⁸), an element
     passes when ours == ref or |ours − ref| <= 4·e + 4u·max|ref| + 4u·|ref|; the case is ok when
     every element passes (NaN and Inf fail). LSE: against the reference's, with the same rule
     with float32's u and e from PyTorch's flash LSE (the private op
     torch.ops.aten._scaled_dot_product_flash_attention); without it the LSE error is reported but
     not judged. The verdict is the row's "vs_pytorch" object (docs/results_schema.md), on the row
     whose output --save wrote: the first ok row of the stage's own variants (its file's stage);
  4. prints one line per case: ours TFLOP/s and its ratio to sdpa_flash and sdpa_cudnn, and the
     comparison's verdict; at the end a table of the ratios.
The backward (--pass bwd, with a backward stage's executable: stage 08): the same, with dO saved as
do.npy beside Q, K, V, the stage's --save writing dq.npy, dk.npy, dv.npy, and the comparison made on
the gradients: reference dQ, dK, dV by autograd through the definition in --ref-dtype, one head at
a time; e per tensor from the gradients of the first PyTorch backend that ran; the row's
"vs_pytorch" holds each gradient's figures under "gradients" and the worst one's in the summary
fields. With --stage-exe, give one pass: the stage's.

A smoke test: --quick (N = 200 and 1000, 2k tokens, 3 reps, 1 warm-up; any option given overrides).

The H100 comparison of stage 07 (issue 11; 12 cases, a few minutes):
    python3 tools/compare_pytorch.py --json $OUT/compare_07_h100.json \\
        --stage-exe build-gpu/steps/07_tensor_cores/step07_tensor_cores --dtype bfloat16 \\
        --dim 64,128 --causal both --pass fwd --seq 1k,4k,16k --commit SHA
and of stage 08 (issue 12), the same with --pass bwd and
        --stage-exe build-gpu/steps/08_tensor_core_backward/step08_tensor_core_backward

Exit codes: 0 written and every comparison ok; 1 written, but a stage run failed (its exit code was
not 0, it wrote no results, no row of its own ran) or a comparison failed; 2 bad usage, no PyTorch
or no CUDA device.
"""
import argparse
import ast
import ctypes
import datetime
import json
import math
import os
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

BACKENDS = ("flash", "cudnn", "efficient", "math")
PROG = "compare_pytorch.py"
# The unit roundoff of each dtype (fa/dtype.hpp's unit_roundoff).
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
PLAIN_ERROR_MULTIPLE = 4.0  # kPlainErrorMultiple of fa/verify.hpp
QUICK = {"seq": "200,1000", "tokens": "2k", "reps": 3, "warmup": 1}
DEFAULTS = {"seq": "512,1k,2k,4k,8k,16k", "tokens": "16k", "reps": 20, "warmup": 5}
# What a stage's --save writes for each pass (the backward's files are for stage 08).
SAVED = {"fwd": ("o", "lse"), "bwd": ("o", "lse", "dq", "dk", "dv")}
# The fields that say which case a row is: two rows with the same key are the same measurement.
CASE_KEY = ("stage", "variant", "pass", "dtype", "dim", "causal", "batch", "heads", "heads_kv", "seq_q", "seq_k")


class UsageError(Exception):
    """Bad usage: one line on stderr, exit 2."""


# ---- pure Python: sizes, .npy files, the tolerance rule, rows (tested by test_compare_pytorch.py) ----

def sizes(text):
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        mult = 1024 if part.endswith("k") else 1
        try:
            value = int(part.rstrip("k")) * mult
        except ValueError:
            raise UsageError("not a size: %r (e.g. 512, 4k)" % part) from None
        if value < 1:
            raise UsageError("sizes must be positive, got %r" % part)
        out.append(value)
    if not out:
        raise UsageError("an empty list of sizes: %r" % text)
    return out


def visible_pairs(nq, nk, causal):
    """Query-key pairs a row sees: all, or under the bottom-right causal mask j <= i + nk - nq."""
    if not causal:
        return nq * nk
    return sum(max(0, min(nk, i + nk - nq + 1)) for i in range(nq))


def npy_descr(dtype_name):
    """The .npy element type in which a stage's --load gets a tensor of this dtype: bfloat16 goes as
    float32 holding the bf16 values exactly (the course's reader takes float32 and float16 only)."""
    return {"float16": "<f2", "bfloat16": "<f4", "float32": "<f4"}[dtype_name]


def npy_header(descr, shape):
    """The preamble and header of a version 1.0 .npy file, as np.save writes them."""
    dims = ", ".join(str(int(n)) for n in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"  # data on a 64-byte boundary
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")


def write_npy(path, descr, shape, data):
    """Writes raw little-endian C-order data (bytes-like) as a .npy file."""
    count = 1
    for n in shape:
        count *= int(n)
    size = {"<f2": 2, "<f4": 4, "<f8": 8}[descr]
    if len(data) != count * size:
        raise ValueError("%s: %d bytes of data for shape %s of %s" % (path, len(data), tuple(shape), descr))
    with open(path, "wb") as f:
        f.write(npy_header(descr, shape))
        f.write(data)


def read_npy(path):
    """(descr, shape, raw data bytes) of a C-order .npy file, any format version."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY" or len(data) < 10:
        raise ValueError("%s: not a .npy file" % path)
    if data[6] == 1:
        (hlen,), start = struct.unpack("<H", data[8:10]), 10
    else:
        (hlen,), start = struct.unpack("<I", data[8:12]), 12
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    if header.get("fortran_order"):
        raise ValueError("%s: Fortran order" % path)
    shape = tuple(header["shape"])
    count = 1
    for n in shape:
        count *= n
    body = data[start + hlen:]
    size = {"<f2": 2, "<f4": 4, "<f8": 8}.get(header["descr"])
    if size is None:
        raise ValueError("%s: element type %r (expected <f2, <f4 or <f8)" % (path, header["descr"]))
    if len(body) != size * count:
        raise ValueError("%s: %d data bytes for shape %s of %s" % (path, len(body), shape, header["descr"]))
    return header["descr"], shape, body


def tolerance(plain_error, max_ref, u):
    """(atol, rtol) of the course's rule (docs/tolerance.md): an element passes when got == ref or
    |got - ref| <= atol + rtol·|ref|, with atol = 4·e + 4u·max|ref| and rtol = 4u, where e is the
    error of the comparison implementation (here PyTorch's backend) against the same reference."""
    return PLAIN_ERROR_MULTIPLE * plain_error + 4.0 * u * max_ref, 4.0 * u


def _count(a):
    return a.numel() if hasattr(a, "numel") else a.size  # torch, numpy


def max_finite_abs(xp, a):
    """max |a| over its finite elements (0 for none), for NumPy and PyTorch alike."""
    finite = xp.where(xp.isfinite(a), a, xp.zeros_like(a))
    return float(abs(finite).max()) if _count(a) else 0.0


def compare_arrays(xp, got, ref, atol, rtol):
    """The rule on whole arrays, for NumPy (xp = numpy) and PyTorch (xp = torch) alike: an element
    passes when got == ref (an LSE of -inf where a row sees no key) or |got - ref| <= atol +
    rtol·|ref|, so that NaN and Inf fail. Returns max_abs (max |got - ref|, NaN if any is NaN),
    rel_frobenius (‖got − ref‖ / ‖ref‖ over the finite ref), bad (the count of failing elements) and
    first_bad (the flat index of the first, or None)."""
    if tuple(got.shape) != tuple(ref.shape):
        raise ValueError("shapes differ: %s and %s" % (tuple(got.shape), tuple(ref.shape)))
    equal = got == ref
    diff = abs(got - ref)
    diff = xp.where(equal, xp.zeros_like(diff), diff)  # -inf == -inf: no error (and no NaN)
    finite = xp.isfinite(ref)
    finite_ref = xp.where(finite, ref, xp.zeros_like(ref))
    # NaN compares false: it fails; an infinite ref is matched only by itself.
    good = equal | (finite & (diff <= atol + rtol * abs(finite_ref)))
    bad_mask = ~good
    bad = int(bad_mask.sum())
    norm_ref = float((finite_ref * finite_ref).sum()) ** 0.5
    norm_diff = float((diff * diff).sum()) ** 0.5
    first = int(bad_mask.reshape(-1).nonzero()[0][0]) if bad else None
    return {"max_abs": float(diff.max()) if _count(diff) else 0.0,
            "rel_frobenius": norm_diff / norm_ref if norm_ref > 0 else (0.0 if norm_diff == 0 else math.inf),
            "bad": bad, "first_bad": first}


def unravel(index, shape):
    """A flat C-order index as a list of indices into shape."""
    out = []
    for n in reversed(shape):
        out.append(index % n)
        index //= n
    return list(reversed(out))


def comparison_backend(torch_rows):
    """The PyTorch output ours is compared with: the first ok one in the order flash, cudnn,
    efficient, math. torch_rows maps variant names (sdpa_flash, ...) to rows."""
    for b in BACKENDS:
        row = torch_rows.get("sdpa_" + b)
        if row is not None and row["status"] == "ok":
            return "sdpa_" + b
    return None


def stage_command(exe, dtype_name, causal, load_dir, save_dir, json_path, reps, warmup, variant=None, extra=()):
    """The command line of one stage run on one case (the shape comes from the files)."""
    cmd = [exe, "--dtype", dtype_name, "--causal" if causal else "--causal=false", "--load", load_dir,
           "--save", save_dir, "--json", json_path, "--reps", str(reps), "--warmup", str(warmup)]
    if variant:
        cmd += ["--variant", variant]
    return cmd + list(extra)


def case_key(row):
    return tuple(row.get(k) for k in CASE_KEY)


def merge_stage_rows(out_rows, stage_doc, seen, variant=None):
    """Appends the rows of a stage's results document to out_rows unchanged, except that a row of a
    case already merged (seen: case keys) is dropped, e.g. the previous stage's comparison row that
    every run of the stage writes again. Returns the row whose output the stage's --save wrote: its
    first ok row of its own stage (of `variant` when given), or None when none ran."""
    own_stage = stage_doc.get("stage")
    saved = None
    for row in stage_doc.get("results", []):
        if not isinstance(row, dict):
            continue
        mine = row.get("stage") == own_stage and (variant is None or row.get("variant") == variant)
        if saved is None and mine and row.get("status") == "ok":
            saved = row
        k = case_key(row)
        if k in seen and row is not saved:
            continue
        seen.add(k)
        out_rows.append(row)
    return saved


def finite_or_none(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def json_safe(obj):
    """NaN and Inf as null, as the C++ writer writes them (JSON has neither)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return finite_or_none(obj)


def write_results(path, doc):
    """One row per line, as the stages write them (diffs of committed files stay readable); a list in
    the header one item per line."""
    parts = []
    for k, v in doc.items():
        if k == "results":
            continue
        if isinstance(v, list) and v:
            parts.append(" %s: [\n%s\n ]" % (json.dumps(k), ",\n".join("  " + json.dumps(json_safe(x)) for x in v)))
        else:
            parts.append(" %s: %s" % (json.dumps(k), json.dumps(json_safe(v))))
    rows = doc["results"]
    # Written beside, then renamed: a run stopped while writing leaves the previous whole file.
    with open(path + ".partial", "w") as f:
        f.write("{\n" + ",\n".join(parts) + ',\n "results": [\n' +
                ",\n".join("  " + json.dumps(json_safe(r)) for r in rows) + "\n ]\n}\n")
    os.replace(path + ".partial", path)


def ratio_text(row, anchors):
    """'312 TFLOP/s: 1.05x sdpa_flash (297), 0.80x sdpa_cudnn (390)' for a stage row, against the
    anchor rows of its case (variant -> row)."""
    if row.get("status") != "ok" or not row.get("tflops"):
        return "%s" % row.get("status")
    parts = ["%.4g TFLOP/s" % row["tflops"]]
    for name in ("sdpa_flash", "sdpa_cudnn"):
        a = anchors.get(name)
        if a is not None and a.get("status") == "ok" and a.get("tflops"):
            parts.append("%.2fx %s (%.4g)" % (row["tflops"] / a["tflops"], name, a["tflops"]))
        else:
            parts.append("%s: %s" % (name, a.get("status") if a else "not run"))
    return ", ".join(parts)


def case_name(dtype_name, d, batch, heads, n, causal):
    return "%s D=%d B=%d H=%d N=%d%s" % (dtype_name, d, batch, heads, n, " causal" if causal else "")


# ---- the run ------------------------------------------------------------------------------------

class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints its usage too; the course's tools print one line
        raise UsageError(message + " (see --help)")


def parse_args(argv):
    ap = OneLineParser(prog=PROG, description="PyTorch's SDPA backends as 'anchor' rows of a results file, and "
                       "stage executables run beside them on the same inputs, their outputs checked against "
                       "PyTorch's (the file's docstring says it all, with the H100 command of issue 11).",
                       epilog="exit codes: 0 ok, 1 a stage run or an output check failed, 2 bad usage, "
                       "no PyTorch or no CUDA device")
    ap.add_argument("--json", required=True, help="the results file to write")
    ap.add_argument("--dtype", default="bfloat16,float16", help="a list of bfloat16, float16, float32")
    ap.add_argument("--dim", default="64,128", help="head dims D, a list")
    ap.add_argument("--causal", default="both", choices=("both", "on", "off"))
    ap.add_argument("--pass", dest="passes", default="fwd,bwd", help="fwd, bwd or both (--stage-exe: fwd)")
    ap.add_argument("--seq", default=None, help="N, a list (default %s; --quick %s)" % (DEFAULTS["seq"], QUICK["seq"]))
    ap.add_argument("--tokens", default=None, help="B·N, the batch follows N (default 16k; --quick 2k)")
    ap.add_argument("--hidden", type=int, default=2048, help="H·D, the heads follow D")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="SDPA backends, a list")
    ap.add_argument("--reps", type=int, default=None, help="timed runs (default 20; --quick 3); the stage's too")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 5; --quick 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of Q, K, V (and dO)")
    ap.add_argument("--commit", default="", help="the commit to record (default: git rev-parse HEAD)")
    ap.add_argument("--quick", action="store_true", help="a smoke test: " + ", ".join(
        "--%s %s" % (k, v) for k, v in QUICK.items()))
    ap.add_argument("--stage-exe", action="append", default=[], metavar="EXE",
                    help="a stage executable to run on the same inputs (repeatable, or a comma list)")
    ap.add_argument("--stage-variants", default="", metavar="V1,V2",
                    help="run each stage once per variant (--variant V); default: one run, its own choice")
    ap.add_argument("--stage-args", default="", metavar="ARGS",
                    help="more arguments for every stage run, one string: --stage-args=\"--no-verify\"")
    ap.add_argument("--stage-timeout", type=float, default=600.0, help="seconds one stage run may take")
    ap.add_argument("--ref-dtype", default="float64", choices=("float64", "float32"),
                    help="the reference's precision (default float64)")
    ap.add_argument("--keep", default="", metavar="DIR",
                    help="keep each case's .npy files, the stage's results and its output under DIR")
    args = ap.parse_args(argv)
    base = QUICK if args.quick else DEFAULTS
    for k in ("seq", "tokens", "reps", "warmup"):
        if getattr(args, k) is None:
            setattr(args, k, base[k])
    return args


def check_args(args):
    wanted = [b for b in args.backends.split(",") if b]
    for b in wanted:
        if b not in BACKENDS:
            raise UsageError("unknown backend %r (flash, cudnn, efficient, math)" % b)
    dtypes = [d for d in args.dtype.split(",") if d]
    for d in dtypes:
        if d not in UNIT_ROUNDOFF:
            raise UsageError("unknown dtype %r (float32, float16, bfloat16)" % d)
    passes = [p for p in args.passes.split(",") if p]
    for p in passes:
        if p not in ("fwd", "bwd"):
            raise UsageError("unknown pass %r (fwd, bwd)" % p)
    if not dtypes or not passes:
        raise UsageError("--dtype and --pass need at least one value")
    seqs, tokens, dims = sizes(args.seq), sizes(args.tokens)[0], sizes(args.dim)
    if args.reps < 1 or args.warmup < 0:
        raise UsageError("--reps must be at least 1 and --warmup at least 0")
    for d in dims:
        if args.hidden % d:
            raise UsageError("--hidden %d is not a multiple of D = %d" % (args.hidden, d))
    exes = [e for item in args.stage_exe for e in item.split(",") if e]
    for e in exes:
        if not (os.path.isfile(e) and os.access(e, os.X_OK)):
            raise UsageError("--stage-exe %s: not an executable file (build the stage first)" % e)
    if exes and len(passes) != 1:
        raise UsageError("--stage-exe compares one pass: give --pass fwd (a forward stage) or --pass bwd (a backward one)")
    try:
        extra = shlex.split(args.stage_args)
    except ValueError as e:
        raise UsageError("--stage-args: %s" % e) from None
    variants = [v for v in args.stage_variants.split(",") if v] or [None]
    return wanted, dtypes, passes, seqs, tokens, dims, exes, extra, variants


def main(argv=None):
    try:
        args = parse_args(argv)
        wanted, dtype_names, passes, seqs, tokens, dims, exes, extra, variants = check_args(args)
    except UsageError as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 2
    found = torch_on_gpu(PROG)
    if found is None:
        return 2
    torch, sdpa_kernel, backend_of = found
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}

    commit = args.commit
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    prop = torch.cuda.get_device_properties(0)
    device = {"name": prop.name, "cuda_runtime": torch.version.cuda or "", "cuda_driver": "",
              "compute_capability": "%d.%d" % (prop.major, prop.minor), "sm_count": str(prop.multi_processor_count),
              "memory_bytes": str(prop.total_memory), "torch": torch.__version__,
              "cudnn": str(torch.backends.cudnn.version())}
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    rows, stage_runs, summary = [], [], []
    seen = set()
    failures = 0
    causal_values = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
    for dtype_name in dtype_names:
        dtype = dtypes[dtype_name]
        for d in dims:
            heads = args.hidden // d
            for n in seqs:
                batch = max(1, tokens // n)
                for causal in causal_values:
                    name = case_name(dtype_name, d, batch, heads, n, causal)
                    try:
                        inputs = make_inputs(torch, (batch, heads, n, d), dtype, args.seed, "bwd" in passes)
                    except torch.cuda.OutOfMemoryError as e:
                        print("%s: the inputs do not fit (%s)" % (name, str(e).split("\n")[0][:120]), flush=True)
                        inputs = None
                    for pass_name in passes:
                        compare = bool(exes) and inputs is not None
                        ref = None
                        if compare and pass_name == "fwd":
                            ref = reference_attention(torch, *inputs[:3], causal, 1.0 / math.sqrt(d),
                                                      dtypes_of(torch)[args.ref_dtype])
                        elif compare:
                            ref = reference_gradients(torch, *inputs, causal, 1.0 / math.sqrt(d),
                                                      dtypes_of(torch)[args.ref_dtype])
                        torch_rows, torch_out = {}, {}
                        for b in wanted:
                            row, out = measure(torch, sdpa_kernel, backend_of[b], b, pass_name, inputs, batch,
                                               heads, n, d, dtype, dtype_name, causal, args.reps, args.warmup,
                                               keep_output=compare)
                            row.update({"device": prop.name, "cuda_runtime": device["cuda_runtime"],
                                        "cuda_driver": "", "git_commit": commit})
                            rows.append(row)
                            seen.add(case_key(row))
                            torch_rows[row["variant"]] = row
                            if out is not None:
                                torch_out[row["variant"]] = out
                            print("%-14s %s %-8s D=%-3d B=%-2d H=%-2d N=%-5d %-6s %-7s %s" % (
                                row["variant"], pass_name, dtype_name, d, batch, heads, n,
                                "causal" if causal else "", row["status"],
                                "%.3f ms %.1f TFLOP/s" % (row["median_ms"], row["tflops"]) if row["status"] == "ok"
                                else row["note"][:80]), flush=True)
                        if exes and inputs is None:
                            failures += 1
                            summary.append("%s: FAILED: the inputs do not fit, no stage ran" % name)
                        if not compare:
                            continue
                        lse_torch = flash_lse(torch, *inputs[:3], causal, 1.0 / math.sqrt(d)) \
                            if torch_rows.get("sdpa_flash", {}).get("status") == "ok" and pass_name == "fwd" else None
                        torch.cuda.empty_cache()  # the stage gets the GPU's memory
                        for exe in exes:
                            for variant in variants:
                                result = run_stage_case(torch, args, exe, variant, extra, inputs, dtype_name, causal,
                                                        name, ref, torch_rows, torch_out, lse_torch, rows, seen)
                                stage_runs.append(result["run"])
                                if result["device"]:
                                    for k, v in result["device"].items():
                                        if not device.get(k):
                                            device[k] = v
                                failures += not result["ok"]
                                summary.extend(result["summary"])
                        del ref, torch_out, lse_torch
                    del inputs
                    torch.cuda.empty_cache()

    doc = {"schema": "flash-course-results/2", "stage": "anchor", "command": " ".join(sys.argv),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "git_commit": commit, "device": device}
    if exes:
        doc["stage_runs"] = stage_runs
    doc["results"] = rows
    write_results(args.json, doc)
    if summary:
        print("\n== ours against PyTorch (TFLOP/s; vs_pytorch: the output check)")
        for line in summary:
            print("  " + line)
    print("%s: %d rows written to %s" % (PROG, len(rows), args.json))
    if failures:
        print("%s: FAIL: %d stage run(s) failed or disagreed with PyTorch" % (PROG, failures))
        return 1
    return 0


def torch_on_gpu(prog):
    """(torch, sdpa_kernel, the SDPA backend of each name) when PyTorch and a CUDA device are here;
    otherwise None, after printing why as one line (compare_decode.py uses it too)."""
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print("%s: error: needs PyTorch (%s)" % (prog, e), file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print("%s: error: no CUDA device" % prog, file=sys.stderr)
        return None
    return torch, sdpa_kernel, {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def dtypes_of(torch):
    return {"float64": torch.float64, "float32": torch.float32}


def make_inputs(torch, shape, dtype, seed, with_do):
    """Q, K, V (and dO) of one case, drawn in that order from one seeded generator on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    d_o = torch.randn(shape, device="cuda", dtype=dtype, generator=gen) if with_do else None
    return q, k, v, d_o


def measure(torch, sdpa_kernel, backend, name, pass_name, inputs, batch, heads, n, d, dtype, dtype_name, causal,
            reps, warmup, keep_output=False):
    """One backend on one case: its row, and (keep_output, forward, ok) its output O."""
    flops_fwd = 4.0 * batch * heads * d * visible_pairs(n, n, causal)
    flops = flops_fwd * (2.5 if pass_name == "bwd" else 1.0)
    row = {"stage": "anchor", "variant": "sdpa_" + name, "pass": pass_name, "batch": batch, "heads": heads,
           "heads_kv": heads, "seq_q": n, "seq_k": n, "dim": d, "dtype": dtype_name, "causal": causal,
           "scale": 1.0 / math.sqrt(d), "status": "ok", "note": "", "median_ms": None, "min_ms": None,
           "max_ms": None, "reps": 0, "tflops": None, "gbps": None, "flops": flops, "peak_bytes": None,
           "extra_bytes": None, "driver_bytes": None, "reference": "", "verified": False,
           "verification_ok": None, "verification": ""}
    if inputs is None:
        row.update(status="oom", note="the inputs do not fit")
        return row, None
    q0, k0, v0, d_o = inputs
    element = q0.element_size()
    numel = q0.numel()
    inputs_bytes = (3 + (pass_name == "bwd")) * numel * element  # Q K V (+ dO), allocated before the base
    tensors = 4 * numel * element * (2 if pass_name == "bwd" else 1)  # Q K V O (+ dO dQ dK dV)
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = None
    try:
        bwd = pass_name == "bwd"
        # Leaves sharing the inputs' storage, so that the backward has gradients to make.
        q, k, v = (t.detach().requires_grad_(bwd) for t in (q0, k0, v0))
        with sdpa_kernel(backend):
            def forward():
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

            if not bwd:
                call = forward
                call()
            else:
                o = forward()

                def call():
                    for t in (q, k, v):
                        t.grad = None
                    o.backward(d_o, retain_graph=True)
                call()
            times = []
            for i in range(warmup + reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                end.synchronize()
                if i >= warmup:
                    times.append(start.elapsed_time(end))
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base + inputs_bytes
            if keep_output and not bwd:
                with torch.no_grad():
                    out = forward()  # untimed, after the memory was read
            elif keep_output:  # untimed: O and the gradients, once more
                for t in (q, k, v):
                    t.grad = None
                o.backward(d_o, retain_graph=True)
                out = (o.detach().clone(), q.grad.clone(), k.grad.clone(), v.grad.clone())
        if bwd:
            del o
            for t in (q, k, v):
                t.grad = None
    except torch.cuda.OutOfMemoryError as e:
        row.update(status="oom", note=str(e).split("\n")[0][:200])
        return row, None
    except RuntimeError as e:  # a backend that does not take this case says so here
        row.update(status="skipped", note=str(e).split("\n")[0][:200])
        return row, None
    median = statistics.median(times)
    # The minimum bytes, as Problem::bytes_min: fwd reads Q, K, V and writes O, LSE; bwd reads Q, K, V, O,
    # dO, LSE and writes dQ, dK, dV (LSE in float32).
    lse = batch * heads * n * 4
    io = (4 if pass_name == "fwd" else 8) * numel * element + lse
    row.update(median_ms=median, min_ms=min(times), max_ms=max(times), reps=len(times),
               tflops=flops / (median * 1e-3) / 1e12, gbps=io / (median * 1e-3) / 1e9, peak_bytes=int(peak),
               extra_bytes=int(max(0, peak - tensors)))
    return row, out


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


def tensor_bytes(t):
    """The raw bytes of a tensor (copied to the host, contiguous), without NumPy."""
    t = t.detach().contiguous().cpu()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def save_inputs(torch, folder, inputs, dtype_name):
    descr = npy_descr(dtype_name)
    for name, t in zip(("q", "k", "v", "do"), inputs):
        if t is None:  # no dO: a forward case
            continue
        # bfloat16 -> float32 is exact: the file holds the bf16 values, which the stage's
        # --dtype bfloat16 rounds back to themselves.
        t = t.float() if descr == "<f4" else t.half()
        write_npy(os.path.join(folder, name + ".npy"), descr, tuple(t.shape), tensor_bytes(t))


def load_output(torch, path, shape):
    descr, file_shape, body = read_npy(path)
    if tuple(file_shape) != tuple(shape):
        raise ValueError("%s has shape %s, expected %s" % (os.path.basename(path), tuple(file_shape), tuple(shape)))
    dtype = {"<f2": torch.float16, "<f4": torch.float32, "<f8": torch.float64}[descr]
    return torch.frombuffer(bytearray(body), dtype=dtype).reshape(shape)


def judge(torch, got, ref, plain, u):
    """The rule against ref, with e = max|plain - ref| (plain None: e = 0). On the GPU, in float64."""
    ref = ref.to(torch.float64)
    got = got.to(device=ref.device, dtype=torch.float64)
    e = 0.0
    if plain is not None:
        e = compare_arrays(torch, plain.to(device=ref.device, dtype=torch.float64), ref, 0.0, 0.0)["max_abs"]
    atol, rtol = tolerance(e, max_finite_abs(torch, ref), u)
    res = compare_arrays(torch, got, ref, atol, rtol)
    res.update(plain_error=e, atol=atol, rtol=rtol)
    return res


def run_stage_case(torch, args, exe, variant, extra, inputs, dtype_name, causal, name, ref, torch_rows, torch_out,
                   lse_torch, rows, seen):
    """Runs one stage executable on one case, merges its rows, and puts the comparison on its row."""
    label = os.path.basename(exe) + (" --variant " + variant if variant else "")
    result = {"ok": False, "summary": [], "device": None,
              "run": {"exe": exe, "variant": variant or "", "case": name, "command": "", "exit_code": None}}
    folder = tempfile.mkdtemp(prefix="compare_pytorch_")
    try:
        in_dir, out_dir = os.path.join(folder, "in"), os.path.join(folder, "out")
        os.makedirs(in_dir)
        save_inputs(torch, in_dir, inputs, dtype_name)
        json_path = os.path.join(folder, "stage.json")
        cmd = stage_command(exe, dtype_name, causal, in_dir, out_dir, json_path, args.reps, args.warmup, variant,
                            extra)
        result["run"]["command"] = " ".join(shlex.quote(c) for c in cmd)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.stage_timeout)
            code, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            partial = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            code, output = None, "%s\ntimed out after %g s" % (partial, args.stage_timeout)
        result["run"]["exit_code"] = code
        if args.keep:
            keep = os.path.join(args.keep, "%s%s_%s" % (os.path.basename(exe), "_" + variant if variant else "",
                                                       name.replace(" ", "_").replace("=", "")))
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(folder, keep)
            with open(os.path.join(keep, "stage_output.txt"), "w") as f:
                f.write(result["run"]["command"] + "\n\n" + output)
        verdict = [ln for ln in output.splitlines() if ln.startswith(("PASS:", "FAIL:"))]
        try:
            with open(json_path) as f:
                stage_doc = json.load(f)
        except (OSError, ValueError) as e:
            print("%s %s: exit %s, no results file (%s); its output ends:\n%s" % (
                label, name, code, e.__class__.__name__, tail(output)), flush=True)
            result["summary"].append("%s %s: FAILED (exit %s, no results)" % (label, name, code))
            return result
        result["device"] = stage_doc.get("device") if isinstance(stage_doc.get("device"), dict) else None
        saved = merge_stage_rows(rows, stage_doc, seen, variant)
        if code != 0:
            print("%s %s: exit %s; its output ends:\n%s" % (label, name, code, tail(output)), flush=True)
        if saved is None:
            print("%s %s: no row of stage %s ran ok" % (label, name, stage_doc.get("stage")), flush=True)
            result["summary"].append("%s %s: FAILED (exit %s, nothing ran)" % (label, name, code))
            return result
        try:
            comparison = compare_with_torch(torch, out_dir, inputs, dtype_name, ref, torch_rows, torch_out, lse_torch,
                                            args.ref_dtype)
        except (OSError, ValueError) as e:
            comparison = {"backend": None, "ok": False, "error": str(e)[:200]}
        saved["vs_pytorch"] = json_safe(comparison)
        ratios = ratio_text(saved, torch_rows)
        line = "%s %s %s: %s; vs %s: %s%s" % (saved["stage"], saved["variant"], name, ratios,
                                               comparison.get("backend") or "reference only",
                                               verdict_text(comparison),
                                               "" if code == 0 else "; FAILED: the stage exited %s" % code)
        print(line + ("  [%s]" % verdict[-1] if verdict else ""), flush=True)
        result["summary"].append(line)
        result["ok"] = code == 0 and comparison["ok"]
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def compare_with_torch(torch, out_dir, inputs, dtype_name, ref, torch_rows, torch_out, lse_torch, ref_dtype):
    """The vs_pytorch object of a stage row: its O (a forward) or its dQ, dK, dV (a backward) against
    PyTorch's and against the reference."""
    if len(ref) == 5:
        return compare_gradients_with_torch(torch, out_dir, inputs, dtype_name, ref, torch_rows, torch_out, ref_dtype)
    q = inputs[0]
    shape = tuple(q.shape)
    o = load_output(torch, os.path.join(out_dir, "o.npy"), shape).to(q.device)
    lse = load_output(torch, os.path.join(out_dir, "lse.npy"), shape[:3]).to(q.device)
    ref_o, ref_lse = ref
    backend = comparison_backend(torch_rows)
    theirs = torch_out.get(backend) if backend else None
    u = UNIT_ROUNDOFF[dtype_name]
    res = judge(torch, o, ref_o, theirs, u)
    out = {"backend": backend, "reference": "%s (all rows)" % ref_dtype}
    if theirs is not None:
        vs = compare_arrays(torch, o.to(torch.float64), theirs.to(torch.float64), 0.0, 0.0)
        out.update(max_abs=vs["max_abs"], rel_frobenius=vs["rel_frobenius"])
    else:
        out.update(max_abs=None, rel_frobenius=None)
    out.update(max_abs_ref=res["max_abs"], torch_max_abs_ref=res["plain_error"] if theirs is not None else None,
               rel_frobenius_ref=res["rel_frobenius"], atol=res["atol"], rtol=res["rtol"], bad=res["bad"],
               first_bad=unravel(res["first_bad"], shape) if res["first_bad"] is not None else None)
    # Each backend's own error against the reference: how far apart the PyTorch outputs are.
    out["torch_errors"] = {k: compare_arrays(torch, t.to(torch.float64), ref_o.to(torch.float64), 0.0, 0.0)["max_abs"]
                           for k, t in torch_out.items()}
    lres = judge(torch, lse, ref_lse, lse_torch, UNIT_ROUNDOFF["float32"])
    out.update(lse_max_abs_ref=lres["max_abs"],
               lse_torch_max_abs_ref=lres["plain_error"] if lse_torch is not None else None,
               lse_ok=(lres["bad"] == 0) if lse_torch is not None else None)
    out["ok"] = res["bad"] == 0 and out["lse_ok"] is not False
    return out


def compare_gradients_with_torch(torch, out_dir, inputs, dtype_name, ref, torch_rows, torch_out, ref_dtype):
    """A backward stage's dQ, dK, dV against the reference gradients, with the rule of the forward:
    e = max|torch − ref| of the first PyTorch backend that ran (its gradients), per tensor."""
    q = inputs[0]
    shape, shape_k = tuple(q.shape), tuple(inputs[1].shape)
    backend = comparison_backend(torch_rows)
    theirs = torch_out.get(backend) if backend else None
    u = UNIT_ROUNDOFF[dtype_name]
    out = {"backend": backend, "reference": "%s autograd (all rows)" % ref_dtype, "ok": True, "gradients": {}}
    worst = None
    for i, name in ((2, "dq"), (3, "dk"), (4, "dv")):
        got = load_output(torch, os.path.join(out_dir, name + ".npy"), shape if name == "dq" else shape_k).to(q.device)
        res = judge(torch, got, ref[i], theirs[i - 1] if theirs is not None else None, u)
        g = {"max_abs_ref": res["max_abs"], "torch_max_abs_ref": res["plain_error"] if theirs is not None else None,
             "rel_frobenius_ref": res["rel_frobenius"], "atol": res["atol"], "bad": res["bad"],
             "first_bad": unravel(res["first_bad"], tuple(got.shape)) if res["first_bad"] is not None else None}
        if theirs is not None:
            g["max_abs"] = compare_arrays(torch, got.to(torch.float64), theirs[i - 1].to(torch.float64), 0.0, 0.0)["max_abs"]
        out["gradients"][name] = g
        out["ok"] = out["ok"] and res["bad"] == 0
        if worst is None or res["bad"] > worst[1]["bad"] or (res["bad"] == worst[1]["bad"] and res["max_abs"] / max(
                res["atol"], 1e-30) > worst[1]["max_abs_ref"] / max(worst[1]["atol"], 1e-30)):
            worst = (name, g)
    # The summary fields of the forward's object, from the worst gradient (verdict_text reads them).
    name, g = worst
    out.update(worst=name, max_abs_ref=g["max_abs_ref"], atol=g["atol"], bad=g["bad"], first_bad=g["first_bad"],
               max_abs=g.get("max_abs"), lse_ok=None)
    return out


def verdict_text(c):
    if c.get("error"):
        return "FAILED (%s)" % c["error"]
    text = "max|ours-ref| %.3g <= bound %.3g" % (c["max_abs_ref"], c["atol"]) if c["bad"] == 0 else \
        "%d elements over the bound (max|ours-ref| %.3g, atol %.3g, first at %s)" % (
            c["bad"], c["max_abs_ref"], c["atol"], c["first_bad"])
    if c.get("max_abs") is not None:
        text += ", max|ours-torch| %.3g" % c["max_abs"]
    if c.get("lse_ok") is False:
        text += ", LSE off by %.3g" % c["lse_max_abs_ref"]
    return ("ok: " if c["ok"] else "FAILED: ") + text


def tail(text, lines=30):
    return "\n".join("    " + ln for ln in (text or "").splitlines()[-lines:])


if __name__ == "__main__":
    sys.exit(main())
