#!/usr/bin/env python3
"""draw_ring_schedule.py — chapter 13's ring drawn on the attention matrix: which GPU computes each
block of (query chunk, key chunk), and at which step of the ring its keys arrive there, for the
contiguous and the zigzag split of a causal sequence. Drawn from the schedule (counted, not
measured), the same rules as steps/13_ring_attention/ring_schedule.cpp.

    draw_ring_schedule.py [--gpus 4] [--out DIR]        DIR/13_ring_schedule.png (default DIR: docs/figures)
    draw_ring_schedule.py --check EXE                   compare this file's schedule with the table that
                                                        EXE (step13_ring_schedule) prints; exit 1 if they differ,
                                                        2 (one line) when EXE cannot run or fails

The matrix is cut into 2P × 2P chunks (contiguous: each GPU's chunk is two of them). A cell is
coloured by the GPU that computes it (the one holding its queries) and labelled with the step at
which its key block reaches that GPU; cells above the diagonal are skipped, diagonal cells are
half-masked. The busiest GPU's work per step is what each step costs.
"""
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tools"))
from flashcourse import guard  # noqa: E402  (one-line errors, exit 2)


# ---- the schedule (ring_schedule.cpp, in Python) -----------------------------------------------

def cut(tokens, pieces):
    base, longer = divmod(tokens, pieces)
    chunks, begin = [], 0
    for c in range(pieces):
        length = base + (1 if c < longer else 0)
        chunks.append((begin, length))
        begin += length
    return chunks


def rank_chunks(tokens, gpus, split, rank):
    if split == "contiguous":
        return [cut(tokens, gpus)[rank]]
    chunks = cut(tokens, 2 * gpus)
    return [chunks[rank], chunks[2 * gpus - 1 - rank]]


def block_owner(rank, step, gpus):
    return (rank - step) % gpus


def classify(q, k, causal):
    (qb, ql), (kb, kl) = q, k
    if ql == 0 or kl == 0:
        return "skipped"
    if not causal or kb + kl - 1 <= qb:
        return "full"
    if kb > qb + ql - 1:
        return "skipped"
    if q == k:
        return "diagonal"
    raise ValueError("chunks that overlap without being the same")


def visible_pairs(q, k, causal):
    kind = classify(q, k, causal)
    return q[1] * k[1] if kind == "full" else q[1] * (q[1] + 1) // 2 if kind == "diagonal" else 0


def step_work(tokens, gpus, split, causal, rank, step):
    keys = rank_chunks(tokens, gpus, split, block_owner(rank, step, gpus))
    return sum(visible_pairs(q, k, causal) for q in rank_chunks(tokens, gpus, split, rank) for k in keys)


def letters(tokens, gpus, split, causal, rank, step):
    keys = rank_chunks(tokens, gpus, split, block_owner(rank, step, gpus))
    code = {"full": "F", "diagonal": "D", "skipped": "."}
    return "".join(code[classify(q, k, causal)] for q in rank_chunks(tokens, gpus, split, rank) for k in keys)


def imbalance(tokens, gpus, split, causal):
    total = critical = 0
    for step in range(gpus):
        work = [step_work(tokens, gpus, split, causal, r, step) for r in range(gpus)]
        total += sum(work)
        critical += max(work)
    return critical * gpus / total


# ---- the check against the C++ tool -------------------------------------------------------------

def schedule_table(args):
    """What `args` (step13_ring_schedule and its options) prints; guard.BadInput when it cannot run,
    fails or hangs: the check needs the tool's table, and anything else is a wrong --check."""
    shown = guard.one_line(" ".join(args))
    try:
        proc = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=60,
                              stdin=subprocess.DEVNULL)
    except OSError as e:
        raise guard.BadInput("cannot run %s (%s)" % (guard.one_line(args[0]), e.strerror or e)) from None
    except subprocess.TimeoutExpired:
        raise guard.BadInput("%s: no end within 60 s" % shown) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise guard.BadInput("%s exited %d (%s)" % (shown, proc.returncode, guard.one_line(last)))
    return proc.stdout


