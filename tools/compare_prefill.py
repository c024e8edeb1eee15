#!/usr/bin/env python3
"""compare_prefill.py — a prompt's first pass with grouped heads, alone and as a packed batch of
different lengths: PyTorch beside stage 12's executable, as rows of one results file.

    compare_prefill.py --exe build/steps/12_variable_lengths/step12_variable_lengths --json OUT.json
                       [--seq 4k,16k] [--seq-lens 1k,2k,3k,4k,6k,8k,12k,16k] [--heads 32] [--heads-kv 8]
                       [--dim 128] [--dtype bfloat16] [--causal both|yes|no] [--backends flash,cudnn]
                       [--reps 20] [--warmup 3] [--seed 0] [--commit SHA]
    compare_prefill.py --self-test        (the pure-Python parts, no PyTorch needed)
    compare_prefill.py --self-test-torch  (the padded and nested forms against each sequence alone, on the CPU)

Per case, in one process and one run (every row B = 1 for --seq, one packed batch for --seq-lens):
  * grouped prefill, Nq = Nk = N (SDPA's top-left causal mask is then the course's bottom-right):
    "sdpa_<backend>": scaled_dot_product_attention(q, k, v, is_causal, enable_gqa=True) with one
    backend forced at a time, Q [1, Hq, N, D], K, V [1, Hkv, N, D]; the stage's
    `--seq N` rows (prefill, prefill_repeated) merged unchanged.
  * a packed batch of the lengths L_s (the stage's `--seq-lens`), three ways PyTorch runs it:
      "sdpa_<backend>_padded": the sequences padded at their end to the longest, [B, Hq, Lmax, D],
        one call with enable_gqa=True. Causal, the padding needs no mask (a real query sees only
        keys before it); not causal, a key-padding mask (attn_mask), which some backends refuse
        (a `skipped` row with their reason). The padding is computed: that is what it costs.
      "flash_varlen": FlashAttention-2's variable-length kernel as PyTorch ships it
        (torch.ops.aten._flash_attention_forward with cu_seqlens, tokens first [Σ L_s, H, D], the
        K/V heads as they are): what a nested (jagged) batch runs on.
      "sdpa_nested": scaled_dot_product_attention on torch.nested jagged tensors, the form a
        PyTorch user writes, K/V repeated to Hq (nested SDPA takes no enable_gqa).
    Their outputs on the real rows must agree with each other (max |difference| printed and
    bounded), so that an anchor that attends to padding or to the wrong sequence fails the run.
FLOPs, as the course counts them, are the real work alone, each sequence on its own (4·H·L²·D,
halved when causal, as the stage's rows count them): a padded call is charged its useful FLOPs, so
its TFLOP/s shows the padding's cost.
Times: as compare_decode.py (flashcourse.anchors.timed: the L2 flushed by reading before each call, CUDA events,
the median of --reps after --warmup).
The results file is written after every case. Exit: 0 when every stage run exited 0 and the
anchors agreed; 1 otherwise; 2 bad usage.
"""
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashcourse import cli  # noqa: E402
from flashcourse.anchors import gpu_setup, timed  # noqa: E402
from flashcourse.results import new_document, write_results  # noqa: E402

PROG = "compare_prefill.py"
AGREE = {"bfloat16": 2.0 ** -5, "float16": 2.0 ** -8}  # max |O_a − O_b| between two 16-bit anchors


# ---- pure Python (--self-test) -------------------------------------------------------------------

def cu_seqlens(lengths):
    """FlashAttention's offsets: sequence s is rows cu[s] .. cu[s + 1] of the packed tokens."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def prefill_flops(heads, dim, lengths, causal):
    """The course's count (Problem::flops_forward): 4·H·L²·D for each sequence on its own (Nq = Nk =
    L_s), halved when causal, the papers' convention for square causal attention."""
    return sum(4.0 * heads * n * n * dim * (0.5 if causal else 1.0) for n in lengths)


def self_test():
    failures = 0

    def check(name, got, want):
        nonlocal failures
        ok = got == want
        failures += not ok
        print("%s: %s (%r%s)" % ("ok" if ok else "WRONG", name, got, "" if ok else ", want %r" % (want,)))

    check("cu_seqlens of 3, 1, 4", cu_seqlens([3, 1, 4]), [0, 3, 4, 8])
    check("causal flops of one sequence: half the full count", prefill_flops(2, 8, [5], True),
          0.5 * prefill_flops(2, 8, [5], False))
    check("flops of a batch: the sum of its sequences'", prefill_flops(3, 16, [7, 2], False),
          prefill_flops(3, 16, [7], False) + prefill_flops(3, 16, [2], False))
    check("the stage's packed causal file: 8 lengths, 32 heads, D = 128", prefill_flops(
        32, 128, [1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384], True), 4552665333760.0)
    print("self-test: %s" % ("all as expected" if not failures else "%d WRONG" % failures))
    return 1 if failures else 0


