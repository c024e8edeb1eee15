#!/usr/bin/env python3
"""compare_decode.py — decoding (a few queries against a long K/V cache with grouped heads): PyTorch's
SDPA backends with enable_gqa=True and this GPU's copy bandwidth, measured, as rows of one results
file beside stage 11's executable.

    compare_decode.py --exe build/steps/11_decoding/step11_decoding --json OUT.json
                      [--batch 1,16] [--seq-k 8k,16k,32k,128k] [--seq-q 1] [--heads 32] [--heads-kv 8]
                      [--dim 128] [--dtype bfloat16] [--backends flash,cudnn,efficient]
                      [--reps 50] [--warmup 5] [--seed 0] [--commit SHA] [--check-seq-k 8k]
                      [--anchor-processes 3]

Per case (every batch × every cache length), in one run:
  * the anchors: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True) with one
    backend forced at a time, Q [B, Hq, Nq, D], K, V [B, Hkv, Nk, D], not causal (SDPA's is_causal is
    aligned top-left, the course's bottom-right: with Nq = 1 the course's causal row sees every key,
    SDPA's only the first). Rows "stage": "anchor", "variant": "sdpa_<backend>"; a backend that
    refuses the case is a `skipped` row with its reason. PyTorch's decode times depend on the
    process (cuDNN's at 8k keys took about 22 or about 37 us on one H100, steady within a process:
    docs/results/step11_push_h100/send16_and_anchor_spread.txt), so each anchor is timed again in
    --anchor-processes − 1 fresh processes of this script (--anchors-only, the same inputs) and its
    row keeps the fastest process's median (every process's in "process_medians_ms"; min_ms and
    max_ms over all of them): the comparison is against PyTorch at its best.
  * the stage: EXE --batch B --heads Hq --heads-kv Hkv --seq-q Nq --seq-k Nk --dim D --dtype T
    --reps R --warmup W --json FILE, its rows merged unchanged (it draws and verifies its own inputs:
    float64 on sampled rows and stage 07 on every row, the course's rules). Among them "read_cache":
    not attention but a plain read of the cache (K and V once), timed alike, and not checked.
Times: the stage's harness and this script time alike: before each timed call 2 × L2 bytes are
read (the L2 cache flushed: a cache of 8k keys, 32 MiB, would otherwise be read from L2, not
memory; read, not written, so that no dirty lines are written back inside the timed call), then
CUDA events around the call; the median of --reps after --warmup calls.
Bytes: K and V read once, B·Hkv·Nk·D·2 elements: each row gets "cache_gbps" (those bytes over its
median) and "of_copy" (that rate over the copy bandwidth below).
The copy bandwidth, in the file's header ("copy_bandwidth"): dst.copy_(src) of 1 GiB on the device,
counted as read + write (2 GiB per copy), the median of --reps; the floor of a decoding step's time
is the cache's bytes over it (docs/11_decoding.md, the roofline).
Cross-check: for the cases with Nk = --check-seq-k and B = 1, the stage also runs on PyTorch's inputs
(--load, --save) and its O must match PyTorch's and a float64 reference by the course's tolerance
rule (compare_pytorch.py's), else the run fails.
The results file is written after every case (batch × cache length), so that a run cut short by a
time limit keeps the cases it finished; the last write is the whole run.
Exit: 0 when every stage run exited 0 and every cross-check passed; 1 otherwise; 2 bad usage.
"""
import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_pytorch as cp  # noqa: E402  (the course's results writer, .npy files, tolerance rule)

PROG = "compare_decode.py"


def stage10_parser(prog, description, backends, reps, warmup):
    """The options this script and compare_prefill.py share: stage 11's executable and the results
    file, the heads, D and dtype, PyTorch's backends, the timing, the seed, the commit and the stage's
    time limit (each script adds its shapes)."""
    ap = cp.OneLineParser(prog=prog, description=description + " (the file's docstring says it all)")
    ap.add_argument("--exe", required=True, help="stage 11's executable")
    ap.add_argument("--json", required=True, help="the results file to write")
    ap.add_argument("--heads", default=32, type=int)
    ap.add_argument("--heads-kv", default=8, type=int)
    ap.add_argument("--dim", default=128, type=int)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--backends", default=backends)
    ap.add_argument("--reps", default=reps, type=int)
    ap.add_argument("--warmup", default=warmup, type=int)
    ap.add_argument("--seed", default=0, type=int)
    ap.add_argument("--commit", default="")
    ap.add_argument("--stage-timeout", default=600, type=float)
    return ap


