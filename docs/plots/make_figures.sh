#!/bin/sh
# make_figures.sh — regenerate every committed figure in docs/figures from docs/results, in one go.
#
#   docs/plots/make_figures.sh            replace docs/figures/*.png with what it makes (nothing else)
#   docs/plots/make_figures.sh OUT_DIR    write the figures to OUT_DIR instead (a check; docs/figures
#                                         is left alone)
#   cmake --build build --target figures  the first form, with the Python that CMake found
#
# PYTHON (default /usr/bin/python3) must have matplotlib. Each set of four figures (PREFIX_memory,
# _time, _tflops, _progression .png) comes from the results files listed below, which the chapters
# name under their figures; a listed file that is missing stops it (exit 2, the tool's one line).
# The figures are drawn in a scratch folder first; docs/figures is replaced only when every set was
# drawn, so each PNG there comes from this script and a PNG it no longer makes is removed.
# Chapter 00's roofline (00_roofline.png) is drawn by draw_attention_roofline.py, chapter 04's ladder
# (04_ladder.png) by draw_flash_ladder.py.
# Chapter 07's layout figures (07_*.png) are drawn from the PTX ISA's rules, not from results, by
# draw_tensor_core_layouts.py; chapter 11's step time (11_decode_time.png) by draw_decode_time.py
# and its fixed cost and rate (11_decode_floor.png) by fit_decode_floor.py;
# chapter 13's schedule (13_ring_schedule.png, counted, not measured) by draw_ring_schedule.py.
# Deterministic: the same results files and matplotlib give the same PNG bytes.
# The tool's notes (rows not drawn and why) are printed as they come.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
docs=$(dirname "$here")
results="$docs/results"
tool="$here/plot_results.py"
python=${PYTHON:-/usr/bin/python3}
dest=${1:-$docs/figures}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/make_figures.XXXXXX")
trap 'rm -rf "$scratch"' EXIT INT TERM

# One set: PREFIX, DEVICE (the tool's --device, or - for every device), then the results files
# (names in docs/results).
set_of() {
  prefix=$1
  device=$2
  shift 2
  args=""
  for f in "$@"; do
    args="$args $results/$f"
  done
  if [ "$device" != - ]; then
    args="$args --device $device"
  fi
  echo "== $prefix"
  # shellcheck disable=SC2086  # the file names have no spaces: they are the course's own
  "$python" "$tool" $args --out "$scratch" --prefix "$prefix" >/dev/null
}

# Chapter 00: attention on the roofline (stages 03, 04 and 07 and PyTorch's kernels at N = 4096, D = 64).
echo "== 00 roofline"
"$python" "$here/draw_attention_roofline.py" --fp32 "$results/step04_d64.json" --bf16 "$results/compare_07_h100.json" \
  --out "$scratch" >/dev/null

# Chapter 02: stages 01 and 02 on a 2-core Xeon.
set_of cpu - step01_xeon-2core.json step02_xeon-2core.json
# The chapters show only some figures of a set; the others are not kept.
rm -f "$scratch/cpu_progression.png" "$scratch/cpu_tflops.png"
# Chapter 03: stage 03 run until it runs out of device memory.
set_of h100_step03_oom H100 step03_find_oom_b1_h32_d64.json
rm -f "$scratch/h100_step03_oom_progression.png" "$scratch/h100_step03_oom_tflops.png" "$scratch/h100_step03_oom_time.png"
# Chapters 03-05: the FlashAttention-paper shapes (B·N = 16k tokens), D = 64 and D = 128.
set_of h100_d64 H100 step03_paper_d64.json step04_d64.json step05_d64.json
set_of h100_d128 H100 step03_paper_d128.json step04_d128.json step05_d128.json
rm -f "$scratch/h100_d64_progression.png" "$scratch/h100_d64_time.png" \
  "$scratch/h100_d128_memory.png" "$scratch/h100_d128_progression.png" "$scratch/h100_d128_time.png"
# Chapter 04: the ladder, every rung at the paper shape N = 4096, TFLOP/s on a linear axis.
echo "== 04 ladder"
"$python" "$here/draw_flash_ladder.py" "$results/step04_ladder_d64.json" "$results/step04_ladder_d128.json" \
  --out "$scratch" >/dev/null
