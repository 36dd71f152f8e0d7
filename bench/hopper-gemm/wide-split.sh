#!/usr/bin/env bash
# Split-K over wide tiles at one-round shapes (sweeps/2026-12-05-wide-split.yaml), run on the
# device machine from the repo root with the release binary carried along. Prepare here:
#   tilegen generate --specs bench/hopper-gemm/sweeps/2026-12-05-wide-split.yaml -o LIB --no-bindings
# and, for stream-K's bound at the same shapes (the timing build of branch exp/stream-k, whose
# partial tiles live in module-scope globals: one launch at a time, not for a library):
#   git archive exp/stream-k templates | tar -x -C SK && tilegen generate --templates SK/templates
#     --specs SPEC -o SK_LIB --no-bindings     (SPEC: the 128x256 s3 bf16 nn/nt, plain and bias+GELU)
# Usage: bench/hopper-gemm/wide-split.sh LIB [SK_LIB]
# Writes $OUT/wide-split-{verify.txt,bench.jsonl,bench.err} and $OUT/stream-k-*.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/tilegen-out}
mkdir -p "$OUT"
bin=${TILEGEN_BIN:-./target/release/tilegen}
lib=${1:?usage: wide-split.sh LIB [SK_LIB]}
sk_lib=${2:-}
shapes=bench/hopper-gemm/sweeps/wide-split-shapes.json
step() {  # LABEL LIMIT_S ARGS...: one tilegen run, its exit code and seconds in $OUT/steps.txt
  local label=$1 limit=$2 start
  shift 2
  start=$(date +%s)
  timeout "$limit" "$bin" "$@" >"$OUT/$label.out" 2>"$OUT/$label.err"
  echo "$label: rc $?, $(($(date +%s) - start)) s" | tee -a "$OUT/steps.txt"
}
# The split instances on verify's ragged cases first: a split tile that sums wrongly is not
# worth timing.
step wide-split-verify 150 verify --lib "$lib" --filter _split2 --seed 20261207 --kernel-timeout 30
step wide-split-bench 300 bench --lib "$lib" --op gemm --shapes "$shapes" --rounds 3 \
  --kernel-timeout 20 --message-format json
if [ -n "$sk_lib" ]; then
  step stream-k-verify 90 verify --lib "$sk_lib" --seed 20261207 --kernel-timeout 30
  step stream-k-bench 120 bench --lib "$sk_lib" --op gemm --shapes "$shapes" --rounds 3 \
    --kernel-timeout 20 --message-format json
fi
