#!/usr/bin/env python3
"""fit_decode_floor.py — a decoding step's time as a fixed cost plus a rate: chapter 11's "the floor,
in two numbers".

    fit_decode_floor.py RESULTS.json [RESULTS.json ...] [--from 8k] [--copy-gbps 3029] [--plot OUT.png]
    fit_decode_floor.py --self-test

RESULTS are stage 11 files of one shape swept over the cache's length (rounds of the same run,
e.g. `step11_decoding --variant split_kv_cluster_merge --sweep 1,256,...,128k --json`). For each
stage 11 variant with `ok` rows (stage 07's comparison on repeated heads is left out: it does not
read the cache once): the median over the files of each length's median_ms, then the least-squares
line  time = t0 + bytes / rate  over the lengths >= --from, where bytes = K and V read once
(2·B·Hkv·Nk·D·element size). t0 is what a step costs beyond moving its bytes (the launch, the first
and last trips to memory, the merge); rate is what each further byte costs. With --copy-gbps, also
the fixed cost a step may have and still read the cache at 75 % of that copy rate at each length.
--plot draws chapter 11's figure of it (matplotlib): time against the cache's MiB up to --plot-to
(default 64 MiB), each variant's medians and fitted line, and with --copy-gbps the time that is 75 %
of the copy rate. Otherwise standard library only. Exit 2 with one line on bad input.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from flashcourse import guard  # noqa: E402  (one-line errors, exit 2)
from flashcourse.decoding import check_row  # noqa: E402
from flashcourse.results import read_results  # noqa: E402

SIZES = {"k": 1024, "m": 1024 * 1024}
ELEMENT = {"float16": 2, "bfloat16": 2, "float32": 4}


def size(text):
    t = text.strip().lower()
    try:
        return int(t[:-1]) * SIZES[t[-1]] if t and t[-1] in SIZES else int(t)
    except ValueError:
        raise guard.BadInput("--from %s: not a length (e.g. 8k)" % guard.brief(text)) from None


def cache_bytes(row):
    kv = row.get("heads_kv") or row["heads"]
    return 2 * row["batch"] * kv * row["seq_k"] * row["dim"] * ELEMENT[row["dtype"]]


def fit(points):
    """Least squares of y = a + b·x: (a, b)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def fits(docs, start):
    """{variant: (t0 seconds, seconds per byte)} over the lengths >= start (variants with two or more)."""
    out = {}
    for variant, by_len in medians(docs).items():
        points = [(b, med * 1e-3) for nk, (b, med, _) in by_len.items() if nk >= start]
        if len(points) >= 2:
            out[variant] = fit(points)
    return out


LABELS = {"read_cache": "read_cache (a plain read of the cache)",
          "split_kv_cluster_merge": "the cluster merge (decoding)"}


