#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over verify's small cases, one process per
# tool and op, on the device machine from the repo root with the release binary carried along
# (`cargo build --release --features cli`).
# $OUT/sanitize-summary.txt has a line per tool and op (clean or not); the logs, TOOL-OP.txt,
# end up in $OUT/sanitize-logs.tar.xz: one file, where the device machine returns at most eight.
# Usage: scripts/gpu-sanitize.sh [MAX_ELEMENTS] [TOOL...]   (default 5000; all three tools)
#        TILEGEN_OPS="attention" scripts/gpu-sanitize.sh ...  (some ops only)
#        TILEGEN_FILTER="64x192" scripts/gpu-sanitize.sh ...  (instances whose name contains it)
# A case whose kernel runs past 240 s is reported by verify itself (--kernel-timeout), naming it.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/tilegen-out}
mkdir -p "$OUT"
bin=${TILEGEN_BIN:-./target/release/tilegen}
lib=${TILEGEN_LIB:-generated}
max=${1:-5000}
shift || true
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck synccheck)
san=/usr/local/cuda/bin/compute-sanitizer
filter=${TILEGEN_FILTER:-}
filter_args=()
[ -n "$filter" ] && filter_args=(--filter "$filter")
# Every op with an instance the filter selects, or those TILEGEN_OPS names (space-separated).
ops=${TILEGEN_OPS:-$(python3 -c "import json,sys; print(' '.join(sorted({i['op'] for i in json.load(open(sys.argv[1]))['instances'] if sys.argv[2] in i['name']})))" "$lib/manifest.json" "$filter")}
# The tools run side by side (each is CPU-bound instrumentation); the ops of one tool in turn.
run_tool() {
  local tool=$1 status=0
  for op in $ops; do
    log="$logs/$tool-$op.txt"
    timeout 280 "$san" --tool "$tool" --error-exitcode 99 --print-limit 20 \
      "$bin" verify --lib "$lib" --op "$op" "${filter_args[@]}" --max-elements "$max" --seed 5 --kernel-timeout 240 >"$log" 2>&1
    rc=$?
    summary=$(grep -m1 "ERROR SUMMARY\|RACECHECK SUMMARY" "$log" || true)
    cases=$(grep -m1 "instances:" "$log" || true)
    echo "$tool $op: rc $rc; $cases; $summary"
    [ $rc -eq 0 ] || status=1
  done
  return $status
}
logs=$(mktemp -d)
pack_logs() { tar -C "$logs" -cJf "$OUT/sanitize-logs.tar.xz" --exclude='*.summary' . && rm -rf "$logs"; }
trap pack_logs EXIT  # also when a timeout stops the script
pids=()
for tool in "${tools[@]}"; do
  run_tool "$tool" > "$logs/$tool.summary" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
cat "$logs"/*.summary | tee "$OUT/sanitize-summary.txt"
exit $status
