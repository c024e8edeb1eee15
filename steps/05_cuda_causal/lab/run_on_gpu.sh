#!/usr/bin/env bash
# run_on_gpu.sh — stage 05 on a GPU machine: its tests and exercise, compute-sanitizer on causal
# shapes with tails (Nq ≠ Nk both ways, every D), and the measurements behind docs/05_cuda_causal.md:
# the FlashAttention-paper shapes (B·N = 16384 tokens, H·D = 2048), N = 1k..16k, D = 64 and 128,
# causal, beside stage 04, one results file per D. Logs and results go to OUT; one line per step
# says how it ended; the exit status counts the failures.
#   steps/05_cuda_causal/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [all|tests|sanitize|sweep]
# Build first: cmake --build BUILD_DIR --target step05_cuda_causal test_step05 ex05_cuda_causal
#              ex05_cuda_causal_solution
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [all|tests|sanitize|sweep]} build=${2:-build} what=${3:-all}
exe=$build/steps/05_cuda_causal/step05_cuda_causal
mkdir -p "$out"
reps="--reps 10 --warmup 2"
failures=0
# run and merge: tools/lab_steps.sh
source "$(dirname "$0")/../../../tools/lab_steps.sh"

if [[ $what == tests || $what == all ]]; then
  run ctest ctest --test-dir "$build" -R "step05|ex05" --output-on-failure
  "$build/exercises/05_cuda_causal/ex05_cuda_causal" >"$out/ex05_starter.log" 2>&1
  echo "ex05 starter: exit $?, $(grep -o 'TODO(ex05:[a-z_]*)' "$out/ex05_starter.log" | sort -u | tr '\n' ' ')"
fi
if [[ $what == sanitize || $what == all ]]; then
  for d in 32 64 128; do
    run "memcheck_d$d" compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" --sweep 1,77,130 --seq-k 200 --dim $d \
        --heads 2 --reps 1 --warmup 0
    run "memcheck_square_d$d" compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" --sweep 77,130 --dim $d \
        --heads 2 --reps 1 --warmup 0 --no-verify
    run "racecheck_d$d" compute-sanitizer --tool racecheck --error-exitcode 99 "$exe" --sweep 77,300 --seq-k 130 --dim $d \
        --heads 2 --reps 1 --warmup 0 --no-verify
  done
fi
if [[ $what == sweep || $what == all ]]; then
  for d in 64 128; do
    h=$((2048 / d))
    files=()
    for n in 1024 2048 4096 8192 16384; do
      b=$((16384 / n))
      run "sweep_d${d}_n${n}" "$exe" --batch $b --heads $h --seq $n --dim $d --causal $reps \
          --json "$out/sweep_d${d}_n${n}.json"
      files+=("$out/sweep_d${d}_n${n}.json")
    done
    merge "$out/step05_d${d}.json" "${files[@]}"
  done
fi
echo "$failures failure(s); logs in $out"
exit $failures
