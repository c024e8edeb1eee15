#!/usr/bin/env bash
# run_on_gpu.sh — stage 06 on a GPU machine: its tests and exercise, compute-sanitizer, the
# benchmarks behind docs/results/step06_*.json and docs/06_cuda_backward.md, and the profile the
# chapter quotes, so that every committed figure says which command made it. Logs and results go to
# OUT; one line per step says how it ended; the exit status counts the failures.
#   steps/06_cuda_backward/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [STEP ...]
# STEP (default: tests sanitize bench-quick):
# tests       ctest -R "step06|ex06" (the stage's doctests and command-line checks, the exercise);
#             the exercise's starter must fail naming a TODO
# sanitize    compute-sanitizer memcheck on a small causal case with tails (both dQ modes)
# bench-quick paper shapes (B·N = 16384 tokens, H·D = 2048) at N = 4096, D = 64 and 128, causal on/off
# bench       the same at N = 1024..8192 (the committed docs/results/step06_*.json), and --deterministic
#             (its rows are variant "flash-deterministic" in the results files)
# plots       docs/plots/plot_results.py over the bench results (needs matplotlib)
# ncu         Nsight Compute on one key-tile kernel launch (D = 64 and 128, N = 4096), clocks left alone
# Build first: cmake --build BUILD_DIR --target step06_cuda_backward test_step06 test_step06_no_cp_async
#              ex06_cuda_backward ex06_cuda_backward_solution
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [STEP ...]} build=${2:-build}
shift $(($# < 2 ? $# : 2))
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests sanitize bench-quick)
exe=$build/steps/06_cuda_backward/step06_cuda_backward
mkdir -p "$out"
failures=0
# run and merge: tools/lab_steps.sh
source "$(dirname "$0")/../../../tools/lab_steps.sh"
for what in "${steps[@]}"; do
  case $what in
    tests)
      run ctest ctest --test-dir "$build" -R "step06|ex06" --output-on-failure
      "$build/exercises/06_cuda_backward/ex06_cuda_backward" >"$out/ex06_starter.log" 2>&1
      echo "ex06 starter: exit $?, $(grep -o 'TODO(ex06:[a-z]*)' "$out/ex06_starter.log" | sort -u | tr '\n' ' ')"
      ;;
    sanitize)
      for flag in "" --deterministic; do
        run "memcheck${flag}" compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" --seq-q 130 --seq-k 77 \
            --heads 2 --dim 64 --causal --reps 1 --warmup 0 $flag
      done
      ;;
    bench-quick | bench)
      sweep=4096
      [ "$what" = bench ] && sweep=1024,2048,4096,8192
      for d in 64 128; do
        for c in "" --causal; do
          name=step06_d${d}${c:+_causal}
          run "$name" "$exe" --paper-shapes --dim $d $c --sweep $sweep --json "$out/$name.json"
        done
      done
      if [ "$what" = bench ]; then
        for d in 64 128; do
          name=step06_d${d}_causal_deterministic
          run "$name" "$exe" --paper-shapes --dim $d --causal --deterministic --sweep 1024,4096 --json "$out/$name.json"
        done
      fi
      ;;
    plots)
      run plots python3 docs/plots/plot_results.py "$out/step06_d64.json" "$out/step06_d64_causal.json" \
          "$out/step06_d128.json" "$out/step06_d128_causal.json" --out "$out/plots" --prefix step06
      ;;
    ncu)
      for d in 64 128; do
        run "ncu_d$d" ncu --clock-control none --kernel-name regex:backward_kv_kernel --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            --section Occupancy --section WarpStateStats --section InstructionStats --section LaunchStats \
            "$exe" --paper-shapes --dim $d --causal --seq 4096 --reps 3 --warmup 0 --no-verify --variant flash
        echo "  $(grep -E 'Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Duration' "$out/ncu_d$d.log" | tr -s ' ' | tr '\n' ';')"
      done
      ;;
    *)
      echo "run_on_gpu.sh: unknown step '$what' (tests sanitize bench-quick bench plots ncu)" >&2
      exit 2
      ;;
  esac
done
echo "$failures failure(s); logs in $out"
exit $failures
