#!/usr/bin/env python3
"""compare_pytorch.py — PyTorch's attention backends, measured on this GPU, as rows of a results file.

    compare_pytorch.py --json OUT.json [--dtype bfloat16,float16] [--dim 64,128] [--causal both]
                       [--pass fwd,bwd] [--seq 512,1k,2k,4k,8k,16k] [--tokens 16k] [--hidden 2048]
                       [--backends flash,cudnn,efficient,math] [--reps 20] [--warmup 5] [--commit SHA]

For each shape, dtype and pass it runs torch.nn.functional.scaled_dot_product_attention with one
backend forced at a time (torch.nn.attention.sdpa_kernel) and writes one row per run in the
course's results format (docs/results_schema.md, `flash-course-results/2`) with "stage": "anchor"
and "variant": "sdpa_flash" | "sdpa_cudnn" | "sdpa_efficient" | "sdpa_math", so that the plot tool
and the chapters read the anchors like any other row, from a file measured in one run.

Shapes: the FlashAttention papers' sweep by default: B·N = --tokens (16k) and H·D = --hidden (2048),
so B = tokens / N and H = hidden / D. Times: CUDA events around each call, --warmup calls first,
the median of --reps. FLOPs as the course counts them: forward 4·B·H·D·(visible query-key pairs),
the backward 2.5 times that. Memory: PyTorch's allocator (max_memory_allocated) from before Q, K, V
are made: peak_bytes, and extra_bytes beyond Q, K, V, O (and dO, dQ, dK, dV for bwd; the LSE
is internal to each backend and counts as extra). A backend that refuses the case is a
`skipped` row with its reason, an out-of-memory run an `oom` row.

The anchors are not verified here (verified: false); comparing a stage's outputs with PyTorch's is
the stage's own check. Exit codes: 0 written, 2 bad usage or no CUDA device.
"""
import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys

BACKENDS = ("flash", "cudnn", "efficient", "math")


def sizes(text):
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        mult = 1024 if part.endswith("k") else 1
        out.append(int(part.rstrip("k")) * mult)
    return out


