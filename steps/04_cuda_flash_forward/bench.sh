#!/usr/bin/env bash
# bench.sh — the measurements behind docs/04_cuda_flash_forward.md and docs/05_cuda_causal.md, in one
# go on a GPU machine: the FlashAttention-paper shapes (B·N = 16384 tokens, H·D = 2048), N = 1k..16k,
# D = 64 and 128, stage 04 (non-causal, beside stage 03) and stage 05 (causal, beside stage 04),
# and one head of 1M tokens. Each sweep's cases are merged into one results file per (stage, D).
#
#   steps/04_cuda_flash_forward/bench.sh BUILD_DIR OUT_DIR [sweep|long|all] [D ...]   (D: 64 128)
set -euo pipefail
build=$1
out=$2
what=${3:-all}
dims=${*:4}
dims=${dims:-64 128}
s4=$build/steps/04_cuda_flash_forward/step04_cuda_flash_forward
s5=$build/steps/05_cuda_causal/step05_cuda_causal
tmp=$(mktemp -d)
reps="--reps 10 --warmup 2"

merge() {  # merge.py OUT IN...: one results file whose "results" are all the inputs' rows
  python3 - "$@" <<'PY'
import json, sys
out, ins = sys.argv[1], sys.argv[2:]
docs = [json.load(open(p)) for p in ins]
merged = docs[0]
merged["results"] = [r for d in docs for r in d["results"]]
merged["command"] = " ; ".join(d.get("command", "") for d in docs)
json.dump(merged, open(out, "w"), indent=1)
PY
}

if [[ $what == sweep || $what == all ]]; then
  for d in $dims; do
    h=$((2048 / d))
    f4=() f5=()
    for n in 1024 2048 4096 8192 16384; do
      b=$((16384 / n))
      $s4 --batch $b --heads $h --seq $n --dim $d $reps --json $tmp/s4_${d}_${n}.json > $tmp/s4_${d}_${n}.log 2>&1 \
        || { tail -30 $tmp/s4_${d}_${n}.log; exit 1; }
      grep -E "^   0[34] |verified" $tmp/s4_${d}_${n}.log | sed "s/^/[04 D=$d N=$n] /"
      f4+=($tmp/s4_${d}_${n}.json)
      $s5 --batch $b --heads $h --seq $n --dim $d --causal $reps --json $tmp/s5_${d}_${n}.json > $tmp/s5_${d}_${n}.log 2>&1 \
        || { tail -30 $tmp/s5_${d}_${n}.log; exit 1; }
      grep -E "^   0[45] |verified" $tmp/s5_${d}_${n}.log | sed "s/^/[05 D=$d N=$n] /"
      f5+=($tmp/s5_${d}_${n}.json)
    done
    merge $out/step04_d${d}.json "${f4[@]}"
    merge $out/step05_d${d}.json "${f5[@]}"
  done
fi
if [[ $what == long || $what == all ]]; then
  # One head of 1M tokens: stage 03 would need 2 x 4 TB for S and P; stage 04 needs nothing extra.
  $s4 --batch 1 --heads 1 --seq 1M --dim 64 --reps 1 --warmup 0 --json $out/step04_1M.json > $tmp/long.log 2>&1 \
    || { tail -30 $tmp/long.log; exit 1; }
  grep -E "^   0[34] |verified|PASS|FAIL" $tmp/long.log | sed "s/^/[04 1M] /"
fi