def parsed(ap, argv):
    """ap's arguments, with the grouping of the heads checked (UsageError otherwise)."""
    args = ap.parse_args(argv)
    if args.heads % args.heads_kv:
        raise cp.UsageError("--heads must be a multiple of --heads-kv")
    return args


def parse_args(argv):
    ap = stage10_parser(PROG, "decoding: SDPA with enable_gqa=True and the copy bandwidth beside stage 11",
                        backends="flash,cudnn,efficient", reps=50, warmup=5)
    ap.add_argument("--batch", default="1,16", type=cp.sizes)
    ap.add_argument("--seq-k", default="8k,16k,32k,128k", type=cp.sizes)
    ap.add_argument("--seq-q", default=1, type=int)
    ap.add_argument("--check-seq-k", default="8k", type=cp.sizes)
    ap.add_argument("--anchor-processes", default=3, type=int)
    ap.add_argument("--anchors-only", action="store_true", help=argparse.SUPPRESS)  # one case's anchors, one line
    args = parsed(ap, argv)
    if args.anchor_processes < 1:
        raise cp.UsageError("--anchor-processes must be at least 1")
    if args.anchors_only and (len(args.batch) != 1 or len(args.seq_k) != 1):
        raise cp.UsageError("--anchors-only times one case: one --batch and one --seq-k")
    return args


def timed(torch, call, reps, warmup, flush):
    """Median ms of call(), each timed call after a write of `flush` (the L2 flushed), CUDA events."""
    for _ in range(warmup):
        call()
    times = []
    for i in range(reps):
        flush.sum()  # read through L2: evicts without leaving dirty lines to write back (event_timer.cu)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), max(times)


def base_row(variant, b, args, nk):
    return {"stage": "anchor", "variant": variant, "pass": "fwd", "batch": b, "heads": args.heads,
            "heads_kv": args.heads_kv, "seq_q": args.seq_q, "seq_k": nk, "dim": args.dim, "dtype": args.dtype,
            "causal": False, "scale": 1.0 / math.sqrt(args.dim), "status": "ok", "note": "", "median_ms": None,
            "min_ms": None, "max_ms": None, "reps": 0, "tflops": None, "gbps": None, "verified": False}


def cache_bytes(row):
    return 2.0 * row["batch"] * row["heads_kv"] * row["seq_k"] * row["dim"] * 2  # K and V, 16-bit


def add_rates(row, copy_gbps):
    if row.get("status") == "ok" and row.get("median_ms"):
        row["cache_gbps"] = cache_bytes(row) / (row["median_ms"] * 1e-3) / 1e9
        row["of_copy"] = row["cache_gbps"] / copy_gbps if copy_gbps else None


def run_stage(args, cmd):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.stage_timeout)
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        return None, "timed out after %g s" % args.stage_timeout


def stage_results(args, cmd, json_path):
    """Runs the stage (cmd writes json_path): its exit code, its output and its result rows ([] when
    it wrote none)."""
    code, output = run_stage(args, cmd)
    try:
        with open(json_path) as f:
            rows = json.load(f).get("results", [])
    except (OSError, ValueError):
        rows = []
    return code, output, rows