def check(exe):
    row = re.compile(r"^\s+(\d+)\s+(.*?)\s+([0-9.e+-]+)\s*$")
    cell = re.compile(r"K/V (\d+) ([FD.]+) ([0-9.e+-]+)")
    ok = True
    for gpus, tokens in ((2, 1000), (4, 4096), (5, 333)):
        for split in ("zigzag", "contiguous"):
            for causal in (True, False):
                args = [exe, "--gpus", str(gpus), "--seq", str(tokens), "--split", split, "--model-seq", "0"]
                out = schedule_table(args + (["--causal"] if causal else []))
                steps = 0
                for line in out.splitlines():
                    m = row.match(line)
                    if not m or "GPU" in line:
                        continue
                    step = int(m.group(1))
                    cells = cell.findall(m.group(2))
                    for rank, (owner, kinds, work) in enumerate(cells):
                        want = (block_owner(rank, step, gpus), letters(tokens, gpus, split, causal, rank, step),
                                step_work(tokens, gpus, split, causal, rank, step) / 1e6)
                        got = (int(owner), kinds, float(work))
                        if got[:2] != want[:2] or abs(got[2] - want[2]) > 0.0051 * max(want[2], 1e-9) + 5e-4:
                            print(f"differs: P={gpus} N={tokens} {split} causal={causal} step {step} GPU {rank}: "
                                  f"tool {got}, here {want}")
                            ok = False
                    steps += 1
                imb = re.search(r"imbalance ([0-9.]+)", out)
                if steps != gpus or not imb or abs(float(imb.group(1)) - imbalance(tokens, gpus, split, causal)) > 6e-4:
                    print(f"differs: P={gpus} N={tokens} {split} causal={causal}: {steps} steps read, "
                          f"imbalance {imb.group(1) if imb else '?'} vs {imbalance(tokens, gpus, split, causal):.3f}")
                    ok = False
    print("draw_ring_schedule check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


# ---- the figure ---------------------------------------------------------------------------------

def draw(gpus, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon, Rectangle

    pieces = 2 * gpus
    tokens = pieces * 1024
    chunks = cut(tokens, pieces)
    colours = [plt.get_cmap("tab10")(r) for r in range(gpus)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.6))
    for ax, split in zip(axes, ("contiguous", "zigzag")):
        holder = {}  # chunk index -> GPU
        for r in range(gpus):
            for c in rank_chunks(tokens, gpus, split, r):
                for i, piece in enumerate(chunks):  # a contiguous chunk covers two pieces
                    if piece[0] >= c[0] and piece[0] + piece[1] <= c[0] + c[1]:
                        holder[i] = r
        for qi in range(pieces):
            for kj in range(pieces):
                x, y = kj, pieces - 1 - qi
                r, owner = holder[qi], holder[kj]
                step = (r - owner) % gpus
                if kj > qi:
                    ax.add_patch(Rectangle((x, y), 1, 1, facecolor="white", edgecolor="0.85", linewidth=0.5))
                    continue
                if kj == qi:  # the lower-left triangle is visible
                    ax.add_patch(Rectangle((x, y), 1, 1, facecolor="white", edgecolor="0.85", linewidth=0.5))
                    ax.add_patch(Polygon([(x, y), (x, y + 1), (x + 1, y)], closed=True, facecolor=colours[r],
                                         alpha=0.85, edgecolor="black", linewidth=0.5))
                    ax.text(x + 0.3, y + 0.3, str(step), ha="center", va="center", fontsize=8, color="white")
                    continue
                ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colours[r], alpha=0.85, edgecolor="black", linewidth=0.5))
                ax.text(x + 0.5, y + 0.5, str(step), ha="center", va="center", fontsize=9, color="white")
        ax.set_xlim(0, pieces)
        ax.set_ylim(0, pieces)
        ax.set_aspect("equal")
        ax.set_xticks([i + 0.5 for i in range(pieces)], [f"K{holder[i]}" for i in range(pieces)], fontsize=8)
        ax.set_yticks([pieces - 1 - i + 0.5 for i in range(pieces)], [f"Q{holder[i]}" for i in range(pieces)], fontsize=8)
        ax.set_xlabel("keys (chunks; Kr: GPU r's block)")
        ax.set_ylabel("queries (chunks; Qr: kept by GPU r)")
        ax.set_title(f"{split}: imbalance {imbalance(tokens, gpus, split, True):.2f}", fontsize=10)
    handles = [Rectangle((0, 0), 1, 1, facecolor=colours[r], alpha=0.85) for r in range(gpus)]
    fig.legend(handles, [f"GPU {r}" for r in range(gpus)], loc="lower center", ncol=gpus, fontsize=9)
    fig.suptitle(f"Causal ring attention on {gpus} GPUs: who computes each block, and at which step its keys "
                 f"arrive (the number)\ncounted from the schedule (steps/13_ring_attention/ring_schedule.cpp), "
                 f"not measured", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.92))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "13_ring_schedule.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    print(path)


def main():
    ap = guard.OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--out", type=Path, default=HERE.parent / "figures")
    ap.add_argument("--check", metavar="EXE")
    args = ap.parse_args()
    if args.check:
        return check(args.check)
    if not 1 <= args.gpus <= 10:
        print("draw_ring_schedule.py: --gpus must be 1 to 10", file=sys.stderr)
        return 2
    draw(args.gpus, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(guard.run_main("draw_ring_schedule.py", main))
