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
    docs/11_decoding.md), so each anchor is timed again in
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
rule (flashcourse/tolerance.py), else the run fails.
The results file is written after every case (batch × cache length), so that a run cut short by a
time limit keeps the cases it finished; the last write is the whole run.
Exit: 0 when every stage run exited 0 and every cross-check passed; 1 otherwise; 2 bad usage.
"""
import argparse
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import anchors, cli, decoding  # noqa: E402
from flashcourse.npy import load_output, save_inputs  # noqa: E402
from flashcourse.reference import judge, reference_attention  # noqa: E402
from flashcourse.results import json_safe, new_document, write_results  # noqa: E402

PROG = "compare_decode.py"
STAGE = "11"


def parse_args(argv):
    ap = cli.grouped_stage_parser(PROG, "decoding: SDPA with enable_gqa=True and the copy bandwidth beside stage 11",
                                  STAGE, backends="flash,cudnn,efficient", reps=50, warmup=5)
    ap.add_argument("--batch", default="1,16", type=cli.sizes)
    ap.add_argument("--seq-k", default="8k,16k,32k,128k", type=cli.sizes)
    ap.add_argument("--seq-q", default=1, type=int)
    ap.add_argument("--check-seq-k", default="8k", type=cli.sizes)
    ap.add_argument("--anchor-processes", default=3, type=int)
    ap.add_argument("--anchors-only", action="store_true", help=argparse.SUPPRESS)  # one case's anchors, one line
    args = cli.parse_grouped(ap, argv)
    if args.anchor_processes < 1:
        raise cli.UsageError("--anchor-processes must be at least 1")
    if args.anchors_only and (len(args.batch) != 1 or len(args.seq_k) != 1):
        raise cli.UsageError("--anchors-only times one case: one --batch and one --seq-k")
    return args


def time_anchors(gpu, args, b, nk, q, k, v):
    """Each wanted backend on (q, k, v), timed in this process: its rows (without rates) and outputs."""
    torch = gpu.torch
    rows, outputs = [], {}
    for backend in gpu.wanted:
        row = decoding.anchor_row("sdpa_" + backend, b, args, nk)
        row.update(git_commit=gpu.commit, device=gpu.prop.name)
        try:
            with gpu.sdpa_kernel(gpu.backend_of[backend]):
                call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
                outputs[backend] = call()
                med, lo, hi = anchors.timed(torch, call, args.reps, args.warmup, gpu.flush)
            row.update(median_ms=med, min_ms=lo, max_ms=hi, reps=args.reps)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            row.update(status="skipped", note=str(e).split("\n")[0][:200])
        rows.append(row)
    return rows, outputs


def anchors_only(gpu, args):
    """--anchors-only: the one case's anchors timed in this (fresh) process, printed as one line."""
    q, k, v = decoding.case_inputs(gpu, args, args.batch[0], args.seq_k[0])
    rows, _ = time_anchors(gpu, args, args.batch[0], args.seq_k[0], q, k, v)
    print(anchors.anchors_line(rows), flush=True)
    return 0


def anchors_elsewhere(args, b, nk, run=cli.run_command):
    """This script's case (batch b, nk keys) timed in the other processes (anchors.anchors_in_processes)."""
    return anchors.anchors_in_processes(args, os.path.abspath(__file__), PROG, [
        "--batch", str(b), "--seq-k", str(nk), "--seq-q", str(args.seq_q), "--heads", str(args.heads),
        "--heads-kv", str(args.heads_kv), "--dim", str(args.dim), "--dtype", args.dtype], run)