def copy_bandwidth(torch, args, flush):
    """The copy bandwidth of this GPU now: dst.copy_(src) of 1 GiB timed like the rest, counted as read +
    write (its buffers freed on return)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    med, lo, hi = timed(torch, lambda: dst.copy_(src), args.reps, args.warmup, flush)
    return {"bytes": 2 * src.numel(), "median_ms": med, "min_ms": lo, "max_ms": hi, "reps": args.reps,
            "gbps": 2.0 * src.numel() / (med * 1e-3) / 1e9, "note": "dst.copy_(src) of 1 GiB, read + write"}


def gpu_setup(prog, args):
    """What this script and compare_prefill.py set up alike, or None (after one line on stderr)
    without PyTorch or a GPU: torch, sdpa_kernel, the backends by name, the --backends wanted, the
    dtype, the device's description for the file's header, the commit, and the buffer whose read
    flushes L2 before each timed call."""
    found = cp.torch_on_gpu(prog)
    if found is None:
        return None
    torch, sdpa_kernel, backend_of = found
    prop = torch.cuda.get_device_properties(0)
    l2 = getattr(prop, "L2_cache_size", 50 << 20) or (50 << 20)
    return argparse.Namespace(
        torch=torch, sdpa_kernel=sdpa_kernel, backend_of=backend_of, prop=prop,
        wanted=[b for b in args.backends.split(",") if b],
        dtype={"bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype],
        device={"name": prop.name, "cuda_runtime": torch.version.cuda or "", "sm_count": str(prop.multi_processor_count),
                "memory_bytes": str(prop.total_memory), "torch": torch.__version__,
                "cudnn": str(torch.backends.cudnn.version())},
        commit=args.commit or "unknown", flush=torch.zeros(2 * l2 // 8, dtype=torch.int64, device="cuda"))


def finish(prog, title, summary, rows, path, failures, what_failed):
    """The run's last words: the summary lines under a title, where the rows went, and the exit code
    (1 when anything failed)."""
    print("\n== " + title)
    for line in summary:
        print("  " + line)
    print("%s: %d rows written to %s" % (prog, len(rows), path))
    if failures:
        print("%s: FAIL: %d %s" % (prog, failures, what_failed))
        return 1
    return 0


def case_inputs(gpu, args, b, nk):
    """Q, K, V of one case, drawn from --seed: the same in every process."""
    torch = gpu.torch
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    q = torch.randn((b, args.heads, args.seq_q, args.dim), generator=gen, device="cuda", dtype=gpu.dtype)
    k = torch.randn((b, args.heads_kv, nk, args.dim), generator=gen, device="cuda", dtype=gpu.dtype)
    v = torch.randn((b, args.heads_kv, nk, args.dim), generator=gen, device="cuda", dtype=gpu.dtype)
    return q, k, v


def time_anchors(gpu, args, b, nk, q, k, v):
    """Each wanted backend on (q, k, v), timed in this process: its rows (without rates) and outputs."""
    torch = gpu.torch
    rows, outputs = [], {}
    for backend in gpu.wanted:
        row = base_row("sdpa_" + backend, b, args, nk)
        row.update(git_commit=gpu.commit, device=gpu.prop.name)
        try:
            with gpu.sdpa_kernel(gpu.backend_of[backend]):
                call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
                outputs[backend] = call()
                med, lo, hi = timed(torch, call, args.reps, args.warmup, gpu.flush)
            row.update(median_ms=med, min_ms=lo, max_ms=hi, reps=args.reps)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            row.update(status="skipped", note=str(e).split("\n")[0][:200])
        rows.append(row)
    return rows, outputs


ANCHORS_LINE = "anchors: "


def anchors_only(gpu, args):
    """--anchors-only: the one case's anchors timed in this (fresh) process, printed as one line of JSON:
    {variant: [median, min, max] in ms, or null when the backend refused}."""
    q, k, v = case_inputs(gpu, args, args.batch[0], args.seq_k[0])
    rows, _ = time_anchors(gpu, args, args.batch[0], args.seq_k[0], q, k, v)
    print(ANCHORS_LINE + json.dumps({r["variant"]: [r["median_ms"], r["min_ms"], r["max_ms"]] if r["status"] == "ok"
                                     else None for r in rows}), flush=True)
    return 0


def anchors_in_processes(args, script, prog, case):
    """One case's anchors timed in --anchor-processes − 1 fresh processes of `script` (compare_decode.py,
    compare_decode_stream.py) run with --anchors-only and the case's own arguments `case`: a list of
    their {variant: [median, min, max]} (a process that fails adds nothing, and says so on stderr)."""
    runs = []
    for _ in range(args.anchor_processes - 1):
        cmd = [sys.executable, script, "--anchors-only", "--exe", args.exe, "--json", os.devnull,
               "--backends", args.backends, "--reps", str(args.reps), "--warmup", str(args.warmup),
               "--seed", str(args.seed)] + case
        code, output = run_stage(args, cmd)
        lines = [x for x in output.splitlines() if x.startswith(ANCHORS_LINE)]
        if code != 0 or not lines:
            print("%s: the anchors' process failed (exit %s): %s" % (prog, code, cp.tail(output)), file=sys.stderr)
            continue
        runs.append(json.loads(lines[-1][len(ANCHORS_LINE):]))
    return runs


def anchors_elsewhere(args, b, nk):
    """This script's case (batch b, nk keys) timed in the other processes (anchors_in_processes)."""
    return anchors_in_processes(args, os.path.abspath(__file__), PROG, [
        "--batch", str(b), "--seq-k", str(nk), "--seq-q", str(args.seq_q), "--heads", str(args.heads),
        "--heads-kv", str(args.heads_kv), "--dim", str(args.dim), "--dtype", args.dtype])


