#!/usr/bin/env python3
"""draw_ring_timeline.py — chapter 13's ring as it ran: for each rank, when each step's attention
(the compute stream) and each hop of the K/V blocks (and, backward, of dK/dV) ran, from a file of
`step13_ring_attention --timeline FILE`.

    draw_ring_timeline.py TIMELINE.json [TIMELINE.json ...] [--out PNG]
    draw_ring_timeline.py --self-test

Two lanes per rank: compute above, hops below, each span labelled with its step. A hop drawn under
an attention span is hidden by it; one that sticks out past it is what the ring waits for. Several
files: one panel each, top to bottom. Default output: the first input's name with .png, beside it. Exit 2 with one line on a file that is not such a
timeline. --self-test draws a made-up timeline into a scratch folder and checks what it drew.
"""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from flashcourse import guard  # noqa: E402  (the JSON reader with limits, one-line errors)

COLOURS = {"attention": "C0", "backward": "C0", "K/V hop": "C1", "dK/dV hop": "C3"}
FIELDS = ("gpus", "split", "overlap", "pass", "heads", "seq", "dim", "causal", "dtype", "device", "spans")
MAX_GPUS = 64  # a ring of one host's GPUs; more would only make a panel too tall to draw
MAX_SPANS = 100000  # a few per step and GPU: far more than any run of the stage writes


def load(path: Path) -> dict:
    where = guard.one_line(path)
    try:
        doc = guard.read_json(path)
    except guard.BadInput as e:
        raise SystemExit(f"draw_ring_timeline.py: cannot read {e}")
    missing = [f for f in FIELDS if f not in doc] if isinstance(doc, dict) else list(FIELDS)
    if missing:
        raise SystemExit(f"draw_ring_timeline.py: {where} is not a step13_ring_attention --timeline file "
                         f"(missing {', '.join(missing)})")
    try:
        guard.number(doc["gpus"], "gpus", 1, MAX_GPUS, integer=True)
        if not isinstance(doc["spans"], list) or len(doc["spans"]) > MAX_SPANS:
            raise guard.BadInput(f"spans should be a list of at most {MAX_SPANS}, got {guard.brief(doc['spans'])}")
        for n, s in enumerate(doc["spans"]):
            if not isinstance(s, dict) or not all(k in s for k in ("rank", "lane", "what", "step", "start_ms", "end_ms")):
                raise guard.BadInput(f"spans[{n}]: not a span with rank, lane, what, step, start_ms, end_ms")
            guard.number(s["rank"], f"spans[{n}].rank", 0, doc["gpus"] - 1, integer=True)
            guard.number(s["step"], f"spans[{n}].step", 0, MAX_SPANS, integer=True)
            for key in ("start_ms", "end_ms"):
                guard.number(s[key], f"spans[{n}].{key}", -1e9, 1e9)
            for key in ("lane", "what"):
                if not isinstance(s[key], str):
                    raise guard.BadInput(f"spans[{n}].{key} should be text, got {guard.brief(s[key])}")
    except guard.BadInput as e:
        raise SystemExit(f"draw_ring_timeline.py: {where}: {e}")
    return doc


def draw_panel(ax, doc: dict):
    gpus = doc["gpus"]
    rows = []  # (y, label)
    for rank in range(gpus):
        for lane_index, lane in enumerate(("compute", "hop")):
            y = (gpus - 1 - rank) * 2.5 + (1 - lane_index) * 1.0
            rows.append((y, f"GPU {rank} {lane}"))
            for s in doc["spans"]:
                if s["rank"] != rank or s["lane"] != lane:
                    continue
                width = max(s["end_ms"] - s["start_ms"], 1e-6)
                ax.barh(y, width, left=s["start_ms"], height=0.8, color=COLOURS.get(s["what"], "0.5"),
                        edgecolor="black", linewidth=0.4, label=guard.label(s["what"]))
                ax.text(s["start_ms"] + width / 2, y, str(s["step"]), ha="center", va="center", fontsize=7)
    ax.set_xlim(left=min([0.0] + [s["start_ms"] for s in doc["spans"]]))
    ax.set_yticks([y for y, _ in rows], [label for _, label in rows], fontsize=8)
    ax.set_xlabel("ms from the run's start on each GPU", fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    hops = "overlapped" if doc["overlap"] else "after each step"
    title = (f"stage 13 ring, {doc['pass']}: {gpus} GPUs ({doc['device']}), {doc['split']} split, hops {hops}; "
             f"N = {doc['seq']}, H = {doc['heads']}, D = {doc['dim']}, {doc['dtype']}{', causal' if doc['causal'] else ''}")
    ax.set_title(guard.label(title, 200), fontsize=9)  # the file's words drawn as they are, on one line


def draw(docs: list, out: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights = [1.0 + 0.9 * d["gpus"] for d in docs]
    fig, axes = plt.subplots(len(docs), 1, figsize=(10, sum(heights) + 0.4 * len(docs)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, doc in zip(axes[:, 0], docs):
        draw_panel(ax, doc)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return fig, axes[:, 0]


def self_test() -> int:
    spans = []
    for rank in range(2):
        for step in range(2):
            spans.append({"rank": rank, "lane": "compute", "what": "attention", "step": step,
                          "start_ms": 10.0 * step, "end_ms": 10.0 * step + 9.5})
        spans.append({"rank": rank, "lane": "hop", "what": "K/V hop", "step": 1, "start_ms": 0.1, "end_ms": 3.0})
    doc = {"device": "made-up GPU", "gpus": 2, "split": "zigzag", "transport": "nccl", "overlap": True, "pass": "fwd",
           "batch": 1, "heads": 16, "seq": 4096, "dim": 128, "causal": True, "dtype": "bfloat16", "spans": spans}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.json"
        src.write_text(json.dumps(doc))
        _, axes = draw([load(src), load(src)], Path(tmp) / "t.png")
        ok = all(len(ax.patches) == len(spans) for ax in axes) and len(axes) == 2
        ok = ok and (Path(tmp) / "t.png").stat().st_size > 1000
        bad = Path(tmp) / "bad.json"
        bad.write_text(json.dumps({"spans": []}))
        try:
            load(bad)
            ok = False
        except SystemExit as e:
            ok = ok and "not a step13_ring_attention --timeline file" in str(e)
    print("draw_ring_timeline self-test:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main() -> int:
    ap = guard.OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("timeline", nargs="*", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.timeline:
        print("draw_ring_timeline.py: error: give a timeline file (step13_ring_attention --timeline FILE)", file=sys.stderr)
        return 2
    try:
        docs = [load(t) for t in args.timeline]
    except SystemExit as e:
        print(guard.one_line(e), file=sys.stderr)
        return 2
    out = args.out or args.timeline[0].with_suffix(".png")
    draw(docs, out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main("draw_ring_timeline.py", main))
