"""flashcourse.anchors — PyTorch's SDPA backends timed on this GPU as "anchor" rows of a results file:
PyTorch and the device found, the timers (CUDA events; with the L2 cache flushed by a read before
each call where a measurement must come from memory), the copy bandwidth, one backend timed on one
case forward or backward, and an anchor timed again in fresh processes, keeping the fastest.
torch is passed in: importing the package never needs PyTorch."""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys

from .cli import run_command, tail

BACKENDS = ("flash", "cudnn", "efficient", "math")
FA4 = "fa4"  # FlashAttention-4 (the flash-attn-4 package), timed beside SDPA's backends where it imports
ANCHORS_LINE = "anchors: "  # how a --anchors-only process prints its one case's medians


def visible_pairs(nq, nk, causal):
    """Query-key pairs a row sees: all, or under the bottom-right causal mask j <= i + nk - nq."""
    if not causal:
        return nq * nk
    return sum(max(0, min(nk, i + nk - nq + 1)) for i in range(nq))


def torch_on_gpu(prog):
    """(torch, sdpa_kernel, the SDPA backend of each name) when PyTorch and a CUDA device are here;
    otherwise None, after printing why as one line."""
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


def fa4_attention():
    """FlashAttention-4's attention as f(q, k, v, causal) -> O on tensors in its own layout
    [B, N, H, D], and "" -- or None and why it cannot be used here (the flash-attn-4 package, module
    flash_attn.cute, is not installed, or its CuTe DSL does not load)."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:  # noqa: BLE001 -- an ImportError, or a DSL library that fails to load
        return None, "flash_attn.cute does not import here (%s)" % str(e).split("\n")[0][:150]

    def attention(q, k, v, causal):
        out = flash_attn_func(q, k, v, causal=causal)
        return out[0] if isinstance(out, tuple) else out  # some versions return (O, LSE)
    return attention, ""


def swap_tokens_heads(t):
    """[B, H, N, D] as [B, N, H, D] or back, contiguous: SDPA's layout and FlashAttention's."""
    return t.transpose(1, 2).contiguous()


def device_header(torch):
    """The results file's "device" object for GPU 0, as far as PyTorch tells it."""
    prop = torch.cuda.get_device_properties(0)
    return {"name": prop.name, "cuda_runtime": torch.version.cuda or "", "cuda_driver": "",
            "compute_capability": "%d.%d" % (prop.major, prop.minor), "sm_count": str(prop.multi_processor_count),
            "memory_bytes": str(prop.total_memory), "torch": torch.__version__,
            "cudnn": str(torch.backends.cudnn.version())}


