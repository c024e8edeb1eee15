#!/usr/bin/env bash
# run_on_gpu.sh — stage 10 on a GPU machine (compute capability 9.0: an H100 or H200): its tests,
# compute-sanitizer (memcheck, racecheck, synccheck) at awkward shapes with grouped heads, and the
# timing of the ladder's rungs beside stage 08 at the FlashAttention-paper shapes (B·N = 16384
# tokens, H·D = 2048), N = 4k and 16k, D = 64, 128 and 256 (the stage's kernel alone there), causal
# and not, one results file each; and (profile, not in all) Nsight Compute on the stage's key-tile
# kernel and stage 08's at N = 4k: the sections and the SASS lines where the warps' stall samples
# fall; and (ab, not in all) two variants timed in alternating rounds, A B B A, at the paper shapes
# (gains of a few percent are inside the spread between processes, which alternation averages out);
# and (power, not in all) the same two variants at D = 128, 16k, causal, timed 5, 20, 50 and 200 times,
# with nvidia-smi's clock, power and throttle reasons sampled beside them.
# Logs and results go to OUT; one line per step says how it ended; the exit status counts the failures.
#   steps/10_hopper_backward/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [all|tests|sanitize|time|profile]
#   steps/10_hopper_backward/lab/run_on_gpu.sh OUT BUILD_DIR ab [VARIANT_A (heavy_first)] [VARIANT_B (deterministic)] [LENGTHS (4k,16k)]
#   steps/10_hopper_backward/lab/run_on_gpu.sh OUT BUILD_DIR power [VARIANT_A] [VARIANT_B]
# Build first: cmake --build BUILD_DIR --target step10_hopper_backward test_step10
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [all|tests|sanitize|time|profile|ab|power]} build=${2:-build} what=${3:-all}
variant_a=${4:-heavy_first} variant_b=${5:-deterministic} ab_lengths=${6:-4k,16k}
exe=$build/steps/10_hopper_backward/step10_hopper_backward
mkdir -p "$out/logs"
failures=0
run() {  # run NAME COMMAND...: COMMAND's output into OUT/logs/NAME.txt, one line of how it ended
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/logs/$name.txt" 2>&1
  local code=$?
  echo "$name: exit $code, $((SECONDS - start)) s"
  [ $code -eq 0 ] || failures=$((failures + 1))
}
want() { [ "$what" = all ] || [ "$what" = "$1" ]; }

if want tests; then
  run ctest ctest --test-dir "$build" -R "step10|test_step10|ex10" --output-on-failure
fi
# Every rung (and at D = 256 the stage's kernel) under the three sanitizers: tails of both tile
# sizes, Nq ≠ Nk both ways, causal, grouped heads (Hq = 4, Hkv = 2: rungs 1 and 2 skip them), more
# than two query tiles per key tile (the buffers' phases wrap), several key tiles of 192 (rung 6).
if want sanitize; then
  for tool in memcheck racecheck synccheck; do
    for d in 64 128 256; do
      for shape in "--seq-q 200 --seq-k 450" "--seq-q 333 --seq-k 130"; do
        run ${tool}_d${d}_${shape//[^0-9]/_} compute-sanitizer --tool $tool --error-exitcode 99 "$exe" --dim $d \
            $shape --heads 4 --heads-kv 2 --causal --reps 1 --warmup 0 --no-verify
      done
    done
  done
fi
# The rung and stage 08 at the paper shapes, verified (sampled rows) and timed.
if want time; then
  for d in 64 128 256; do
    for causal in "" "--causal"; do
      run time_d$d${causal:+_causal} "$exe" --paper-shapes --dim $d --sweep 4k,16k $causal --reps 20 \
          --json "$out/step10_d$d${causal:+_causal}.json"
    done
  done
fi
# Where the time goes (not in all: needs Nsight Compute with access to the counters). One launch of
# each key-tile kernel; --clock-control none leaves the clocks as the timing runs find them.
if [ "$what" = profile ]; then
  sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
            --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats
            --section Occupancy --section LaunchStats --section SourceCounters"
  for d in 64 128; do
    for kernel in backward_dq_tma_kernel backward_tc_kernel; do
      name=${kernel}_d$d
      # shellcheck disable=SC2086  # the sections are separate words
      # --variant split_tail: the stage's kernel (rung 14) is the first launch of backward_dq_tma_kernel.
      run ncu_$name ncu --clock-control none -k "regex:$kernel" --launch-count 1 $sections --import-source no \
          -o "$out/$name" -f "$exe" --paper-shapes --dim $d --sweep 4k --reps 1 --warmup 0 --no-verify \
          --variant split_tail
      ncu -i "$out/$name.ncu-rep" --print-details all >"$out/$name.txt" 2>&1
      ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.sass.csv" 2>/dev/null
      python3 "$(dirname "$0")/top_stalls.py" "$out/$name.sass.csv" >"$out/$name.top_stalls.txt"
    done
  done
fi
# Two variants, A B B A, each file one variant at one head dim and mask, N = 4k and 16k (or LENGTHS), not verified
# (the tests and `time` verify): compare each shape's TFLOP/s as the mean of its two rounds.
if [ "$what" = ab ]; then
  for d in 64 128; do
    for causal in "" "--causal"; do
      for v in "$variant_a" "$variant_b" "$variant_b" "$variant_a"; do
        n=1
        [ -e "$out/ab_${v}_d$d${causal:+_causal}_1.json" ] && n=2
        run ab_${v}_d$d${causal:+_causal}_$n "$exe" --paper-shapes --dim $d --sweep "$ab_lengths" $causal --variant "$v" \
            --no-verify --reps 20 --json "$out/ab_${v}_d$d${causal:+_causal}_$n.json"
      done
    done
  done
fi
# The board's power budget: a kernel that draws all of it runs its first repetitions at the full clock
# and the later ones slower, so its median falls as the timed runs grow (power_table.py).
if [ "$what" = power ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader \
      -lms 100 >"$out/power_smi.csv" 2>&1 &
  smi=$!
  for round in 1 2 3; do
    for reps in 5 20 50 200; do
      for v in "$variant_a" "$variant_b"; do
        run power_${v}_r${reps}_$round "$exe" --paper-shapes --dim 128 --sweep 16k --causal --variant "$v" \
            --no-verify --reps $reps --json "$out/power_${v}_r${reps}_$round.json"
      done
    done
  done
  kill $smi
  python3 "$(dirname "$0")/power_table.py" "$out" | tee "$out/power_table.md"
fi
echo "$failures step(s) failed"
exit $((failures > 0))