def start(prog, parse, argv):
    """What every comparison of stage 11 does first: argv parsed by `parse` and the GPU set up.
    Returns (args, gpu), or (None, 2) after one line on stderr (bad usage, no PyTorch, no GPU)."""
    try:
        args = parse(argv)
    except cp.UsageError as e:
        print("%s: error: %s" % (prog, e), file=sys.stderr)
        return None, 2
    gpu = gpu_setup(prog, args)
    return (args, gpu) if gpu is not None else (None, 2)


def fastest_process(row, runs):
    """row (timed here) takes the fastest median of this process and `runs`; all of them are kept."""
    times = [[row["median_ms"], row["min_ms"], row["max_ms"]]] + [r[row["variant"]] for r in runs if r.get(row["variant"])]
    row["process_medians_ms"] = [t[0] for t in times]
    row.update(median_ms=min(t[0] for t in times), min_ms=min(t[1] for t in times), max_ms=max(t[2] for t in times))
    row["note"] = ("the fastest of %d processes' medians" % len(times) if len(times) > 1
                   else "timed in one process: the others failed")


def main(argv=None):
    args, gpu = start(PROG, parse_args, argv)
    if args is None:
        return gpu
    if args.anchors_only:
        return anchors_only(gpu, args)
    torch, device, commit, flush = gpu.torch, gpu.device, gpu.commit, gpu.flush
    rows, summary, failures = [], [], 0

    def note(line):  # printed as it comes (a run cut short still shows it) and again at the end
        summary.append(line)
        print(line, flush=True)

    copy_row = copy_bandwidth(torch, args, flush)
    copy_gbps = copy_row["gbps"]
    print("copy bandwidth: %.0f GB/s (1 GiB, read + write)" % copy_gbps, flush=True)

    def write():  # the cases so far, one valid results file
        doc = {"schema": "flash-course-results/2", "stage": "anchor", "command": " ".join(sys.argv),
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "git_commit": commit, "device": device, "copy_bandwidth": copy_row, "results": rows}
        cp.write_results(args.json, doc)

    for b in args.batch:
        for nk in args.seq_k:
            name = "B=%d Hq=%d Hkv=%d Nq=%d Nk=%d D=%d %s" % (b, args.heads, args.heads_kv, args.seq_q, nk, args.dim,
                                                           args.dtype)
            q, k, v = case_inputs(gpu, args, b, nk)
            anchors, outputs = time_anchors(gpu, args, b, nk, q, k, v)
            runs = anchors_elsewhere(args, b, nk) if args.anchor_processes > 1 else []
            best = None
            for row in anchors:
                if row["status"] == "ok":
                    if args.anchor_processes > 1:
                        fastest_process(row, runs)
                    row["tflops"] = 4.0 * b * args.heads * args.seq_q * nk * args.dim / (row["median_ms"] * 1e-3) / 1e12
                add_rates(row, copy_gbps)
                rows.append(row)
                if row["status"] == "ok" and (best is None or row["median_ms"] < best["median_ms"]):
                    best = row
                if row["status"] == "ok":
                    each = " ".join("%.4f" % t for t in row.get("process_medians_ms", []))
                    said = "%.4f ms, %.0f GB/s of cache (%.0f %% of copy)%s" % (
                        row["median_ms"], row["cache_gbps"], 100 * row["of_copy"], each and "; processes: " + each)
                else:
                    said = row["status"] + " " + row["note"][:100]
                print("%-15s %s: %s" % (row["variant"], name, said), flush=True)

            folder = tempfile.mkdtemp(prefix="compare_decode_")
            try:
                json_path = os.path.join(folder, "stage.json")
                check = b == 1 and nk in args.check_seq_k and outputs
                cmd = [args.exe, "--dtype", args.dtype, "--reps", str(args.reps), "--warmup", str(args.warmup),
                       "--json", json_path]
                if check:  # PyTorch's inputs, and the stage's output kept for the comparison
                    in_dir, out_dir = os.path.join(folder, "in"), os.path.join(folder, "out")
                    os.makedirs(in_dir)
                    cp.save_inputs(torch, in_dir, (q, k, v, None), args.dtype)
                    cmd += ["--load", in_dir, "--save", out_dir]
                else:
                    cmd += ["--batch", str(b), "--heads", str(args.heads), "--heads-kv", str(args.heads_kv),
                            "--seq-q", str(args.seq_q), "--seq-k", str(nk), "--dim", str(args.dim)]
                torch.cuda.empty_cache()
                code, output, stage_rows = stage_results(args, cmd, json_path)
                if code != 0 or not stage_rows:
                    failures += 1
                    note("%s: stage FAILED (exit %s)\n%s" % (name, code, cp.tail(output)))
                for row in stage_rows:
                    add_rates(row, copy_gbps)
                    rows.append(row)
                    if row.get("status") == "ok" and row.get("stage") == "11" and best:
                        row["vs_best_sdpa"] = best["median_ms"] / row["median_ms"]
                        row["best_sdpa"] = best["variant"]
                        note("%s: 10 %-9s %.4f ms, %.0f GB/s of cache (%.0f %% of copy), %.2fx %s" % (
                            name, row["variant"], row["median_ms"], row["cache_gbps"], 100 * row["of_copy"],
                            row["vs_best_sdpa"], best["variant"]))
                if check and code == 0:
                    ours = cp.load_output(torch, os.path.join(out_dir, "o.npy"), tuple(q.shape)).cuda()
                    g = args.heads // args.heads_kv
                    ref, _ = cp.reference_attention(torch, q, k.repeat_interleave(g, dim=1),
                                                    v.repeat_interleave(g, dim=1), False, 1.0 / math.sqrt(args.dim),
                                                    torch.float64)
                    theirs = next(iter(outputs.values()))
                    u = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}[args.dtype]
                    verdict = cp.judge(torch, ours, ref, theirs, u)
                    ok = verdict["bad"] == 0
                    failures += not ok
                    note("%s: O against float64 (PyTorch's error as the plain one): %s, max abs %.3g "
                                   "(allowed %.3g + %.3g·|ref|)" % (name, "ok" if ok else "FAILED", verdict["max_abs"],
                                                                   verdict["atol"], verdict["rtol"]))
                    for row in stage_rows:  # the rows it verified (not read_cache: no attention)
                        if row.get("stage") == "11" and row.get("status") == "ok" and row.get("verified"):
                            row["vs_pytorch"] = cp.json_safe({"ok": ok, "max_abs": verdict["max_abs"],
                                                              "atol": verdict["atol"], "rtol": verdict["rtol"]})
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            q = k = v = outputs = None  # the memory back before the next case
            torch.cuda.empty_cache()
            write()

    write()
    return finish(PROG, "stage 11 against the best SDPA backend and the copy bandwidth (%.0f GB/s)" % copy_gbps, summary,
                  rows, args.json, failures, "stage run(s) failed or disagreed with the reference")


if __name__ == "__main__":
    sys.exit(main())