def gpu_setup(prog, args):
    """What the grouped-head comparisons set up alike, or None (after one line on stderr) without
    PyTorch or a GPU: torch, sdpa_kernel, the backends by name, the --backends wanted, the dtype,
    the device's description for the file's header, the commit, and the buffer whose read flushes
    L2 before each timed call."""
    found = torch_on_gpu(prog)
    if found is None:
        return None
    torch, sdpa_kernel, backend_of = found
    prop = torch.cuda.get_device_properties(0)
    l2 = getattr(prop, "L2_cache_size", 50 << 20) or (50 << 20)
    return argparse.Namespace(
        torch=torch, sdpa_kernel=sdpa_kernel, backend_of=backend_of, prop=prop,
        wanted=[b for b in args.backends.split(",") if b],
        dtype={"bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype],
        device=device_header(torch), commit=args.commit or "unknown",
        flush=torch.zeros(2 * l2 // 8, dtype=torch.int64, device="cuda"))


def timed(torch, call, reps, warmup, flush):
    """Median, min, max ms of call(), each timed call after a read of `flush` (the L2 flushed: a read,
    not a write, leaves no dirty lines to write back inside the timed call), CUDA events."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(reps):
        flush.sum()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), max(times)


def copy_bandwidth(torch, reps, warmup, flush):
    """The copy bandwidth of this GPU now: dst.copy_(src) of 1 GiB timed like the rest, counted as read +
    write (its buffers freed on return)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    med, lo, hi = timed(torch, lambda: dst.copy_(src), reps, warmup, flush)
    return {"bytes": 2 * src.numel(), "median_ms": med, "min_ms": lo, "max_ms": hi, "reps": reps,
            "gbps": 2.0 * src.numel() / (med * 1e-3) / 1e9, "note": "dst.copy_(src) of 1 GiB, read + write"}


def make_inputs(torch, shape, dtype, seed, with_do):
    """Q, K, V (and dO) of one case, drawn in that order from one seeded generator on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    d_o = torch.randn(shape, device="cuda", dtype=dtype, generator=gen) if with_do else None
    return q, k, v, d_o


def measure(torch, sdpa_kernel, backend, name, pass_name, inputs, batch, heads, n, d, dtype_name, causal,
            reps, warmup, keep_output=False, unavailable=""):
    """One backend on one case (Nq = Nk = n, CUDA events, the median of reps after warmup calls): its
    row, and (keep_output, ok) its output O, or O and the gradients for a backward. `backend` is an
    SDPA backend, or for FA4 its attention function (fa4_attention), or None when it is not available
    here (a skipped row saying `unavailable`)."""
    flops_fwd = 4.0 * batch * heads * d * visible_pairs(n, n, causal)
    flops = flops_fwd * (2.5 if pass_name == "bwd" else 1.0)
    fa4 = name == FA4
    row = {"stage": "anchor", "variant": FA4 if fa4 else "sdpa_" + name, "pass": pass_name, "batch": batch,
           "heads": heads, "heads_kv": heads, "seq_q": n, "seq_k": n, "dim": d, "dtype": dtype_name, "causal": causal,
           "scale": 1.0 / math.sqrt(d), "status": "ok", "note": "", "median_ms": None, "min_ms": None,
           "max_ms": None, "reps": 0, "tflops": None, "gbps": None, "flops": flops, "peak_bytes": None,
           "extra_bytes": None, "driver_bytes": None, "reference": "", "verified": False,
           "verification_ok": None, "verification": ""}
    if inputs is None:
        row.update(status="oom", note="the inputs do not fit")
        return row, None
    if backend is None:
        row.update(status="skipped", note=unavailable or "not available here")
        return row, None
    q0, k0, v0, d_o = inputs
    if fa4:  # FlashAttention's layout, [B, N, H, D], made before the memory is counted and the timing
        q0, k0, v0 = (swap_tokens_heads(t) for t in (q0, k0, v0))
        d_o = swap_tokens_heads(d_o) if d_o is not None else None
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
        with contextlib.nullcontext() if fa4 else sdpa_kernel(backend):
            def forward():
                if fa4:
                    return backend(q, k, v, causal)
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
            if fa4 and out is not None:  # back to [B, H, N, D], as the other backends give them
                out = tuple(map(swap_tokens_heads, out)) if bwd else swap_tokens_heads(out)
        if bwd:
            del o
            for t in (q, k, v):
                t.grad = None
    except torch.cuda.OutOfMemoryError as e:
        row.update(status="oom", note=str(e).split("\n")[0][:200])
        return row, None
    except Exception as e:  # noqa: BLE001 -- a backend that does not take this case says so here
        if not isinstance(e, RuntimeError) and not fa4:  # FA4's checks raise other kinds too
            raise
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


# ---- an anchor timed in several processes -------------------------------------------------------------
# PyTorch's decode times depend on the process (cuDNN's at 8k keys took about 22 or about 37 µs on one
# H100, steady within a process), so an anchor is timed again in fresh processes of the script, and
# its row keeps the fastest process's median: the comparison is against PyTorch at its best.

def anchors_line(rows):
    """The one line a --anchors-only process prints: {variant: [median, min, max] ms, or null}."""
    return ANCHORS_LINE + json.dumps({r["variant"]: [r["median_ms"], r["min_ms"], r["max_ms"]]
                                      if r["status"] == "ok" else None for r in rows})


def anchors_in_processes(args, script, prog, case, run=run_command):
    """One case's anchors timed in args.anchor_processes − 1 fresh processes of `script`, run with
    --anchors-only and the case's own arguments `case`: a list of their {variant: [median, min, max]}
    (a process that fails adds nothing, and says so on stderr)."""
    runs = []
    for _ in range(args.anchor_processes - 1):
        cmd = [sys.executable, script, "--anchors-only", "--exe", args.exe, "--json", os.devnull,
               "--backends", args.backends, "--reps", str(args.reps), "--warmup", str(args.warmup),
               "--seed", str(args.seed)] + case
        code, output = run(cmd, args.stage_timeout)
        lines = [x for x in output.splitlines() if x.startswith(ANCHORS_LINE)]
        if code != 0 or not lines:
            print("%s: the anchors' process failed (exit %s): %s" % (prog, code, tail(output)), file=sys.stderr)
            continue
        runs.append(json.loads(lines[-1][len(ANCHORS_LINE):]))
    return runs


def fastest_process(row, runs):
    """row (timed here) takes the fastest median of this process and `runs`; all of them are kept."""
    times = [[row["median_ms"], row["min_ms"], row["max_ms"]]] + [r[row["variant"]] for r in runs if r.get(row["variant"])]
    row["process_medians_ms"] = [t[0] for t in times]
    row.update(median_ms=min(t[0] for t in times), min_ms=min(t[1] for t in times), max_ms=max(t[2] for t in times))
    row["note"] = ("the fastest of %d processes' medians" % len(times) if len(times) > 1
                   else "timed in one process: the others failed")
