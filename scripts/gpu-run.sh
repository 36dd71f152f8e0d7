#!/usr/bin/env bash
# One batched GPU run (run on the device machine from the repo root, with the release
# binaries built here by `cargo build --release --features cli` and carried along): doctor,
# verify, bench, the example crate. Logs and JSON land in $OUT. Each op runs in its own
# process (`--op`, so no instance is counted twice), and a kernel fault (which poisons the
# CUDA context) costs only that op's results.
# Usage: scripts/gpu-run.sh [OP...]   (default: every op of the library's manifest)
# TILEGEN_SKIP_VERIFY=1 benches only (e.g. when gpu-bundle-check.sh verified the same kernels).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/tilegen-out}
mkdir -p "$OUT"
bin=${TILEGEN_BIN:-./target/release/tilegen}
demo=${TILEGEN_DEMO:-./target/release/tilegen-demo}
lib=${TILEGEN_LIB:-generated}
groups=("$@")
[ ${#groups[@]} -eq 0 ] && read -r -a groups < <(python3 -c "import json,sys; print(' '.join(sorted({i['op'] for i in json.load(open(sys.argv[1]))['instances']})))" "$lib/manifest.json")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv; $bin doctor; } 2>&1 | tee "$OUT/doctor.txt"
: > "$OUT/verify.txt"
[ -n "${TILEGEN_SKIP_VERIFY:-}" ] || for g in "${groups[@]}"; do
  timeout 200 $bin verify --lib "$lib" --op "$g" 2>&1 | tee -a "$OUT/verify.txt"
  echo "verify $g exit: ${PIPESTATUS[0]}" | tee -a "$OUT/verify.txt"
done
: > "$OUT/bench.txt"
for g in "${groups[@]}"; do
  timeout 200 $bin bench --lib "$lib" --op "$g" --json-out "$OUT/part-$g.json" 2>&1 | tee -a "$OUT/bench.txt"
done
# One JSON for all families (the device returns few files).
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
merged = None
for f in sorted(glob.glob(os.path.join(out, "part-*.json"))):
    d = json.load(open(f))
    if merged is None:
        merged = d
    else:
        merged["results"] += d["results"]
        if d.get("attention"):
            merged.setdefault("attention", []).extend(d["attention"])
    os.remove(f)
if merged:
    json.dump(merged, open(os.path.join(out, "bench.json"), "w"), indent=1)
PY
# Attention's peers (torch SDPA, flash and cuDNN backends) beside tilegen's figures of this run.
if grep -q '"attention"' "$OUT/bench.json" 2>/dev/null; then
  timeout 200 python3 bench/peers/attention.py --tilegen-json "$OUT/bench.json" 2>&1 | tee "$OUT/peers-attention.txt"
  # and launched from manifest.json alone, turn about with the peers in one process
  timeout 300 python3 bench/peers/attention.py --lib "$lib" 2>&1 | tee "$OUT/peers-attention-turns.txt"
fi
# The example crate's binary (built here by `cargo build --release -p tilegen-demo`): typed bindings end to end.
if [ -x "$demo" ]; then
  timeout 120 "$demo" 2>&1 | tee "$OUT/demo.txt"
  echo "demo exit: ${PIPESTATUS[0]}" | tee -a "$OUT/demo.txt"
fi
