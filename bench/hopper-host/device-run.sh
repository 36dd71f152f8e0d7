#!/usr/bin/env bash
# One device call for the Hopper GEMM's host side (about 210 s): compute-sanitizer (memcheck,
# racecheck, synccheck side by side) on small ragged cases of five wgmma instances that cover
# every code path (nn + bias/GELU, tt, f32 output, residual with its C map, 128x128 nt), while
# verify runs every GEMM instance (old and new) on all its cases; then bench of the 128x256
# wgmma instances (BENCH_FILTER) beside cuBLAS / cuBLASLt's fused epilogues and the same kernel
# without its epilogue. Run from the repo root on the device with
# target/release/tilegen and generated/ carried; logs in $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
B=./target/release/tilegen
SAN=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
start=$(date +%s)
san() {
  local tool=$1
  for f in gemm_bf16_128x256x64_s3_nn_wgmma_bias_gelu gemm_bf16_128x256x64_s3_tt_wgmma \
           gemm_bf16_to_f32_128x256x64_s3_nn_wgmma gemm_residual_bf16_128x256x64_s3_nn_wgmma_scale_bias_residual \
           gemm_bf16_128x128x64_s4_nt_wgmma; do
    echo "=== $tool $f" >> "$OUT/sanitize-$tool.txt"
    TILEGEN_VERBOSE=1 timeout 25 "$SAN" --tool "$tool" --error-exitcode 99 --print-limit 20 \
      "$B" verify --filter "$f" --max-elements 40000 --seed 5 >> "$OUT/sanitize-$tool.txt" 2>&1
    rc=$?
    echo "$tool $f: rc $rc; $(grep -c ' ok$' "$OUT/sanitize-$tool.txt") ok cases so far; $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/sanitize-$tool.txt" | tail -1)" >> "$OUT/sanitize-summary.txt"
  done
}
for t in memcheck racecheck synccheck; do san "$t" & done
timeout 110 "$B" verify --op gemm --seed 11 > "$OUT/verify-gemm.txt" 2>&1
echo "verify gemm rc $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/verify-gemm.txt"
wait
echo "sanitizers done after $(( $(date +%s) - start )) s"
cat "$OUT/sanitize-summary.txt"
timeout 90 "$B" bench --op gemm --filter "${BENCH_FILTER:-128x256x64_s3_n}" --json-out "$OUT/bench-wgmma.json" > "$OUT/bench-wgmma.txt" 2>&1
echo "bench rc $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/bench-wgmma.txt"
tail -n 2 "$OUT/verify-gemm.txt"; grep FAIL "$OUT/verify-gemm.txt" | head -20; grep -c "ratio" "$OUT/bench-wgmma.txt"
