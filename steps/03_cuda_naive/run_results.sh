#!/usr/bin/env bash
# run_results.sh — the runs behind docs/results/step03_*.json and the tables of docs/03_cuda_naive.md.
#
#   steps/03_cuda_naive/run_results.sh BUILD_DIR OUT_DIR [default|issue|oom|all]
#
# default  the default sweep (B=1 H=8 D=64, N = 256 .. 4096)
# issue    the FlashAttention papers' shape for later stages to compare with: float32, batch·N =
#          16384 tokens, hidden 2048 (D=64: H=32; D=128: H=16), N = 1024, 2048, 4096 with
#          B = 16384/N, causal off and on; one results file per D (the runs' files, merged)
# oom      --find-oom at B=1 H=32 D=64: memory against N up to the largest N that fits
set -uo pipefail
build=${1:?build dir}
out=${2:?output dir}
what=${3:-all}
exe=$build/steps/03_cuda_naive/step03_cuda_naive
mkdir -p "$out/logs"
run() {  # run LOG ARGS...: the stage with ARGS, its output to LOG, its exit code noted in exit_codes.txt
  local log=$1
  shift
  "$exe" "$@" > "$log" 2>&1
  echo "$? $exe $*" >> "$out/logs/exit_codes.txt"
}

merge() {  # merge results files: the first file's header, every file's rows (each row keeps its own command)
  python3 - "$@" <<'EOF'
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
        merged["command"] = "steps/03_cuda_naive/run_results.sh (the command of each case is in its row)"
    else:
        merged["results"].extend(doc["results"])
with open(dst, "w") as f:
    json.dump(merged, f, indent=1)
EOF
}

if [[ $what == default || $what == all ]]; then
  run "$out/logs/default.txt" --json "$out/step03_default.json"
fi

if [[ $what == issue || $what == all ]]; then
  for d in 64 128; do
    h=$((2048 / d))
    files=()
    for causal in "" "--causal"; do
      for n in 1024 2048 4096; do
        b=$((16384 / n))
        f=$out/logs/issue_d${d}_n${n}${causal:+_causal}.json
        run "${f%.json}.txt" --batch $b --heads $h --dim $d --seq $n $causal --reps 10 --json "$f"
        files+=("$f")
      done
    done
    merge "$out/step03_paper_d${d}.json" "${files[@]}"
  done
fi

if [[ $what == oom || $what == all ]]; then
  run "$out/logs/find_oom.txt" --find-oom --batch 1 --heads 32 --dim 64 --sweep 1024 --reps 3 --warmup 1 \
    --json "$out/step03_find_oom_b1_h32_d64.json"
fi
