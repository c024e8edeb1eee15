#!/usr/bin/env bash
# tools/h100_results.sh BUILD OUT [PART ...] — remakes the committed GPU results of docs/results on a
# GPU machine, under the names they have there, by the stages' own scripts:
#
#   tour    the course tour                       → stepNN_tour-h100.json (01–06)
#   s03     steps/03_cuda_naive/run_results.sh    → step03_default, step03_issue_d64|d128, step03_find_oom_b1_h32_d64
#   s04     steps/04_cuda_flash_forward/bench.sh  → step04_d64|d128, step05_d64|d128, step04_1M
#   ladder  stage 04's ladder, every rung          → step04_ladder_d64|d128
#   s06     stage 06 at the paper shapes           → step06_d64|d128[_causal][_deterministic]
#
# (default: all five). Each part's files are copied into OUT as soon as it ends, and OUT/logs keeps
# what each run printed. The CPU files (step0[12]_xeon-2core.json) come from a CPU machine.
set -uo pipefail
build=${1:?usage: h100_results.sh BUILD OUT [tour|s03|s04|ladder|s06 ...]}
out=${2:?usage: h100_results.sh BUILD OUT [tour|s03|s04|ladder|s06 ...]}
shift 2
parts=${*:-tour s03 s04 ladder s06}
mkdir -p "$out/logs"
tmp=$(mktemp -d)
bad=0
t0=$SECONDS

for part in $parts; do
  start=$SECONDS
  case $part in
    tour)
      python3 tools/tour.py --source . --build "$build" --results "$tmp/tour" --plot-python "" > "$out/logs/tour.log" 2>&1 || bad=1
      for f in "$tmp"/tour/step0*.json; do cp "$f" "$out/$(basename "${f%.json}")_tour-h100.json"; done
      ;;
    s03)
      steps/03_cuda_naive/run_results.sh "$build" "$tmp/s03" all > "$out/logs/s03.log" 2>&1 || bad=1
      cp "$tmp"/s03/step03_*.json "$out/"
      awk '$1 != 0' "$tmp/s03/logs/exit_codes.txt" >> "$out/logs/s03.log"
      ;;
    s04)
      steps/04_cuda_flash_forward/bench.sh "$build" "$out" all > "$out/logs/s04.log" 2>&1 || bad=1
      ;;
    ladder)
      # The FlashAttention-paper shape at N = 4096 (B·N = 16384 tokens, H·D = 2048), every rung.
      exe=$build/steps/04_cuda_flash_forward/step04_cuda_flash_forward
      for d in 64 128; do
        "$exe" --ladder --batch 4 --heads $((2048 / d)) --seq 4096 --dim $d --reps 10 --warmup 2 \
          --json "$out/step04_ladder_d$d.json" > "$out/logs/ladder_d$d.log" 2>&1 || bad=1
      done
      ;;
    s06)
      exe=$build/steps/06_cuda_backward/step06_cuda_backward
      for d in 64 128; do
        for c in "" --causal; do
          name=step06_d$d${c:+_causal}
          "$exe" --paper-shapes --dim $d $c --sweep 1024,2048,4096,8192 --json "$out/$name.json" > "$out/logs/$name.log" 2>&1 || bad=1
        done
        name=step06_d${d}_causal_deterministic
        "$exe" --paper-shapes --dim $d --causal --deterministic --sweep 1024,4096 --json "$out/$name.json" \
          > "$out/logs/$name.log" 2>&1 || bad=1
      done
      ;;
    *) echo "h100_results.sh: unknown part '$part' (tour, s03, s04, ladder, s06)" >&2; exit 2 ;;
  esac
  echo "$part: $((SECONDS - start)) s"
done
rm -rf "$tmp"
echo "h100_results: $(ls "$out"/*.json 2>/dev/null | wc -l) files, $([ $bad = 0 ] && echo 'every run passed' || echo 'SOME RUN FAILED: see logs/'), $((SECONDS - t0)) s"
exit $bad
