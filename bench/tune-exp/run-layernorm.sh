#!/usr/bin/env bash
# Second round of 16-bit layernorm candidates at 1024 columns (layernorm-1024b.yaml), on the
# device machine, from the repo root, with target/release/tilegen built here
# (`cargo build --release --features cli`) and carried along; NVRTC comes from the device's
# CUDA (/usr/local/cuda). Generates the library into a temporary folder, verifies every
# instance, benches them beside the device copy (65536x1024), then times them turn about at
# 32768, 65536 and 131072 rows (`tune --dry-run`). Logs in $OUT; about 2-3 minutes.
# Usage: OUT=... bash bench/tune-exp/run-layernorm.sh
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/tilegen-out}
mkdir -p "$OUT"
bin=${TILEGEN_BIN:-./target/release/tilegen}
here=bench/tune-exp
work=$(mktemp -d)
lib="$work/lib"
status=0
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv; $bin doctor; } 2>&1 | tee "$OUT/doctor.txt"
timeout 120 $bin generate --specs "$here/layernorm-1024b.yaml" --out "$lib" --cache-dir "$work/cache" 2>&1 | tee "$OUT/generate.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "generate failed: nothing to measure" | tee -a "$OUT/generate.txt"; exit 1; }
cp "$lib/manifest.json" "$OUT/manifest.json"
timeout 150 $bin verify --lib "$lib" 2>&1 | tee "$OUT/verify.txt"
echo "verify exit: ${PIPESTATUS[0]}" | tee -a "$OUT/verify.txt"
grep -q "^verify exit: 0$" "$OUT/verify.txt" || status=1
timeout 120 $bin bench --lib "$lib" --json-out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench exit: ${PIPESTATUS[0]}" | tee -a "$OUT/bench.txt"
# Verified above: tune re-runs only the small cases.
timeout 150 $bin tune --lib "$lib" --shapes "$here/shapes-1024.json" --dry-run --max-verify-elements 100000 \
  --message-format json > "$OUT/tune.jsonl" 2> "$OUT/tune-stderr.txt"
echo "tune exit: $?" | tee -a "$OUT/tune-stderr.txt"
# Every instance at every shape, fastest first, with its ratio to the copy of the tune run.
python3 - "$OUT/tune.jsonl" <<'PY' 2>&1 | tee "$OUT/tune-all.txt"
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") != "tuned":
        continue
    m, best = e["result"], e["best_vs_copy"]
    t0 = m["times"][0][1]
    print(f'{m["method"]} {"x".join(map(str, m["shape"]))} (best {best:.3f} of copy):')
    for name, t in m["times"]:
        print(f"  {name:<44} {t:8.1f} us  {best * t0 / t:.3f}")
PY
exit $status
