#!/usr/bin/env bash
# run_on_gpu.sh — stage 04 on a GPU machine: its tests and exercise, compute-sanitizer on small
# shapes, ncu and the register-budget table (lab/tune.cu), and the measurements behind
# docs/04_cuda_flash_forward.md: the FlashAttention-paper shapes (B·N = 16384 tokens, H·D = 2048),
# N = 1k..16k, D = 64 and 128, non-causal, beside stage 03, one results file per D; `long`: one head
# of 1M tokens. Logs and results go to OUT; one line per step says how it ended; the exit status
# counts the failures.
#   steps/04_cuda_flash_forward/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [all|tests|sanitize|ncu|tune|sweep|long]
# (NCU=0 leaves ncu out of `all`.)
# Build first: cmake --build BUILD_DIR --target step04_cuda_flash_forward test_step04 test_step04_ladder
#              test_step04_no_cp_async step04_tune ex04_cuda_flash_forward ex04_cuda_flash_forward_solution
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [all|tests|sanitize|ncu|tune|sweep|long]} build=${2:-build} what=${3:-all}
s4=$build/steps/04_cuda_flash_forward
exe=$s4/step04_cuda_flash_forward
mkdir -p "$out"
reps="--reps 10 --warmup 2"
failures=0
# run and merge: tools/lab_steps.sh
source "$(dirname "$0")/../../../tools/lab_steps.sh"

if [[ $what == tests || $what == all ]]; then
  run ctest ctest --test-dir "$build" -R "step04|ex04" --output-on-failure
  # The starter must fail naming one of its TODOs (the course check proves the same).
  "$build/exercises/04_cuda_flash_forward/ex04_cuda_flash_forward" >"$out/ex04_starter.log" 2>&1
  echo "ex04 starter: exit $?, $(grep -o 'TODO(ex04:[a-z_]*)' "$out/ex04_starter.log" | sort -u | tr '\n' ' ')"
fi
if [[ $what == sanitize || $what == all ]]; then
  run memcheck compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" --seq-q 77 --seq-k 130 --dim 64 --heads 2 \
      --reps 1 --warmup 0 --variant flash
  run synccheck compute-sanitizer --tool synccheck --error-exitcode 99 "$exe" --seq 130 --dim 128 --heads 2 --reps 1 \
      --warmup 0 --variant flash --no-verify
  run racecheck compute-sanitizer --tool racecheck --error-exitcode 99 "$exe" --seq-q 77 --seq-k 300 --dim 64 --heads 2 \
      --reps 1 --warmup 0 --variant flash --no-verify
fi
if [[ $what == ncu || ( $what == all && ${NCU:-1} != 0 ) ]]; then
  for d in 64 128; do
    ncu --clock-control none --set full -k regex:flash --launch-count 1 -o "$out/prof$d" "$s4/step04_tune" --profile $d \
      >/dev/null 2>&1
    ncu --import "$out/prof$d.ncu-rep" --page details >"$out/ncu$d.txt" 2>&1
    rm -f "$out/prof$d.ncu-rep"
    echo "ncu D=$d: $(grep -E '^\s+(Duration|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy)\s' "$out/ncu$d.txt" | awk '{$1=$1};1' | tr '\n' ';')"
  done
fi
if [[ $what == tune || $what == all ]]; then
  run tune "$s4/step04_tune" 4096
fi
if [[ $what == sweep || $what == all ]]; then
  for d in 64 128; do
    h=$((2048 / d))
    files=()
    for n in 1024 2048 4096 8192 16384; do
      b=$((16384 / n))
      run "sweep_d${d}_n${n}" "$exe" --batch $b --heads $h --seq $n --dim $d $reps --json "$out/sweep_d${d}_n${n}.json"
      files+=("$out/sweep_d${d}_n${n}.json")
    done
    merge "$out/step04_d${d}.json" "${files[@]}"
  done
fi
if [[ $what == long ]]; then
  # One head of 1M tokens: stage 03 would need 2 x 4 TB for S and P; stage 04 needs nothing extra.
  run long "$exe" --batch 1 --heads 1 --seq 1M --dim 64 --reps 1 --warmup 0 --json "$out/step04_1M.json"
fi
echo "$failures failure(s); logs in $out"
exit $failures