def main(argv=None):
    args, gpu = cli.start(PROG, parse_args, argv, anchors.gpu_setup)
    if args is None:
        return gpu
    if args.anchors_only:
        return anchors_only(gpu, args)
    torch, device, commit, flush = gpu.torch, gpu.device, gpu.commit, gpu.flush
    rows, summary, failures = [], [], 0

    def note(line):  # printed as it comes (a run cut short still shows it) and again at the end
        summary.append(line)
        print(line, flush=True)

    copy_row = anchors.copy_bandwidth(torch, args.reps, args.warmup, flush)
    copy_gbps = copy_row["gbps"]
    print("copy bandwidth: %.0f GB/s (1 GiB, read + write)" % copy_gbps, flush=True)

    def write():  # the cases so far, one valid results file
        write_results(args.json, new_document("anchor", " ".join(sys.argv), commit, device, copy_bandwidth=copy_row),
                      rows)

    for b in args.batch:
        for nk in args.seq_k:
            name = "B=%d Hq=%d Hkv=%d Nq=%d Nk=%d D=%d %s" % (b, args.heads, args.heads_kv, args.seq_q, nk, args.dim,
                                                           args.dtype)
            q, k, v = decoding.case_inputs(gpu, args, b, nk)
            anchor_rows, outputs = time_anchors(gpu, args, b, nk, q, k, v)
            runs = anchors_elsewhere(args, b, nk) if args.anchor_processes > 1 else []
            best = None
            for row in anchor_rows:
                if row["status"] == "ok":
                    if args.anchor_processes > 1:
                        anchors.fastest_process(row, runs)
                    row["tflops"] = decoding.decode_tflops(row)
                decoding.add_rates(row, copy_gbps)
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
                    save_inputs(torch, in_dir, (q, k, v, None), args.dtype)
                    cmd += ["--load", in_dir, "--save", out_dir]
                else:
                    cmd += ["--batch", str(b), "--heads", str(args.heads), "--heads-kv", str(args.heads_kv),
                            "--seq-q", str(args.seq_q), "--seq-k", str(nk), "--dim", str(args.dim)]
                torch.cuda.empty_cache()
                code, output, stage_rows = cli.stage_results(cmd, json_path, args.stage_timeout)
                if code != 0 or not stage_rows:
                    failures += 1
                    note("%s: stage FAILED (exit %s)\n%s" % (name, code, cli.tail(output)))
                for row in stage_rows:
                    decoding.add_rates(row, copy_gbps)
                    rows.append(row)
                    if row.get("status") == "ok" and row.get("stage") == STAGE and best:
                        row["vs_best_sdpa"] = best["median_ms"] / row["median_ms"]
                        row["best_sdpa"] = best["variant"]
                        note("%s: %s %-9s %.4f ms, %.0f GB/s of cache (%.0f %% of copy), %.2fx %s" % (
                            name, STAGE, row["variant"], row["median_ms"], row["cache_gbps"], 100 * row["of_copy"],
                            row["vs_best_sdpa"], best["variant"]))
                if check and code == 0:
                    ours = load_output(torch, os.path.join(out_dir, "o.npy"), tuple(q.shape)).cuda()
                    g = args.heads // args.heads_kv
                    ref, _ = reference_attention(torch, q, k.repeat_interleave(g, dim=1),
                                                 v.repeat_interleave(g, dim=1), False, 1.0 / math.sqrt(args.dim),
                                                 torch.float64)
                    theirs = next(iter(outputs.values()))
                    verdict = judge(torch, ours, ref, theirs, args.dtype)
                    ok = verdict["bad"] == 0
                    failures += not ok
                    note("%s: O against float64 (PyTorch's error as the plain one): %s, max abs %.3g "
                         "(allowed %.3g + %.3g·|ref|)" % (name, "ok" if ok else "FAILED", verdict["max_abs"],
                                                         verdict["atol"], verdict["rtol"]))
                    for row in stage_rows:  # the rows it verified (not read_cache: no attention)
                        if row.get("stage") == STAGE and row.get("status") == "ok" and row.get("verified"):
                            row["vs_pytorch"] = json_safe({"ok": ok, "max_abs": verdict["max_abs"],
                                                           "atol": verdict["atol"], "rtol": verdict["rtol"]})
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            q = k = v = outputs = None  # the memory back before the next case
            torch.cuda.empty_cache()
            write()

    write()
    return cli.finish(PROG, "stage %s against the best SDPA backend and the copy bandwidth (%.0f GB/s)" % (STAGE, copy_gbps),
                      summary, rows, args.json, failures, "stage run(s) failed or disagreed with the reference")


if __name__ == "__main__":
    sys.exit(main())
