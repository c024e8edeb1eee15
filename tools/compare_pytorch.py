#!/usr/bin/env python3
"""compare_pytorch.py — PyTorch's attention backends, measured on this GPU, as rows of a results file;
and a stage executable run beside them on the same inputs, its output checked against theirs.

    compare_pytorch.py --json OUT.json [--dtype bfloat16,float16] [--dim 64,128] [--causal both]
                       [--pass fwd,bwd] [--seq 512,1k,2k,4k,8k,16k] [--tokens 16k] [--hidden 2048]
                       [--backends flash,cudnn,efficient,math,fa4] [--reps 20] [--warmup 5] [--seed 0]
                       [--commit SHA] [--quick]
                       [--stage-exe EXE[,EXE2] ...] [--stage-variants V1,V2] [--stage-args="ARGS"]
                       [--ref-dtype float64|float32] [--keep DIR] [--stage-timeout 600]

The anchors. For each shape, dtype and pass it runs torch.nn.functional.scaled_dot_product_attention
with one backend forced at a time (torch.nn.attention.sdpa_kernel) and writes one row per run in the
course's results format (docs/results_schema.md, `flash-course-results/2`) with "stage": "anchor"
and "variant": "sdpa_flash" | "sdpa_cudnn" | "sdpa_efficient" | "sdpa_math", so that the plot tool
and the chapters read the anchors like any other row, from a file measured in one run. Beside them,
FlashAttention-4 (the flash-attn-4 package, `flash_attn.cute.flash_attn_func`) as "variant": "fa4",
timed the same way on the same inputs in its own layout [B, N, H, D] (made before the timing): where
the package does not import, its rows are `skipped` with the reason.

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

The stage. With --stage-exe (repeatable, or a comma list: stages 07 and 09 forward, 08 backward),
for every case it also
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
     bound its memory; TF32 off). The bound is the course's tolerance rule (docs/tolerance.md,
     flashcourse/tolerance.py) with PyTorch's backend in the place of the plain implementation:
     with e = max|torch − ref| over the finite pairs and
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

The comparison of stage 07 behind chapter 07's figures (12 cases, a few minutes on an H100):
    python3 tools/compare_pytorch.py --json results/compare_07_h100.json \\
        --stage-exe build-gpu/steps/07_tensor_cores/step07_tensor_cores --dtype bfloat16 \\
        --dim 64,128 --causal both --pass fwd --seq 1k,4k,16k --commit SHA
and of stage 08 (chapter 08), the same with --pass bwd and
        --stage-exe build-gpu/steps/08_tensor_core_backward/step08_tensor_core_backward

Exit codes: 0 written and every comparison ok; 1 written, but a stage run failed (its exit code was
not 0, it wrote no results, no row of its own ran) or a comparison failed; 2 bad usage, no PyTorch
or no CUDA device.
"""
import math
import os
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse.anchors import (BACKENDS, FA4, device_header, fa4_attention, make_inputs, measure,  # noqa: E402
                                 torch_on_gpu)
from flashcourse.cli import OneLineParser, UsageError, run_command, sizes, tail  # noqa: E402
from flashcourse.npy import load_output, save_inputs  # noqa: E402
from flashcourse.reference import (dtypes_of, flash_lse, judge, reference_attention,  # noqa: E402
                                   reference_gradients)
from flashcourse.results import (ResultsError, case_key, git_commit, json_safe, merge_stage_rows,  # noqa: E402
                                 new_document, read_results, write_results)
from flashcourse.tolerance import UNIT_ROUNDOFF, compare_arrays, unravel  # noqa: E402

PROG = "compare_pytorch.py"
QUICK = {"seq": "200,1000", "tokens": "2k", "reps": 3, "warmup": 1}
DEFAULTS = {"seq": "512,1k,2k,4k,8k,16k", "tokens": "16k", "reps": 20, "warmup": 5}


# ---- pure Python: the stage's command line, which backend is compared, the printed lines (test_flashcourse.py) ----

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


def ratio_text(row, anchors):
    """'312 TFLOP/s: 1.05x sdpa_flash (297), 0.80x sdpa_cudnn (390)' for a stage row, against the
    anchor rows of its case (variant -> row); and FlashAttention-4's (fa4) where its row exists."""
    if row.get("status") != "ok" or not row.get("tflops"):
        return "%s" % row.get("status")
    parts = ["%.4g TFLOP/s" % row["tflops"]]
    for name in ("sdpa_flash", "sdpa_cudnn", FA4):
        a = anchors.get(name)
        if a is not None and a.get("status") == "ok" and a.get("tflops"):
            parts.append("%.2fx %s (%.4g)" % (row["tflops"] / a["tflops"], name, a["tflops"]))
        elif name != FA4 or a is not None:  # FA4 named only where it was asked for
            parts.append("%s: %s" % (name, a.get("status") if a else "not run"))
    return ", ".join(parts)


def case_name(dtype_name, d, batch, heads, n, causal):
    return "%s D=%d B=%d H=%d N=%d%s" % (dtype_name, d, batch, heads, n, " causal" if causal else "")


# ---- the run ------------------------------------------------------------------------------------

def parse_args(argv):
    ap = OneLineParser(prog=PROG, description="PyTorch's SDPA backends as 'anchor' rows of a results file, and "
                       "stage executables run beside them on the same inputs, their outputs checked against "
                       "PyTorch's (the file's docstring says it all, with the commands behind the chapters).",
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
    ap.add_argument("--backends", default=",".join(BACKENDS + (FA4,)),
                    help="SDPA backends and fa4 (FlashAttention-4, where it imports), a list")
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
        if b not in BACKENDS + (FA4,):
            raise UsageError("unknown backend %r (flash, cudnn, efficient, math, fa4)" % b)
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
    fa4_unavailable = ""
    if FA4 in wanted:
        backend_of[FA4], fa4_unavailable = fa4_attention()
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}

    commit = git_commit(args.commit)
    device = device_header(torch)
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
                                               heads, n, d, dtype_name, causal, args.reps, args.warmup,
                                               keep_output=compare, unavailable=fa4_unavailable)
                            row.update({"device": device["name"], "cuda_runtime": device["cuda_runtime"],
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

    doc = new_document("anchor", " ".join(sys.argv), commit, device)
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
        code, output = run_command(cmd, args.stage_timeout)
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
            stage_doc = read_results(json_path)
        except ResultsError as e:
            print("%s %s: exit %s, no results (%s); its output ends:\n%s" % (
                label, name, code, e, tail(output)), flush=True)
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
    res = judge(torch, o, ref_o, theirs, dtype_name)
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
    lres = judge(torch, lse, ref_lse, lse_torch, "float32")  # LSE: float32's u
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
    out = {"backend": backend, "reference": "%s autograd (all rows)" % ref_dtype, "ok": True, "gradients": {}}
    worst = None
    for i, name in ((2, "dq"), (3, "dk"), (4, "dv")):
        got = load_output(torch, os.path.join(out_dir, name + ".npy"), shape if name == "dq" else shape_k).to(q.device)
        res = judge(torch, got, ref[i], theirs[i - 1] if theirs is not None else None, dtype_name)
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


if __name__ == "__main__":
    sys.exit(main())
