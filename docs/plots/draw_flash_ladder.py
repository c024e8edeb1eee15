#!/usr/bin/env python3
"""draw_flash_ladder.py — chapter 04's ladder: TFLOP/s of stage 03's two variants and of every rung of
stage 04, on a linear axis, one panel per head dimension, with the float32 roofs of the anchors.

    draw_flash_ladder.py [RESULTS.json ...] [--anchors ANCHORS.json] [--out DIR]

Default input: docs/results/step04_ladder_d64.json and step04_ladder_d128.json (each one run of
`step04_cuda_flash_forward --ladder` at the paper shape, N = 4096); output DIR/04_ladder.png (default
DIR: docs/figures). Above each rung: its TFLOP/s and its speed-up over the rung before (the ratio of
median times). The dashed lines are the anchors at the same D and N: the float32 matrix product
(no TF32) and PyTorch's float32 `efficient` kernel. Exit 2 with one line on a file that is not such a
results file.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tools"))
from flashcourse import guard, plotting  # noqa: E402  (one-line errors, exit 2)
from flashcourse.results import read_results  # noqa: E402

ORDER = [("03", "naive"), ("03", "cublas"), ("04", "v1_algorithm1"), ("04", "v2_register_tile"),
         ("04", "v3_swizzle"), ("04", "v4_cp_async"), ("04", "flash")]


def load(path: Path):
    where = guard.one_line(path)
    try:
        doc = read_results(path)
    except guard.BadInput as e:  # names the file
        raise SystemExit(f"draw_flash_ladder.py: error: {e}")
    rows = {}
    for r in doc["results"]:
        key = (r.get("stage"), r.get("variant"))
        if key in ORDER and r.get("status") == "ok":
            if key in rows:
                raise SystemExit(f"draw_flash_ladder.py: error: {where}: two rows of {key[0]} {key[1]}")
            rows[key] = r
    missing = [f"{s} {v}" for s, v in ORDER if (s, v) not in rows]
    if missing:
        raise SystemExit(f"draw_flash_ladder.py: error: {where}: no ok row of {', '.join(missing)}")
    for key, r in rows.items():
        guard.number(r.get("tflops"), f"{where}: tflops of {key}", 1e-6, 1e5)
        guard.number(r.get("median_ms"), f"{where}: median_ms of {key}", 1e-9, 1e9)
    return doc, rows


def main(argv=None) -> int:
    parser = guard.OneLineParser(description=__doc__.split("\n\n")[0])
    results = HERE.parent / "results"
    parser.add_argument("results", type=Path, nargs="*",
                        default=[results / "step04_ladder_d64.json", results / "step04_ladder_d128.json"])
    parser.add_argument("--anchors", type=Path, default=HERE / "anchors.json")
    parser.add_argument("--out", type=Path, default=HERE.parent / "figures")
    args = parser.parse_args(argv)
    plt = plotting.pyplot("draw_flash_ladder.py")
    if plt is None:
        return 2

    try:
        loaded = [load(p) for p in args.results]
        anchors = guard.read_json(args.anchors)
    except SystemExit as e:
        print(guard.one_line(e), file=sys.stderr)
        return 2
    except guard.BadInput as e:
        print(f"draw_flash_ladder.py: error: {guard.one_line(e)}", file=sys.stderr)
        return 2
    fp32_roof = next((c.get("tflops") for c in anchors.get("ceilings", []) if c.get("dtype") == "float32"), None)

    fig, axes = plt.subplots(1, len(loaded), figsize=(6.6 * len(loaded), 5.0), squeeze=False, sharey=True)
    for ax, (doc, rows) in zip(axes[0], loaded):
        r0 = rows[ORDER[-1]]
        tf = [rows[k]["tflops"] for k in ORDER]
        colours = ["C3", "C1"] + ["C0"] * (len(ORDER) - 3) + ["C2"]
        xs = range(len(ORDER))
        ax.bar(xs, tf, color=colours, width=0.65)
        for i, k in enumerate(ORDER):
            text = f"{tf[i]:.1f}"
            if k[0] == "04":
                before = rows[ORDER[i - 1]]
                text += f"\n×{before['median_ms'] / rows[k]['median_ms']:.2f}"
            ax.text(i, tf[i] + 0.8, text, ha="center", va="bottom", fontsize=8)
        eff = next((a.get("fwd") for a in anchors.get("attention", []) if a.get("kernel") == "efficient"
                    and a.get("dim") == r0["dim"] and a.get("seq") == r0["seq_q"] and not a.get("causal")), None)
        if fp32_roof:
            ax.axhline(fp32_roof, color="k", linestyle="-.", linewidth=1, label=f"float32 matmul (no TF32): {fp32_roof:g}")
        if eff:
            ax.axhline(eff, color="0.4", linestyle=":", linewidth=1.2, label=f"PyTorch efficient, float32: {eff:g}")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"{s} " + v.replace("_", "\n", 1) for s, v in ORDER], fontsize=8)
        ax.set_ylim(0, 62)
        ax.set_ylabel("TFLOP/s (linear; higher is better)")
        ax.set_title(guard.label(f"D = {r0['dim']}: B={r0['batch']}, H={r0['heads']}, N={r0['seq_q']}, float32, forward"),
                     fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    doc = loaded[0][0]
    device = doc["device"].get("name") if isinstance(doc.get("device"), dict) else doc.get("device")
    fig.suptitle(guard.label(f"Stage 04's ladder, rung by rung (×: speed-up over the bar before) — {device or '?'}, "
                             f"{str(doc.get('date', '?'))[:10]}, commit {doc.get('git_commit', '?')}", 150), fontsize=10)
    fig.text(0.01, 0.01, guard.label(", ".join(p.name for p in args.results) + ", " + args.anchors.name, 160),
             fontsize=7, family="monospace", color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "04_ladder.png"
    fig.savefig(out, dpi=110, metadata={"Software": None})
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main("draw_flash_ladder.py", main))