# ---- the packed batch in PyTorch's other forms (tested on the CPU by --self-test-torch) -------------

def padded(torch, x, cu, longest):
    """[Σ L_s, H, D] tokens first → [B, H, Lmax, D], each sequence at its start, zeros after."""
    out = torch.zeros((len(cu) - 1, x.shape[1], longest, x.shape[2]), device=x.device, dtype=x.dtype)
    for s in range(len(cu) - 1):
        out[s, :, :cu[s + 1] - cu[s]] = x[cu[s]:cu[s + 1]].transpose(0, 1)
    return out


def unpadded(torch, out, cu):
    """The real rows of a padded [B, H, Lmax, D] output, back to [Σ L_s, H, D]."""
    return torch.cat([out[s, :, :cu[s + 1] - cu[s]].transpose(0, 1) for s in range(len(cu) - 1)])


def key_padding_mask(torch, cu, longest, device):
    """[B, 1, 1, Lmax]: key j of sequence s is real iff j < L_s (True: attend)."""
    lengths = torch.tensor([cu[s + 1] - cu[s] for s in range(len(cu) - 1)], device=device)
    return (torch.arange(longest, device=device)[None, :] < lengths[:, None])[:, None, None, :]


def nested(torch, x, cu):
    """[Σ L_s, H, D] → a jagged nested tensor [B, H, j, D] (SDPA's layout for nested inputs)."""
    parts = [x[cu[s]:cu[s + 1]] for s in range(len(cu) - 1)]
    return torch.nested.nested_tensor(parts, layout=torch.jagged).transpose(1, 2)


def unnested(torch, out):
    """A nested [B, H, j, D] output back to [Σ L_s, H, D]."""
    return torch.cat(out.transpose(1, 2).unbind())


def self_test_torch():
    """padded, unpadded, key_padding_mask, nested and unnested on the CPU: SDPA through each form
    against SDPA on each sequence alone (needs PyTorch, not a GPU)."""
    import torch
    sdpa = torch.nn.functional.scaled_dot_product_attention
    lengths, h, d = [5, 1, 9, 3], 4, 8
    cu = cu_seqlens(lengths)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn((cu[-1], h, d), generator=gen, dtype=torch.float64) for _ in range(3))
    failures = 0
    for causal in (False, True):
        alone = torch.cat([sdpa(q[cu[s]:cu[s + 1]].transpose(0, 1), k[cu[s]:cu[s + 1]].transpose(0, 1),
                                v[cu[s]:cu[s + 1]].transpose(0, 1), is_causal=causal).transpose(0, 1)
                           for s in range(len(lengths))])
        mask = None if causal else key_padding_mask(torch, cu, max(lengths), "cpu")
        got = {"padded": unpadded(torch, sdpa(*(padded(torch, x, cu, max(lengths)) for x in (q, k, v)),
                                              attn_mask=mask, is_causal=causal), cu)}
        try:
            got["nested"] = unnested(torch, sdpa(*(nested(torch, x, cu) for x in (q, k, v)), is_causal=causal))
        except (RuntimeError, TypeError, AttributeError, NotImplementedError) as e:
            print("note: nested SDPA on the CPU: %s" % str(e).split("\n")[0][:120])
        for form, out in got.items():
            diff = (out - alone).abs().max().item()
            ok = out.shape == alone.shape and diff < 1e-12
            failures += not ok
            print("%s: %s%s against each sequence alone: max |difference| %.3g" % (
                "ok" if ok else "WRONG", form, " causal" if causal else "", diff))
    print("self-test (torch): %s" % ("all as expected" if not failures else "%d WRONG" % failures))
    return 1 if failures else 0


# ---- the run ---------------------------------------------------------------------------------------

def parse_args(argv):
    ap = cli.grouped_stage_parser(PROG, "grouped prefill and packed batches beside PyTorch", "11",
                                  backends="flash,cudnn", reps=20, warmup=3)
    ap.add_argument("--seq", default="4k,16k", type=cli.sizes)
    ap.add_argument("--seq-lens", default="1k,2k,3k,4k,6k,8k,12k,16k", type=cli.sizes)
    ap.add_argument("--causal", default="both", choices=("both", "yes", "no"))
    return cli.parse_grouped(ap, argv)


