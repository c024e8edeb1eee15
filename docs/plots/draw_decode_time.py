#!/usr/bin/env python3
"""draw_decode_time.py — chapter 11's decoding figure: the time of one decoding step against the
cache's length (not a roofline: every point has the same arithmetic intensity), beside the floor that memory sets (the cache's bytes over the copy bandwidth measured
in the same run) and a plain read of the cache (stage 11's read_cache row, where the file has one),
from a results file of tools/compare_decode.py.

    draw_decode_time.py [RESULTS.json] [--out DIR]

Default input: docs/results/compare_11_decode_h100.json; output DIR/11_decode_time.png (default
DIR: docs/figures). One panel per batch size in the file: stage 11's rows (split_kv and two of its
merges, one_split, read_cache) and PyTorch's (sdpa_flash, sdpa_cudnn), median milliseconds, log-log;
the floor is K and V read once, 2·B·Hkv·Nk·D·2 bytes, at the file's `copy_bandwidth.gbps`. Exit 2 with one
line on a file that is not such a results file.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tools"))
from flashcourse import guard, plotting  # noqa: E402  (one-line errors, exit 2)
from flashcourse.decoding import cache_bytes, check_row  # noqa: E402  (K and V read once, 16-bit)
from flashcourse.results import read_results  # noqa: E402
STYLE = {  # variant: (label, colour, marker)
    "split_kv": ("stage 11 split_kv (a warp per row merges)", "C0", "o"),
    "split_kv_block_merge": ("stage 11 split_kv_block_merge", "C4", "^"),
    "split_kv_cluster_merge": ("stage 11 split_kv_cluster_merge (Hopper)", "C3", "*"),
    "one_split": ("stage 11 one_split (no split)", "C1", "v"),
    "read_cache": ("read_cache: the cache read once, no attention", "C9", "x"),
    "sdpa_flash": ("PyTorch FA2 (sdpa_flash)", "0.0", "s"),
    "sdpa_cudnn": ("cuDNN (sdpa_cudnn)", "0.45", "D"),
}


def load(path: Path):
    where = guard.one_line(path)
    try:
        doc = read_results(path)
    except guard.BadInput as e:  # names the file
        raise SystemExit(f"draw_decode_time.py: error: {e}")
    try:
        bandwidth = doc.get("copy_bandwidth")
        gbps = guard.number(bandwidth.get("gbps") if isinstance(bandwidth, dict) else None, "copy_bandwidth.gbps",
                            1e-3, 1e6)
        rows = [r for r in doc["results"] if r.get("status") == "ok" and r.get("variant") in STYLE]
        for r in rows:
            check_row(r, "a %s row" % r["variant"], ("batch", "heads", "heads_kv", "seq_q", "seq_k", "dim"))
    except guard.BadInput as e:
        raise SystemExit(f"draw_decode_time.py: error: {where}: not a compare_decode.py results file ({e})")
    if not rows:
        raise SystemExit(f"draw_decode_time.py: error: {where}: no rows to draw")
    return doc, gbps, rows


def main(argv=None) -> int:
    parser = guard.OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="?", default=HERE.parent / "results" / "compare_11_decode_h100.json")
    parser.add_argument("--out", type=Path, default=HERE.parent / "figures")
    args = parser.parse_args(argv)
    plt = plotting.pyplot("draw_decode_time.py")
    if plt is None:
        return 2

    try:
        doc, gbps, rows = load(args.results)
    except SystemExit as e:
        print(guard.one_line(e), file=sys.stderr)
        return 2
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(1, len(batches), figsize=(6.4 * len(batches), 4.6), squeeze=False)
    for ax, b in zip(axes[0], batches):
        mine = [r for r in rows if r["batch"] == b]
        keys = sorted({r["seq_k"] for r in mine})
        floor = [cache_bytes(next(r for r in mine if r["seq_k"] == k)) / (gbps * 1e9) * 1e3 for k in keys]
        ax.plot(keys, floor, color="C2", linestyle="--", label=f"floor: cache bytes / copy bandwidth ({gbps:.0f} GB/s)")
        for variant, (label, colour, marker) in STYLE.items():
            pts = sorted((r["seq_k"], r["median_ms"]) for r in mine if r["variant"] == variant)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour, marker=marker, label=label)
        r0 = mine[0]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("keys in the cache (Nk)")
        ax.set_ylabel("time of one decoding step, median (ms)")
        ax.set_title(guard.label(f"B={b}, Hq={r0['heads']}, Hkv={r0['heads_kv']}, Nq={r0['seq_q']}, D={r0['dim']}, {r0['dtype']}"))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    device = doc["device"].get("name") if isinstance(doc.get("device"), dict) else doc.get("device")
    fig.suptitle("Decoding against the memory floor\n" + guard.label(f"{device or '?'}, {str(doc.get('date', '?'))[:10]}, "
                 f"commit {doc.get('git_commit', '?')}", 120), fontsize=10)
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "11_decode_time.png"
    fig.savefig(out, dpi=110, metadata={"Software": None})
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main("draw_decode_time.py", main))
