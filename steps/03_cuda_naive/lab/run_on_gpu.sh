#!/usr/bin/env bash
# run_on_gpu.sh — stage 03 on a GPU machine: its tests and exercise, then the runs behind
# docs/results/step03_*.json and the tables of docs/03_cuda_naive.md. Each step's log goes to OUT,
# the results files to OUT too; one line per step says how it ended; the exit status counts the
# failures.
#   steps/03_cuda_naive/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [all|tests|default|paper|oom]
# tests    ctest -R "step03|ex03" (the stage's doctests and command-line checks, the exercise)
# default  the default sweep (B=1 H=8 D=64, N = 256 .. 4096)
# paper    the FlashAttention papers' shape for later stages to compare with: float32, B·N = 16384
#          tokens, hidden 2048 (D=64: H=32; D=128: H=16), N = 1024, 2048, 4096 with B = 16384/N,
#          causal off and on; one results file per D (the runs' files, merged)
# oom      --find-oom at B=1 H=32 D=64: memory against N up to the largest N that fits
# Build first: cmake --build BUILD_DIR --target step03_cuda_naive test_step03 ex03_cuda_row_softmax_solution
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [all|tests|default|paper|oom]} build=${2:-build} what=${3:-all}
exe=$build/steps/03_cuda_naive/step03_cuda_naive
mkdir -p "$out/logs"
failures=0
run() {  # run NAME COMMAND...: COMMAND's output into OUT/logs/NAME.txt, one line of how it ended
  local name=$1
  shift
  "$@" >"$out/logs/$name.txt" 2>&1
  local code=$?
  echo "$name: exit $code"
  [ $code -eq 0 ] || failures=$((failures + 1))
}
merge() {  # merge results files: the first file's header, every file's rows (each row keeps its own command)
  python3 - "$@" <<'PY'
import json, sys
dst, srcs = sys.argv[1], sys.argv[2:]
merged = None
for path in srcs:
    with open(path) as f:
        doc = json.load(f)
    for row in doc["results"]:
        row.setdefault("command", doc.get("command", ""))
    if merged is None:
        merged = doc
        merged["command"] = "steps/03_cuda_naive/lab/run_on_gpu.sh (the command of each case is in its row)"
    else:
        merged["results"].extend(doc["results"])
with open(dst, "w") as f:
    json.dump(merged, f, indent=1)
PY
}

if [[ $what == tests || $what == all ]]; then
  run ctest ctest --test-dir "$build" -R "step03|ex03" --output-on-failure
fi
if [[ $what == default || $what == all ]]; then
  run default "$exe" --json "$out/step03_default.json"
fi
if [[ $what == paper || $what == all ]]; then
  for d in 64 128; do
    h=$((2048 / d))
    files=()
    for causal in "" "--causal"; do
      for n in 1024 2048 4096; do
        b=$((16384 / n))
        f=$out/logs/paper_d${d}_n${n}${causal:+_causal}.json
        run "paper_d${d}_n${n}${causal:+_causal}" "$exe" --batch $b --heads $h --dim $d --seq $n $causal --reps 10 --json "$f"
        files+=("$f")
      done
    done
    merge "$out/step03_paper_d${d}.json" "${files[@]}"
  done
fi
if [[ $what == oom || $what == all ]]; then
  run find_oom "$exe" --find-oom --batch 1 --heads 32 --dim 64 --sweep 1024 --reps 3 --warmup 1 \
    --json "$out/step03_find_oom_b1_h32_d64.json"
fi
echo "$failures failure(s); logs in $out/logs"
exit $failures