def plot(docs, start, copy_gbps, path, upto_mib):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=100)
    lines = fits(docs, start)
    for i, (variant, by_len) in enumerate(medians(docs).items()):
        if variant not in lines:
            continue
        colour = "C%d" % i
        xs = [b / 2**20 for b, _, _ in by_len.values() if b / 2**20 <= upto_mib]
        ys = [med * 1e3 for b, med, _ in by_len.values() if b / 2**20 <= upto_mib]
        t0, per_byte = lines[variant]
        ax.plot(xs, ys, "o", color=colour, label="%s: medians" % LABELS.get(variant, variant))
        ax.plot([0, upto_mib], [t0 * 1e6, (t0 + per_byte * upto_mib * 2**20) * 1e6], "-", color=colour, lw=1,
                label="fit from %d keys: %.2f µs + bytes / %.0f GB/s" % (start, t0 * 1e6, 1e-9 / per_byte))
    marked = sorted({(nk, b) for by_len in medians(docs).values() for nk, (b, _, _) in by_len.items()
                     if nk >= start and b / 2**20 <= upto_mib})
    for nk, b in marked:  # the cache lengths the fit starts from, where the goal is read
        ax.axvline(b / 2**20, color="0.8", lw=0.8, zorder=0)
        ax.text(b / 2**20, 0.5, " %dk keys" % (nk // 1024), fontsize=8, color="0.4", ha="right", rotation=90,
                va="bottom")
    if copy_gbps:
        ax.plot([0, upto_mib], [0, upto_mib * 2**20 / (0.75 * copy_gbps * 1e9) * 1e6], "--", color="0.4", lw=1,
                label="75 %% of the copy rate (%.0f GB/s): the goal" % copy_gbps)
    ax.set_xlim(0, upto_mib)
    ax.set_ylim(0, None)
    ax.set_xlabel("the cache's bytes, K and V read once (MiB)")
    ax.set_ylabel("time of one step, median (µs)")
    ax.set_title("A decoding step: a fixed cost plus a rate (B=1, Hq=32, Hkv=8, D=128, bf16)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def medians(docs):
    """{variant: {seq_k: (bytes, median over the files of median_ms, [each file's])}}."""
    times = {}
    for doc in docs:
        for r in doc.get("results", []):
            if r.get("status") == "ok" and r.get("median_ms") is not None and r.get("stage") == "11":
                check_row(r, "a %s row" % guard.brief(r["variant"], 40))
                if r["dtype"] not in ELEMENT:
                    raise guard.BadInput("a %s row: dtype %s is none of %s" % (guard.brief(r["variant"], 40),
                                                                           guard.brief(r["dtype"]), ", ".join(ELEMENT)))
                key = (r["variant"], r["seq_k"])
                times.setdefault(key, (cache_bytes(r), []))[1].append(r["median_ms"])
    out = {}
    for (variant, nk), (b, ms) in sorted(times.items()):
        out.setdefault(variant, {})[nk] = (b, statistics.median(ms), ms)
    return out


def report(docs, start, copy_gbps):
    lines = []
    for variant, by_len in medians(docs).items():
        lines.append("%s (median over %d file(s) of each length's median, us):" % (variant, len(docs)))
        for nk, (b, med, ms) in by_len.items():
            lines.append("  Nk %7d  %7.1f MiB  %8.2f  (%s)" % (nk, b / 2**20, med * 1e3, " ".join("%.2f" % (m * 1e3) for m in ms)))
        points = [(b, med * 1e-3) for nk, (b, med, _) in by_len.items() if nk >= start]
        if len(points) < 2:
            lines.append("  fewer than two lengths >= %d: no fit" % start)
            continue
        if len({x for x, _ in points}) < 2:
            lines.append("  fewer than two cache sizes >= %d: no fit" % start)
            continue
        t0, per_byte = fit(points)
        if per_byte <= 0:
            lines.append("  fit over Nk >= %d: the time does not grow with the cache (t0 = %.2f us): no rate" % (
                start, t0 * 1e6))
            continue
        worst = max(abs(t0 + per_byte * x - y) for x, y in points)
        lines.append("  fit over Nk >= %d: t0 = %.2f us, rate = %.0f GB/s (largest residual %.2f us)" % (
            start, t0 * 1e6, 1e-9 / per_byte, worst * 1e6))
        if copy_gbps:
            for nk, (b, med, _) in by_len.items():
                if nk >= start:
                    allowed = b / (0.75 * copy_gbps * 1e9) - b * per_byte
                    lines.append("  75 %% of %.0f GB/s at Nk %d: %.2f us in all, so t0 <= %.2f us at this rate" % (
                        copy_gbps, nk, b / (0.75 * copy_gbps * 1e9) * 1e6, allowed * 1e6))
    return lines


def self_test():
    # Made-up rows on an exact line (t0 = 4 us, 3000 GB/s) must give it back.
    rows = []
    for nk in (8192, 16384, 32768):
        r = {"status": "ok", "stage": "11", "variant": "v", "batch": 1, "heads": 32, "heads_kv": 8, "seq_k": nk, "dim": 128,
             "dtype": "bfloat16"}
        r["median_ms"] = (4e-6 + cache_bytes(r) / 3000e9) * 1e3
        rows.append(r)
    text = "\n".join(report([{"results": rows}], 8192, 3000.0))
    ok = "t0 = 4.00 us, rate = 3000 GB/s" in text and "so t0 <= 3.73 us" in text
    print(text)
    print("self-test: %s" % ("as expected" if ok else "WRONG"))
    return 0 if ok else 1


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    ap = guard.OneLineParser(prog="fit_decode_floor.py", description="a decoding step as a fixed cost plus a rate")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--from", dest="start", default="8k")
    ap.add_argument("--copy-gbps", type=float, default=0.0)
    ap.add_argument("--plot", default="")
    ap.add_argument("--plot-to", type=float, default=64.0, help="the x axis's end, MiB")
    args = ap.parse_args(argv)
    try:
        start = size(args.start)
        docs = []
        for path in args.files:
            docs.append(read_results(path))
    except (OSError, ValueError) as e:
        print("fit_decode_floor.py: error: %s" % guard.one_line(e), file=sys.stderr)
        return 2
    if not (0 <= args.copy_gbps <= 1e6):
        raise guard.BadInput("--copy-gbps %g: not a bandwidth (0 to 1e6 GB/s)" % args.copy_gbps)
    try:
        lines = report(docs, start, args.copy_gbps)
    except (KeyError, TypeError, AttributeError) as e:
        print("fit_decode_floor.py: error: not a stage 11 results file (a row without %s)" % guard.one_line(e), file=sys.stderr)
        return 2
    except guard.BadInput as e:
        print("fit_decode_floor.py: error: not a stage 11 results file (%s)" % guard.one_line(e), file=sys.stderr)
        return 2
    if not lines:
        print("fit_decode_floor.py: error: no ok rows with median_ms in %s" % guard.one_line(", ".join(args.files)), file=sys.stderr)
        return 2
    print("\n".join(lines))
    if args.plot:
        try:
            plot(docs, start, args.copy_gbps, args.plot, args.plot_to)
        except ImportError:
            print("fit_decode_floor.py: error: --plot needs matplotlib (python3-matplotlib)", file=sys.stderr)
            return 2
        except OSError as e:
            print("fit_decode_floor.py: error: %s: %s" % (args.plot, e.strerror), file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main("fit_decode_floor.py", main, sys.argv[1:]))
