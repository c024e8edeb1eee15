#!/usr/bin/env python3
"""compare_decode_stream.py — decoding steps as a model runs them, one layer after another: PyTorch's
SDPA backends (enable_gqa=True) with L layers' calls captured in one CUDA graph, beside stage 11's
step11_stream (its steps back to back, plain and with programmatic dependent launch), as rows of one
results file with this GPU's copy bandwidth.

    compare_decode_stream.py --exe build/steps/11_decoding/step11_stream --json OUT.json
                             [--seq-k 8k,16k,32k] [--layers 32] [--backends flash,cudnn,efficient]
                             [--reps 30] [--warmup 3] [--seed 0] [--commit SHA] [--anchor-processes 3]

The shape is chapter 11's decoding case, fixed as step11_stream fixes it: B = 1, Hq = 32, Hkv = 8,
Nq = 1, D = 128, bf16. Per cache length, in one run:
  * the anchors, two ways per backend: "sdpa_<backend>" one call timed alone as compare_decode.py
    times it (the L2 flushed, CUDA events around the call), and "sdpa_<backend>_graph": the calls of
    L layers (each its own Q, K, V) captured in one torch.cuda.CUDAGraph, the replay timed (the L2
    flushed before it), its time over L. The graph's outputs must equal the eager calls' (else the
    run fails). As in compare_decode.py each anchor is timed again in --anchor-processes − 1 fresh
    processes and keeps the fastest process's median.
  * the stage: EXE --layers L --reps R --json FILE Nk, its rows merged unchanged:
    cluster_merge_alone, cluster_merge_stream, cluster_merge_overlapped, read_cache_stream,
    read_cache_overlapped (steps/11_decoding/lab/stream.cu says what each is; it checks the overlapped
    steps' outputs bit for bit against the steps launched alone, and exits 1 otherwise).
Each row gets "cache_gbps" (K and V read once over its median) and "of_copy" (over the copy bandwidth,
dst.copy_(src) of 1 GiB counted as read + write), and the stage's rows "vs_best_sdpa": the fastest
anchor timed the same way (alone for _alone, in a graph for the stream rows) over the row's median.
Exit: 0 when the stage exited 0 and every graph matched its eager calls; 1 otherwise; 2 bad usage.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import anchors, cli, decoding  # noqa: E402
from flashcourse.results import new_document, write_results  # noqa: E402

PROG = "compare_decode_stream.py"
SHAPE = {"heads": 32, "heads_kv": 8, "dim": 128, "dtype": "bfloat16", "seq_q": 1}


def parse_args(argv):
    ap = cli.OneLineParser(prog=PROG, description="decoding steps back to back: SDPA in a CUDA graph beside "
                                                 "step11_stream (the file's docstring says it all)")
    ap.add_argument("--exe", required=True, help="stage 11's step11_stream")
    ap.add_argument("--json", required=True, help="the results file to write")
    ap.add_argument("--seq-k", default="8k,16k,32k", type=cli.sizes)
    ap.add_argument("--layers", default=32, type=int)
    ap.add_argument("--backends", default="flash,cudnn,efficient")
    ap.add_argument("--reps", default=30, type=int)
    ap.add_argument("--warmup", default=3, type=int)
    ap.add_argument("--seed", default=0, type=int)
    ap.add_argument("--commit", default="")
    ap.add_argument("--stage-timeout", default=600, type=float)
    ap.add_argument("--anchor-processes", default=3, type=int)
    ap.add_argument("--anchors-only", action="store_true", help=argparse.SUPPRESS)  # one case's anchors, one line
    args = ap.parse_args(argv)
    if not 1 <= args.layers <= 64:
        raise cli.UsageError("--layers must be in 1..64")
    if args.reps < 1 or args.warmup < 0 or args.anchor_processes < 1:
        raise cli.UsageError("--reps and --anchor-processes must be at least 1, --warmup at least 0")
    if args.anchors_only and len(args.seq_k) != 1:
        raise cli.UsageError("--anchors-only times one case: one --seq-k")
    for key, value in SHAPE.items():  # the case, as flashcourse.decoding reads it
        setattr(args, key, value)
    args.batch = [1]
    return args


def graph_timed(torch, graph, layers, reps, warmup, flush):
    """Median, min, max ms per layer of graph.replay(), the L2 flushed before each replay."""
    for _ in range(warmup):
        graph.replay()
    times = []
    for _ in range(reps):
        flush.sum()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / layers)
    return statistics.median(times), min(times), max(times)


def time_anchors(gpu, args, nk):
    """Each wanted backend at nk: a row timed alone and a row of L layers in one CUDA graph, and
    whether every graph's outputs equalled the eager calls'."""
    torch = gpu.torch
    stack = []
    for layer in range(args.layers):
        stack.append(decoding.case_inputs(gpu, args, 1, nk, seed=args.seed + 7919 * layer))
    rows, all_equal = [], True
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for backend in gpu.wanted:
        alone = decoding.anchor_row("sdpa_" + backend, 1, args, nk)
        graphed = decoding.anchor_row("sdpa_%s_graph" % backend, 1, args, nk)
        for row in (alone, graphed):
            row.update(git_commit=gpu.commit, device=gpu.prop.name)
        graphed["note"] = "per step: %d layers' calls in one CUDA graph, the replay over %d" % (args.layers, args.layers)
        try:
            with gpu.sdpa_kernel(gpu.backend_of[backend]):
                q, k, v = stack[0]
                med, lo, hi = anchors.timed(torch, lambda: sdpa(q, k, v, enable_gqa=True), args.reps, args.warmup, gpu.flush)
                alone.update(median_ms=med, min_ms=lo, max_ms=hi, reps=args.reps)
                eager = [sdpa(q, k, v, enable_gqa=True) for q, k, v in stack]
                side = torch.cuda.Stream()  # capture's warm-up on a side stream, as PyTorch asks
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for q, k, v in stack:
                        sdpa(q, k, v, enable_gqa=True)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    outs = [sdpa(q, k, v, enable_gqa=True) for q, k, v in stack]
                graph.replay()
                torch.cuda.synchronize()
                equal = all(torch.equal(a, b) for a, b in zip(outs, eager))
                all_equal = all_equal and equal
                med, lo, hi = graph_timed(torch, graph, args.layers, args.reps, args.warmup, gpu.flush)
                graphed.update(median_ms=med, min_ms=lo, max_ms=hi, reps=args.reps, graph_equals_eager=equal)
                del graph, outs, eager
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            for row in (alone, graphed):
                if row["median_ms"] is None:
                    row.update(status="skipped", note=str(e).split("\n")[0][:200])
        rows += [alone, graphed]
    return rows, all_equal


def anchors_only(gpu, args):
    rows, equal = time_anchors(gpu, args, args.seq_k[0])
    print(anchors.anchors_line(rows), flush=True)
    return 0 if equal else 1


def anchors_elsewhere(args, nk, run=cli.run_command):
    """The case's anchors in --anchor-processes − 1 fresh processes of this script."""
    return anchors.anchors_in_processes(args, os.path.abspath(__file__), PROG,
                                        ["--seq-k", str(nk), "--layers", str(args.layers)], run)


