#!/usr/bin/env bash
# One batched GPU session (run on the device machine from the repo root, with the release
# binary built here and carried along): doctor, verify, bench. Logs and JSON land in $OUT.
# Usage: scripts/gpu-run.sh [FILTER]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/tilegen-out}
mkdir -p "$OUT"
bin=./target/release/tilegen
filter=()
[ -n "${1:-}" ] && filter=(--filter "$1")
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/nvidia-smi.txt" 2>&1
$bin doctor | tee "$OUT/doctor.txt"
timeout 240 $bin verify "${filter[@]}" 2>&1 | tee "$OUT/verify.txt"
echo "verify exit: ${PIPESTATUS[0]}" | tee -a "$OUT/verify.txt"
timeout 300 $bin bench "${filter[@]}" --json-out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt"