# Chapter 06: the backward at the paper shapes, D = 64, with the deterministic dQ.
set_of h100_bwd_d64 H100 step06_d64.json step06_d64_causal.json step06_d64_causal_deterministic.json
rm -f "$scratch/h100_bwd_d64_progression.png" "$scratch/h100_bwd_d64_time.png"

# Chapter 07: the ladder at the paper shape N = 4096 (progression only, as chapter 04's), and the
# stage beside PyTorch's SDPA backends measured in one run by tools/compare_pytorch.py (TFLOP/s only).
set_of h100_07_ladder H100 step07_ladder_d64.json step07_ladder_d128.json
rm -f "$scratch/h100_07_ladder_memory.png" "$scratch/h100_07_ladder_time.png" "$scratch/h100_07_ladder_tflops.png"
set_of h100_07_vs_pytorch H100 compare_07_h100.json
rm -f "$scratch/h100_07_vs_pytorch_memory.png" "$scratch/h100_07_vs_pytorch_time.png" \
  "$scratch/h100_07_vs_pytorch_progression.png"

# Chapter 08: the ladder at N = 4096 (progression only), and the backward beside PyTorch's flash and
# cuDNN backward, one run (TFLOP/s only).
set_of h100_08_ladder H100 step08_ladder_d64.json step08_ladder_d128.json
rm -f "$scratch/h100_08_ladder_memory.png" "$scratch/h100_08_ladder_time.png" "$scratch/h100_08_ladder_tflops.png"
set_of h100_08_vs_pytorch H100 compare_08_h100.json
rm -f "$scratch/h100_08_vs_pytorch_memory.png" "$scratch/h100_08_vs_pytorch_time.png" \
  "$scratch/h100_08_vs_pytorch_progression.png"

# Chapter 09: the top Hopper rung beside stage 07 and PyTorch's flash and cuDNN, one run (TFLOP/s only),
# the run whose table the chapter quotes (after the persistent rung's causal schedule changed).
set_of h100_09_vs_pytorch H100 compare_09_persistent_h100.json
rm -f "$scratch/h100_09_vs_pytorch_memory.png" "$scratch/h100_09_vs_pytorch_time.png" \
  "$scratch/h100_09_vs_pytorch_progression.png"

# Chapter 11: a step's time against the memory floor, from the decoding comparison (tools/compare_decode.py).
echo "== 11 decode time"
"$python" "$here/draw_decode_time.py" "$results/compare_11_decode_h100.json" --out "$scratch" >/dev/null
# ... and a step as a fixed cost plus a rate, from the sweep of the cache's length (three rounds).
echo "== 11 decode floor"
"$python" "$here/fit_decode_floor.py" "$results"/step11_push_h100/step11_intercept_[123].json --copy-gbps 3029 \
  --plot "$scratch/11_decode_floor.png" >/dev/null

# Chapter 13: the ring's schedule on the attention matrix, counted from the schedule's rules.
echo "== 13 ring schedule"
"$python" "$here/draw_ring_schedule.py" --out "$scratch" >/dev/null
# ... and as it ran: the measured timelines of the ring on two GPUs (forward and backward, the
# hops under the steps and after them).
echo "== 13 ring timeline"
timelines="$results/step13_timelines"
"$python" "$here/draw_ring_timeline.py" "$timelines/step13_timeline_fwd_h200x2.json" \
  "$timelines/step13_timeline_fwd_serial_h200x2.json" "$timelines/step13_timeline_bwd_h200x2.json" \
  "$timelines/step13_timeline_bwd_serial_h200x2.json" --out "$scratch/13_ring_timeline.png" >/dev/null

# Chapter 07: the tensor-core layouts (fragments, C -> A, ldmatrix, swizzle), from the rules alone.
echo "== 07 layouts"
"$python" "$here/draw_tensor_core_layouts.py" --out "$scratch" >/dev/null

mkdir -p "$dest"
rm -f "$dest"/*.png
cp "$scratch"/*.png "$dest"/
ls "$dest"/*.png
