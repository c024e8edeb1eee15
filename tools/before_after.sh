#!/usr/bin/env bash
# tools/before_after.sh OLD_BUILD NEW_BUILD OUT — stage 04's and stage 06's speed at the
# FlashAttention-paper shapes (B·N = 16384 tokens, H·D = 2048, N = 4096), from two builds in one run
# on one GPU: a change that should not touch the kernels (a harness refactor, say) must leave these
# figures within noise. Each build runs twice, interleaved (old, new, old, new), so that the spread
# between two runs of the same build is printed beside the difference between the builds.
set -euo pipefail
old=$1
new=$2
out=$3
mkdir -p "$out"
reps="--reps 20 --warmup 3"
run() {  # run BUILD TAG: one line per case, "stage D causal median_ms TFLOP/s"
  local b=$1 tag=$2
  for d in 64 128; do
    h=$((2048 / d))
    for causal in "" "--causal"; do
      $b/steps/04_cuda_flash_forward/step04_cuda_flash_forward --batch 4 --heads $h --seq 4096 --dim $d $causal \
        $reps --no-verify --json "$out/${tag}_04_d${d}${causal:+_causal}.json" > /dev/null
      $b/steps/06_cuda_backward/step06_cuda_backward --paper-shapes --seq 4096 --dim $d $causal \
        $reps --no-verify --variant flash --json "$out/${tag}_06_d${d}${causal:+_causal}.json" > /dev/null
    done
  done
}
for round in 1 2; do
  run "$old" "old$round"
  run "$new" "new$round"
done
python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
def rows(tag):
    got = {}
    for path in sorted(glob.glob(os.path.join(out, tag + "_*.json"))):
        for r in json.load(open(path))["results"]:
            if r["status"] == "ok" and r["stage"] in ("04", "06") and r["variant"] == "flash":
                got[(r["stage"], r["pass"], r["dim"], r["causal"])] = r["tflops"]
    return got
o1, o2, n1, n2 = (rows(t) for t in ("old1", "old2", "new1", "new2"))
print("stage pass  D  causal   old TFLOP/s (2 runs)   new TFLOP/s (2 runs)   new/old")
for k in sorted(o1):
    old, new = (o1[k] + o2[k]) / 2, (n1[k] + n2[k]) / 2
    print("%5s %4s %3d %6s   %8.2f %8.2f        %8.2f %8.2f        %.3f" %
          (k[0], k[1], k[2], k[3], o1[k], o2[k], n1[k], n2[k], new / old))
PY
