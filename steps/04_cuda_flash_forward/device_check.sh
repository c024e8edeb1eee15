#!/usr/bin/env bash
# device_check.sh — on a GPU machine, after building: the tests, the exercises (solutions pass,
# starters fail naming a TODO), compute-sanitizer (memcheck, racecheck) on small shapes, ncu on the
# paper shape, the register-budget table. Prints one summary line per step; logs go to OUT.
#   steps/04_cuda_flash_forward/device_check.sh BUILD_DIR OUT_DIR      (NCU=0: leave out ncu)
set -uo pipefail
b=$1 out=$2
s4=$b/steps/04_cuda_flash_forward s5=$b/steps/05_cuda_causal
for t in $s4/test_step04 $s5/test_step05 $b/solutions/04_cuda_flash_forward/ex04_cuda_flash_forward_solution \
         $b/solutions/05_cuda_causal/ex05_cuda_causal_solution; do
  $t > $out/$(basename $t).log 2>&1; echo "[rc=$?] $(basename $t): $(grep -E '^\[doctest\] (test cases|assertions)' $out/$(basename $t).log | tr -s ' ' | tr '\n' ' ')"
  grep -B2 -A6 "ERROR\|FAILED" $out/$(basename $t).log | head -40
done
for t in $b/exercises/04_cuda_flash_forward/ex04_cuda_flash_forward $b/exercises/05_cuda_causal/ex05_cuda_causal; do
  $t > $out/starter.log 2>&1; echo "[rc=$?] starter $(basename $t): $(grep -o 'TODO(ex0[45]:[a-z_]*)' $out/starter.log | sort | uniq -c | tr '\n' ' ')"
done
(cd $b && ctest -R "step0[45]_cuda" --output-on-failure > $out/ctest_cli.log 2>&1; echo "ctest cli: $(grep 'tests passed' $out/ctest_cli.log)"; grep -E "Failed|\*\*\*" $out/ctest_cli.log | head)
for d in 32 64 128; do
  compute-sanitizer --tool memcheck $s5/step05_cuda_causal --sweep 1,77,130 --seq-k 200 --dim $d --heads 2 --reps 1 --warmup 0 > $out/mc.log 2>&1
  echo "memcheck 05+04 causal D=$d: $(grep -E 'ERROR SUMMARY' $out/mc.log) $(grep -E '^(PASS|FAIL)' $out/mc.log)"
  compute-sanitizer --tool memcheck $s5/step05_cuda_causal --sweep 77,130 --dim $d --heads 2 --reps 1 --warmup 0 --no-verify > $out/mc.log 2>&1
  echo "memcheck 05 Nq=Nk D=$d: $(grep -E 'ERROR SUMMARY' $out/mc.log)"
  compute-sanitizer --tool racecheck $s5/step05_cuda_causal --sweep 77,300 --seq-k 130 --dim $d --heads 2 --reps 1 --warmup 0 --no-verify > $out/rc.log 2>&1
  echo "racecheck 05+04 D=$d: $(grep -E 'RACECHECK SUMMARY' $out/rc.log)"
done
compute-sanitizer --tool memcheck $s4/step04_cuda_flash_forward --seq-q 77 --seq-k 130 --dim 64 --heads 2 --reps 1 --warmup 0 --variant flash > $out/mc.log 2>&1
echo "memcheck 04 non-causal: $(grep -E 'ERROR SUMMARY' $out/mc.log)"
compute-sanitizer --tool synccheck $s4/step04_cuda_flash_forward --seq 130 --dim 128 --heads 2 --reps 1 --warmup 0 --variant flash --no-verify > $out/sc.log 2>&1
echo "synccheck 04: $(grep -E 'ERROR SUMMARY' $out/sc.log)"
for d in 64 128; do
  [[ ${NCU:-1} == 0 ]] && break
  ncu --clock-control none --set full -k regex:flash --launch-count 1 -o $out/prof$d $s4/step04_tune --profile $d > /dev/null 2>&1
  ncu --import $out/prof$d.ncu-rep --page details > $out/ncu$d.txt 2>&1; rm -f $out/prof$d.ncu-rep
  echo "ncu D=$d: $(grep -E '^\s+(Duration|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy)\s' $out/ncu$d.txt | awk '{$1=$1};1' | tr '\n' ';')"
done
$s4/step04_tune 4096 | tee $out/tune.txt