def anchor_row(variant, args, lengths, causal, packed):
    n = max(lengths)
    row = {"stage": "anchor", "variant": variant, "pass": "fwd", "batch": len(lengths), "heads": args.heads,
           "heads_kv": args.heads_kv, "seq_q": n, "seq_k": n, "dim": args.dim, "dtype": args.dtype,
           "causal": causal, "scale": 1.0 / math.sqrt(args.dim), "status": "ok", "note": "", "median_ms": None,
           "min_ms": None, "max_ms": None, "reps": 0, "tflops": None, "gbps": None, "verified": False,
           "flops": prefill_flops(args.heads, args.dim, lengths, causal)}
    if packed:
        row["seq_lens"] = list(lengths)
    return row


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--self-test"]:
        return self_test()
    if argv == ["--self-test-torch"]:
        return self_test_torch()
    args, gpu = cli.start(PROG, parse_args, argv, gpu_setup)
    if args is None:
        return gpu
    torch, sdpa_kernel, backend_of, wanted, dtype = gpu.torch, gpu.sdpa_kernel, gpu.backend_of, gpu.wanted, gpu.dtype
    prop, device, commit, flush = gpu.prop, gpu.device, gpu.commit, gpu.flush
    sdpa = torch.nn.functional.scaled_dot_product_attention
    g = args.heads // args.heads_kv
    rows, summary, failures = [], [], 0
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]

    def note(line):
        summary.append(line)
        print(line, flush=True)

    def write():
        write_results(args.json, new_document("anchor", " ".join([PROG] + argv), commit, device), rows)

    def time_anchor(row, call):
        """Times call() into row (its first output returned), or marks the row skipped with the reason."""
        try:
            out = call()
            med, lo, hi = timed(torch, call, args.reps, args.warmup, flush)
            row.update(median_ms=med, min_ms=lo, max_ms=hi, reps=args.reps, git_commit=commit, device=prop.name)
            row["tflops"] = row["flops"] / (med * 1e-3) / 1e12
            return out
        except (RuntimeError, TypeError, NotImplementedError) as e:  # OutOfMemoryError is a RuntimeError
            row.update(status="skipped", note=str(e).split("\n")[0][:200], git_commit=commit, device=prop.name)
            return None

    def run_stage(name, extra):
        nonlocal failures
        folder = tempfile.mkdtemp(prefix="compare_prefill_")
        try:
            json_path = os.path.join(folder, "stage.json")
            cmd = [args.exe, "--heads", str(args.heads), "--heads-kv", str(args.heads_kv), "--dim",
                   str(args.dim), "--dtype", args.dtype, "--reps", str(args.reps), "--warmup", str(args.warmup),
                   "--json", json_path] + extra
            torch.cuda.empty_cache()
            code, output, stage_rows = cli.stage_results(cmd, json_path, args.stage_timeout)
            if code != 0 or not stage_rows:
                failures += 1
                note("%s: stage FAILED (exit %s)\n%s" % (name, code, cli.tail(output)))
            return stage_rows
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def report(name, anchors, stage_rows):
        best = min((r for r in anchors if r["status"] == "ok"), key=lambda r: r["median_ms"], default=None)
        for r in anchors:
            print("%-22s %s: %s" % (r["variant"], name, "%.3f ms, %.0f TFLOP/s" % (r["median_ms"], r["tflops"])
                                     if r["status"] == "ok" else r["status"] + " " + r["note"][:100]), flush=True)
        for r in stage_rows:
            if r.get("status") == "ok" and r.get("stage") == "12" and best:
                r["vs_best_anchor"] = best["median_ms"] / r["median_ms"]
                r["best_anchor"] = best["variant"]
                note("%s: 11 %-17s %.3f ms, %.0f TFLOP/s, %.2fx %s" % (name, r["variant"], r["median_ms"], r["tflops"],
                                                                      r["vs_best_anchor"], best["variant"]))

    gen = torch.Generator(device="cuda")
    # Grouped prefill, one sequence of N.
    for n in args.seq:
        for causal in causals:
            name = "N=%d Hq=%d Hkv=%d D=%d %s%s" % (n, args.heads, args.heads_kv, args.dim, args.dtype,
                                                   " causal" if causal else "")
            gen.manual_seed(args.seed)
            q = torch.randn((1, args.heads, n, args.dim), generator=gen, device="cuda", dtype=dtype)
            k = torch.randn((1, args.heads_kv, n, args.dim), generator=gen, device="cuda", dtype=dtype)
            v = torch.randn((1, args.heads_kv, n, args.dim), generator=gen, device="cuda", dtype=dtype)
            anchors = []
            for backend in wanted:
                row = anchor_row("sdpa_" + backend, args, [n], causal, packed=False)
                with sdpa_kernel(backend_of[backend]):
                    time_anchor(row, lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=True))
                anchors.append(row)
            q = k = v = None  # the memory back before the stage runs
            stage_rows = run_stage(name, ["--seq", str(n)] + (["--causal"] if causal else []))
            report(name, anchors, stage_rows)
            rows.extend(anchors + stage_rows)
            write()

    # A packed batch of the lengths, three ways.
    lengths = args.seq_lens
    cu = cu_seqlens(lengths)
    total, longest = cu[-1], max(lengths)
    for causal in causals:
        name = "packed %s Hq=%d Hkv=%d D=%d %s%s" % (",".join(str(x) for x in lengths), args.heads, args.heads_kv,
                                                     args.dim, args.dtype, " causal" if causal else "")
        gen.manual_seed(args.seed)
        q = torch.randn((total, args.heads, args.dim), generator=gen, device="cuda", dtype=dtype)  # tokens first
        k = torch.randn((total, args.heads_kv, args.dim), generator=gen, device="cuda", dtype=dtype)
        v = torch.randn((total, args.heads_kv, args.dim), generator=gen, device="cuda", dtype=dtype)
        anchors, outs = [], {}
        cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
        scale = 1.0 / math.sqrt(args.dim)

        row = anchor_row("flash_varlen", args, lengths, causal, packed=True)
        out = time_anchor(row, lambda: torch.ops.aten._flash_attention_forward(
            q, k, v, cu_t, cu_t, longest, longest, 0.0, causal, False, scale=scale)[0])
        if out is not None:
            outs["flash_varlen"] = out  # [total, Hq, D]
        anchors.append(row)

        # Padded: [B, H, Lmax, D]; causal needs no mask (padding only after a sequence's keys).
        qp, kp, vp = (padded(torch, x, cu, longest) for x in (q, k, v))
        mask = None if causal else key_padding_mask(torch, cu, longest, "cuda")
        for backend in wanted:
            row = anchor_row("sdpa_%s_padded" % backend, args, lengths, causal, packed=True)
            with sdpa_kernel(backend_of[backend]):
                out = time_anchor(row, lambda: sdpa(qp, kp, vp, attn_mask=mask, is_causal=causal, enable_gqa=True))
            if out is not None:
                outs[row["variant"]] = unpadded(torch, out, cu)
            anchors.append(row)
        qp = kp = vp = None

        # Nested (jagged) tensors, K/V repeated to Hq.
        row = anchor_row("sdpa_nested", args, lengths, causal, packed=True)
        try:
            qn, kn, vn = nested(torch, q, cu), nested(torch, k.repeat_interleave(g, dim=1), cu), nested(
                torch, v.repeat_interleave(g, dim=1), cu)
            out = time_anchor(row, lambda: sdpa(qn, kn, vn, is_causal=causal))
            if out is not None:
                outs["sdpa_nested"] = unnested(torch, out)
            qn = kn = vn = None
        except (RuntimeError, TypeError, AttributeError, NotImplementedError) as e:
            row.update(status="skipped", note=str(e).split("\n")[0][:200], git_commit=commit, device=prop.name)
        anchors.append(row)

        # The anchors must agree on the real rows.
        names = list(outs)
        for other in names[1:]:
            diff = (outs[other].float() - outs[names[0]].float()).abs().max().item()
            ok = diff <= AGREE[args.dtype]
            failures += not ok
            note("%s: %s against %s: max |difference| %.3g (%s, bound %.3g)" % (
                name, other, names[0], diff, "ok" if ok else "DISAGREE", AGREE[args.dtype]))
        q = k = v = outs = None
        torch.cuda.empty_cache()
        stage_rows = run_stage(name, ["--seq-lens", ",".join(str(x) for x in lengths)] + (["--causal"] if causal else []))
        report(name, anchors, stage_rows)
        rows.extend(anchors + stage_rows)
        write()

    write()
    return cli.finish(PROG, "stage 12's prefill against PyTorch", summary, rows, args.json, failures,
                     "stage run(s) failed or anchors disagreed")


if __name__ == "__main__":
    sys.exit(main())
