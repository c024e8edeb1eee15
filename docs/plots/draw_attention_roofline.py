#!/usr/bin/env python3
"""draw_attention_roofline.py — chapter 00's roofline: attention's arithmetic intensity against the
H100's measured compute roofs (bf16 tensor cores, float32 CUDA cores) and its copy bandwidth, with
the course's stages and PyTorch's kernels as points at the FlashAttention papers' shape.

    draw_attention_roofline.py [--fp32 RESULTS.json] [--bf16 RESULTS.json] [--anchors ANCHORS.json]
                               [--seq N] [--dim D] [--out DIR]

Defaults: docs/results/step04_d64.json (stages 03 and 04, float32, one run), docs/results/
compare_07_h100.json (stage 07 beside PyTorch's SDPA backends, bf16, one run), docs/plots/anchors.json
(the roofs: matrix-product ceilings and the copy bandwidth), N = 4096, D = 64; output
DIR/00_roofline.png (default DIR: docs/figures).

A point's height is the TFLOP/s its results file measured (forward, not causal). Its intensity is
counted, not measured: FLOPs (4·N²·D per head) over the fewest HBM bytes its algorithm must move.
An unfused kernel (S and P in memory: stage 03, sdpa_math) writes and reads S and P once each on
top of Q, K, V and O, (4·N·D + 4·N²) elements; a fused one (stages 04, 07, sdpa_flash, sdpa_cudnn)
moves Q, K, V, O and the LSE only, 4·N·D elements and N floats. Exit 2 with one line on a file that
is not what it should be.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tools"))
from flashcourse import guard, plotting  # noqa: E402  (one-line errors, exit 2)
from flashcourse.results import read_results  # noqa: E402

# (stage, variant): (label, fused?, colour, marker)
POINTS = {
    ("03", "naive"): ("stage 03 naive (three kernels)", False, "C3", "o"),
    ("03", "cublas"): ("stage 03 cuBLAS (three kernels)", False, "C1", "o"),
    ("04", "flash"): ("stage 04 flash (fused, CUDA cores)", True, "C2", "o"),
    ("anchor", "sdpa_math"): ("PyTorch math (unfused)", False, "0.45", "s"),
    ("07", "flash"): ("stage 07 flash (fused, tensor cores)", True, "C0", "*"),
    ("anchor", "sdpa_flash"): ("PyTorch FA2 (sdpa_flash)", True, "0.0", "D"),
    ("anchor", "sdpa_cudnn"): ("cuDNN (sdpa_cudnn)", True, "0.25", "^"),
}
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def intensity(n: int, d: int, dtype: str, fused: bool) -> float:
    """FLOP per byte of one head: 4·N²·D FLOPs over the fewest bytes the algorithm moves."""
    b = BYTES[dtype]
    moved = 4 * n * d * b + 4 * n if fused else (4 * n * d + 4 * n * n) * b
    return 4.0 * n * n * d / moved


def points(path: Path, n: int, d: int):
    where = guard.one_line(path)
    try:
        doc = read_results(path)
    except guard.BadInput as e:  # names the file
        raise SystemExit(f"draw_attention_roofline.py: error: {e}")
    found = []
    for r in doc["results"]:
        key = (r.get("stage"), r.get("variant"))
        if (key in POINTS and r.get("status") == "ok" and r.get("pass", "fwd") == "fwd" and not r.get("causal")
                and r.get("seq_q") == n and r.get("seq_k") == n and r.get("dim") == d):
            label, fused, colour, marker = POINTS[key]
            tflops = guard.number(r.get("tflops"), f"{where}: tflops of {key}", 1e-6, 1e5)
            found.append((intensity(n, d, r["dtype"], fused), tflops, f"{label}, {r['dtype']}", colour, marker))
    if not found:
        raise SystemExit(f"draw_attention_roofline.py: error: {where}: no forward row at N = {n}, D = {d}")
    return doc, found


def main(argv=None) -> int:
    parser = guard.OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fp32", type=Path, default=HERE.parent / "results" / "step04_d64.json")
    parser.add_argument("--bf16", type=Path, default=HERE.parent / "results" / "compare_07_h100.json")
    parser.add_argument("--anchors", type=Path, default=HERE / "anchors.json")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--out", type=Path, default=HERE.parent / "figures")
    args = parser.parse_args(argv)
    plt = plotting.pyplot("draw_attention_roofline.py")
    if plt is None:
        return 2

    try:
        anchors = guard.read_json(args.anchors)
        roofs = {c["dtype"]: guard.number(c.get("tflops"), "ceilings.tflops", 1e-3, 1e5) for c in anchors["ceilings"]}
        tbps = guard.number(anchors.get("copy_bandwidth_tb_per_s"), "copy_bandwidth_tb_per_s", 1e-3, 1e3)
        fp32_doc, fp32_pts = points(args.fp32, args.seq, args.dim)
        bf16_doc, bf16_pts = points(args.bf16, args.seq, args.dim)
    except (guard.BadInput, KeyError, TypeError) as e:
        print(f"draw_attention_roofline.py: error: {guard.one_line(e)}", file=sys.stderr)
        return 2
    except SystemExit as e:
        print(guard.one_line(e), file=sys.stderr)
        return 2

    fig, ax = plt.subplots(figsize=(8.6, 5.6))
    xs = [2.0 ** k for k in range(0, 15)]
    slope = [x for x in xs if x * tbps <= max(roofs.values())] + [max(roofs.values()) / tbps]
    ax.plot(slope, [x * tbps for x in slope], color="C7", linestyle="--", label=f"HBM roof: I × {tbps:g} TB/s (copy, measured)")
    for dtype, name, style in (("bf16", "bf16 tensor cores", "-"), ("float32", "float32 CUDA cores", "-.")):
        peak = roofs[dtype]
        ridge = peak / tbps
        ax.plot([ridge, xs[-1]], [peak, peak], color="k", linestyle=style,
                label=f"{name}: {peak:g} TFLOP/s (matmul, measured); ridge at {ridge:.0f} FLOP/byte")
        ax.plot([ridge], [peak], marker="|", color="k", markersize=12)
    for x, y, label, colour, marker in fp32_pts + bf16_pts:
        ax.plot([x], [y], marker=marker, color=colour, markersize=9, linestyle="none", label=f"{label}: {y:.1f}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(1, 2000)
    ax.set_xlabel("arithmetic intensity I (FLOP per byte of HBM traffic the algorithm needs)")
    ax.set_ylabel("TFLOP/s (measured; roofs dashed and solid)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right", framealpha=0.95)
    device = fp32_doc["device"].get("name") if isinstance(fp32_doc.get("device"), dict) else fp32_doc.get("device")
    ax.set_title(guard.label(f"Attention forward on the roofline, N = {args.seq}, D = {args.dim}, B·N = 16k tokens — "
                             f"{device or '?'}", 110), fontsize=10)
    fig.text(0.01, 0.01, guard.label(f"{args.fp32.name} ({str(fp32_doc.get('date', '?'))[:10]}), {args.bf16.name} "
                                     f"({str(bf16_doc.get('date', '?'))[:10]}), {args.anchors.name}", 160),
             fontsize=7, family="monospace", color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "00_roofline.png"
    fig.savefig(out, dpi=110, metadata={"Software": None})
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main("draw_attention_roofline.py", main))