def visible_pairs(nq, nk, causal):
    """Query-key pairs a row sees: all, or under the bottom-right causal mask j <= i + nk - nq."""
    if not causal:
        return nq * nk
    return sum(max(0, min(nk, i + nk - nq + 1)) for i in range(nq))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--dtype", default="bfloat16,float16")
    ap.add_argument("--dim", default="64,128")
    ap.add_argument("--causal", default="both", choices=("both", "on", "off"))
    ap.add_argument("--pass", dest="passes", default="fwd,bwd")
    ap.add_argument("--seq", default="512,1k,2k,4k,8k,16k")
    ap.add_argument("--tokens", default="16k", help="B·N, the batch follows N")
    ap.add_argument("--hidden", type=int, default=2048, help="H·D, the heads follow D")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--commit", default="")
    args = ap.parse_args()

    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print("compare_pytorch.py: error: needs PyTorch (%s)" % e, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("compare_pytorch.py: error: no CUDA device", file=sys.stderr)
        return 2
    backend_of = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                  "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    try:
        wanted = [b for b in args.backends.split(",") if b]
        for b in wanted:
            if b not in BACKENDS:
                raise ValueError("unknown backend %r (flash, cudnn, efficient, math)" % b)
        for d in args.dtype.split(","):
            if d not in dtypes:
                raise ValueError("unknown dtype %r (float32, float16, bfloat16)" % d)
        for p in args.passes.split(","):
            if p not in ("fwd", "bwd"):
                raise ValueError("unknown pass %r (fwd, bwd)" % p)
        seqs, tokens, dims = sizes(args.seq), sizes(args.tokens)[0], sizes(args.dim)
        if args.reps < 1 or args.warmup < 0:
            raise ValueError("--reps must be at least 1 and --warmup at least 0")
    except ValueError as e:
        print("compare_pytorch.py: error: %s" % e, file=sys.stderr)
        return 2

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
    rows = []
    causal_values = {"both": (False, True), "on": (True,), "off": (False,)}[args.causal]
    for dtype_name in args.dtype.split(","):
        dtype = dtypes[dtype_name]
        for d in dims:
            heads = args.hidden // d
            for n in seqs:
                batch = max(1, tokens // n)
                for causal in causal_values:
                    for pass_name in args.passes.split(","):
                        for b in wanted:
                            row = measure(torch, sdpa_kernel, backend_of[b], b, pass_name, batch, heads, n, d,
                                          dtype, dtype_name, causal, args.reps, args.warmup)
                            row.update({"device": prop.name, "cuda_runtime": device["cuda_runtime"],
                                        "cuda_driver": "", "git_commit": commit})
                            rows.append(row)
                            print("%-14s %s %-8s D=%-3d B=%-2d H=%-2d N=%-5d %-6s %-7s %s" % (
                                row["variant"], pass_name, dtype_name, d, batch, heads, n,
                                "causal" if causal else "", row["status"],
                                "%.3f ms %.1f TFLOP/s" % (row["median_ms"], row["tflops"]) if row["status"] == "ok"
                                else row["note"][:80]), flush=True)
    doc = {"schema": "flash-course-results/2", "stage": "anchor", "command": " ".join(sys.argv),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "git_commit": commit, "device": device, "results": rows}
    # One row per line, as the stages write them (diffs of committed files stay readable).
    header = ",\n".join(" %s: %s" % (json.dumps(k), json.dumps(v)) for k, v in doc.items() if k != "results")
    with open(args.json, "w") as f:
        f.write("{\n" + header + ',\n "results": [\n' + ",\n".join("  " + json.dumps(r) for r in rows) + "\n ]\n}\n")
    print("compare_pytorch.py: %d rows written to %s" % (len(rows), args.json))
    return 0


def measure(torch, sdpa_kernel, backend, name, pass_name, batch, heads, n, d, dtype, dtype_name, causal, reps,
            warmup):
    flops_fwd = 4.0 * batch * heads * d * visible_pairs(n, n, causal)
    flops = flops_fwd * (2.5 if pass_name == "bwd" else 1.0)
    row = {"stage": "anchor", "variant": "sdpa_" + name, "pass": pass_name, "batch": batch, "heads": heads,
           "heads_kv": heads, "seq_q": n, "seq_k": n, "dim": d, "dtype": dtype_name, "causal": causal,
           "scale": 1.0 / math.sqrt(d), "status": "ok", "note": "", "median_ms": None, "min_ms": None,
           "max_ms": None, "reps": 0, "tflops": None, "gbps": None, "flops": flops, "peak_bytes": None,
           "extra_bytes": None, "driver_bytes": None, "reference": "", "verified": False,
           "verification_ok": None, "verification": ""}
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    try:
        gen = torch.Generator(device="cuda").manual_seed(0)
        shape = (batch, heads, n, d)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=gen, requires_grad=pass_name == "bwd")
                   for _ in range(3))
        element = q.element_size()
        tensors = 4 * q.numel() * element * (2 if pass_name == "bwd" else 1)  # Q K V O (+ dO dQ dK dV)
        d_o = torch.randn(shape, device="cuda", dtype=dtype, generator=gen) if pass_name == "bwd" else None
        with sdpa_kernel(backend):
            def forward():
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

            if pass_name == "fwd":
                call = forward
                call()
            else:
                out = forward()

                def call():
                    for t in (q, k, v):
                        t.grad = None
                    out.backward(d_o, retain_graph=True)
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
    except torch.cuda.OutOfMemoryError as e:
        row.update(status="oom", note=str(e).split("\n")[0][:200])
        return row
    except RuntimeError as e:  # a backend that does not take this case says so here
        row.update(status="skipped", note=str(e).split("\n")[0][:200])
        return row
    peak = torch.cuda.max_memory_allocated() - base
    median = statistics.median(times)
    # The minimum bytes, as Problem::bytes_min: fwd reads Q, K, V and writes O, LSE; bwd reads Q, K, V, O,
    # dO, LSE and writes dQ, dK, dV (LSE in float32).
    lse = batch * heads * n * 4
    io = (4 if pass_name == "fwd" else 8) * q.numel() * element + lse
    row.update(median_ms=median, min_ms=min(times), max_ms=max(times), reps=len(times),
               tflops=flops / (median * 1e-3) / 1e12, gbps=io / (median * 1e-3) / 1e9, peak_bytes=int(peak),
               extra_bytes=int(max(0, peak - tensors)))
    return row


if __name__ == "__main__":
    sys.exit(main())
