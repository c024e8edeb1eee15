#!/usr/bin/env bash
# device_check.sh — stage 11 on a GPU machine, after building (targets: step11_ring_attention
# test_step11 test_step11_two_gpus). Prints one summary line per step; logs go to OUT.
#   steps/11_ring_attention/device_check.sh BUILD_DIR OUT_DIR one   one GPU: the rings of 1-4 ranks (copy
#                                                                  transport), the CLI tests, compute-sanitizer
#   steps/11_ring_attention/device_check.sh BUILD_DIR OUT_DIR two   two GPUs: NCCL, then the speed-up runs
#                                                                  (1 and 2 GPUs in one call, JSON into OUT)
set -uo pipefail
b=$1 out=$2 mode=${3:-one}
s=$b/steps/11_ring_attention
export NCCL_NVLS_ENABLE=0  # the machines' rule (KINDS.md): NVLink multicast stays off
run() { local name=$1; shift; "$@" > $out/$name.log 2>&1; echo "[rc=$?] $name: $(grep -E '^\[doctest\] (test cases|assertions)|ERROR SUMMARY|RACECHECK SUMMARY|^(PASS|FAIL)' $out/$name.log | tr -s ' ' | tr '\n' ' ')"; grep -B2 -A8 "ERROR:\|FAILED\|error:" $out/$name.log | head -30; }
if [ "$mode" = one ]; then
  run test_step11 $s/test_step11
  (cd $b && ctest -R "step11" --output-on-failure > $out/ctest_step11.log 2>&1; echo "ctest step11: $(grep 'tests passed' $out/ctest_step11.log)"; grep -E "Failed|\*\*\*" $out/ctest_step11.log | head)
  run memcheck_fwd compute-sanitizer --tool memcheck $s/step11_ring_attention --gpus 3 --transport copy --sweep 77,300 --heads 2 --dim 64 --causal --reps 1 --warmup 0
  run memcheck_bwd compute-sanitizer --tool memcheck $s/step11_ring_attention --backward --gpus 3 --transport copy --sweep 77,300 --heads 2 --dim 128 --causal --reps 1 --warmup 0
  run racecheck_fwd compute-sanitizer --tool racecheck $s/step11_ring_attention --gpus 2 --transport copy --seq 200 --heads 2 --dim 64 --reps 1 --warmup 0 --no-verify
  run synccheck_bwd compute-sanitizer --tool synccheck $s/step11_ring_attention --backward --gpus 2 --transport copy --seq 200 --heads 2 --dim 64 --reps 1 --warmup 0 --no-verify
else
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > $out/gpus.txt
  run test_step11_two_gpus $s/test_step11_two_gpus
  # The backward's float64 check reads every key for every sampled row's dK/dV: hours at 128k on the
  # CPU, so the backward is verified at 16k and timed beyond without it; the forward is verified
  # everywhere (sampled rows, and the single-GPU kernel on every row).
  for causal in "--causal" ""; do
    c=$( [ -n "$causal" ] && echo _causal )
    run verify_bwd$c $s/step11_ring_attention --backward --gpus 2 --seq 16k $causal --reps 1 --warmup 0
    for g in 1 2; do
      run bench_fwd${c}_g$g $s/step11_ring_attention --gpus $g --sweep 128k,256k $causal --reps 5 --warmup 1 --json $out/step11_fwd${c}_g$g.json
      run bench_bwd${c}_g$g $s/step11_ring_attention --backward --gpus $g --sweep 128k,256k $causal --reps 3 --warmup 1 --no-verify --json $out/step11_bwd${c}_g$g.json
    done
  done
fi
# The device tool brings back at most 8 files: one bundle.
(cd $out && tar czf step11_device_check_$mode.tgz --exclude='*.tgz' . && find . -type f ! -name '*.tgz' -delete)