def best_of(rows, graph):
    ok = [r for r in rows if r["status"] == "ok" and r["variant"].endswith("_graph") == graph]
    return min(ok, key=lambda r: r["median_ms"]) if ok else None


def main(argv=None):
    args, gpu = cli.start(PROG, parse_args, argv, anchors.gpu_setup)
    if args is None:
        return gpu
    if args.anchors_only:
        return anchors_only(gpu, args)
    torch = gpu.torch
    rows, summary, failures = [], [], 0

    def note(line):
        summary.append(line)
        print(line, flush=True)

    copy_row = anchors.copy_bandwidth(torch, args.reps, args.warmup, gpu.flush)
    copy_gbps = copy_row["gbps"]
    note("copy bandwidth: %.0f GB/s (1 GiB, read + write)" % copy_gbps)

    def write():
        write_results(args.json, new_document("anchor", " ".join(sys.argv), gpu.commit, gpu.device,
                                              copy_bandwidth=copy_row, layers=args.layers), rows)

    for nk in args.seq_k:
        name = "Nk=%d" % nk
        anchor_rows, equal = time_anchors(gpu, args, nk)
        if not equal:
            failures += 1
            note("%s: FAILED: a CUDA graph's outputs differ from the eager calls'" % name)
        runs = anchors_elsewhere(args, nk) if args.anchor_processes > 1 else []
        for row in anchor_rows:
            if row["status"] == "ok":
                if runs:
                    anchors.fastest_process(row, runs)
                row["tflops"] = decoding.decode_tflops(row)
            decoding.add_rates(row, copy_gbps)
            rows.append(row)
            said = ("%.2f us, %.0f %% of copy" % (1e3 * row["median_ms"], 100 * row["of_copy"]) if row["status"] == "ok"
                    else row["status"] + " " + row["note"][:100])
            print("%-26s %s: %s" % (row["variant"], name, said), flush=True)
        torch.cuda.empty_cache()

        folder = tempfile.mkdtemp(prefix="compare_decode_stream_")
        try:
            json_path = os.path.join(folder, "stream.json")
            cmd = [args.exe, "--layers", str(args.layers), "--reps", str(args.reps), "--json", json_path, str(nk)]
            code, output, stage_rows = cli.stage_results(cmd, json_path, args.stage_timeout)
            if code != 0 or not stage_rows:
                failures += 1
                note("%s: step11_stream FAILED (exit %s)\n%s" % (name, code, cli.tail(output)))
            for row in stage_rows:
                decoding.add_rates(row, copy_gbps)
                rows.append(row)
                best = best_of(anchor_rows, graph=not row["variant"].endswith("_alone"))
                if row.get("status") == "ok" and best:
                    row["vs_best_sdpa"] = best["median_ms"] / row["median_ms"]
                    row["best_sdpa"] = best["variant"]
                note("%s: 11 %-26s %.2f us, %.0f %% of copy%s" % (
                    name, row["variant"], 1e3 * row["median_ms"], 100 * row["of_copy"],
                    ", %.2fx %s" % (row["vs_best_sdpa"], row["best_sdpa"]) if "vs_best_sdpa" in row else ""))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        write()

    write()
    return cli.finish(PROG, "decoding steps back to back: stage 11 against SDPA in a CUDA graph (copy %.0f GB/s)" % copy_gbps,
                     summary, rows, args.json, failures, "check(s) failed")


if __name__ == "__main__":
    sys.exit(main())
