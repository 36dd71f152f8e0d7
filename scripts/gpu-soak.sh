#!/usr/bin/env bash
# A soak test: every instance launched over and over (`tilegen bench --settle-ms`; GEMMs
# beside their cuBLAS peer, at ragged shapes), to find launches that only sometimes never
# finish. A kernel whose warps a barrier ring can lap hangs only now and then, under sustained
# load, where verify and the sanitizers launch each case once (or `verify --repeat` times). Run
# on the device machine from the repo root with the release binary carried along
# (`cargo build --release --features cli`).
#
# One process per group: an instance no other instance's name (of the same op) lies within,
# together with that op's instances whose names contain it (a method's fused variants). A stop
# (--kernel-timeout, TILEGEN_KERNEL_TIMEOUT seconds, default 20) names the launch still running;
# it is logged and the soak goes on with the next group.
# Each group's log, GROUP.jsonl (and GROUP.err: why the call checks refused an instance at a
# shape, e.g. lda = M not a multiple of 8; refused at every shape, it counts as unfinished),
# ends up in $OUT/soak-logs.tar.xz: one file, where the device machine returns at most eight.
# $OUT/soak-summary.txt has a line per group: how many ran, the launch that stopped, the
# instances left unfinished.
# Usage: scripts/gpu-soak.sh [SETTLE_MS]   (default 1000: per instance and shape)
#        TILEGEN_OPS="gemm attention" scripts/gpu-soak.sh ...  (some ops only)
#        TILEGEN_FILTER="split2" scripts/gpu-soak.sh ...       (instances whose name contains it)
#        TILEGEN_SHAPES=shapes.json scripts/gpu-soak.sh ...    (`tilegen bench --shapes`; by
#          default GEMMs at 903x3000x1352, 65x1000x4104 and 1x520x776, other ops at their goal
#          sizes)
set -fuo pipefail  # -f: the instance names split into words below are never globbed
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/tilegen-out}
mkdir -p "$OUT"
bin=${TILEGEN_BIN:-./target/release/tilegen}
lib=${TILEGEN_LIB:-generated}
settle=${1:-1000}
shapes=${TILEGEN_SHAPES:-}
if [ -z "$shapes" ]; then
  shapes="$OUT/soak-shapes.json"
  echo '{"gemm": [[903, 3000, 1352], [65, 1000, 4104], [1, 520, 776]]}' >"$shapes"
fi
# "OP GROUP MEMBER..." per line: each group's root, then every instance it covers.
if ! groups=$(python3 - "$lib/manifest.json" "${TILEGEN_FILTER:-}" "${TILEGEN_OPS:-}" <<'EOF'
import json, re, sys
manifest, filt, ops = sys.argv[1], sys.argv[2], sys.argv[3].split()
insts = [i for i in json.load(open(manifest))["instances"]
         if filt in i["name"] and (not ops or i["op"] in ops)]
names = {i["name"]: i["op"] for i in insts}
# The names go on command lines and into file names below: only what tilegen itself names.
odd = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_]+", n)]
if odd:
    sys.exit(f"not an instance name: {odd[0]!r}")
for name, op in sorted(names.items()):
    if any(other != name and other in name and names[other] == op for other in names):
        continue  # covered by the group of a name within it (`bench --op` keeps to one op)
    print(op, name, *sorted(n for n in names if name in n and names[n] == op))
EOF
); then
  echo "soak: cannot take the instances of $lib/manifest.json (above)" >&2
  exit 1
fi
if [ -z "$groups" ]; then
  echo "soak: no instance of $lib matches (TILEGEN_FILTER '${TILEGEN_FILTER:-}', TILEGEN_OPS '${TILEGEN_OPS:-}')" >&2
  exit 1
fi
summary="$OUT/soak-summary.txt"
: >"$summary"
logs=$(mktemp -d)
pack_logs() { tar -C "$logs" -cJf "$OUT/soak-logs.tar.xz" . && rm -rf "$logs"; }
trap pack_logs EXIT  # also when a timeout stops the script
status=0
while read -r op root members; do
  [ -n "$op" ] || continue
  log="$logs/$root.jsonl"
  start=$(date +%s)
  "$bin" bench --lib "$lib" --op "$op" --filter "$root" --shapes "$shapes" --settle-ms "$settle" \
    --kernel-timeout "${TILEGEN_KERNEL_TIMEOUT:-20}" --message-format json >"$log" 2>"$logs/$root.err"
  rc=$?
  verdict=$(python3 - "$log" "$logs/$root.err" "$rc" $members <<'EOF'
import json, re, sys
log, err, rc, members = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
reached, stopped, error, events = set(), None, None, 0
for line in open(log):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    events += 1
    if event.get("event") == "bench":
        body = event.get("result") or event.get("attention") or {}
        reached.add(body.get("instance"))
    elif event.get("event") == "error":
        message = event.get("message", "")
        # "ACTIVITY; still running: LAUNCH: the GPU has not finished after ...", where ACTIVITY
        # is "timing INSTANCE at SHAPE" and LAUNCH "NAME (a settling launch)" or the like.
        if "the GPU has not finished" in message:
            found = re.match(r"(.*?); still running: (.*?): the GPU has not finished", message)
            stopped = f"{found.group(2)}, while {found.group(1)}" if found else message[:300]
            timed = re.match(r"timing (\S+) at ", found.group(1) if found else "")
            if timed:
                reached.discard(timed.group(1))  # stopped before its last shape
        else:
            error = message[:300]
# Refusals by the call checks (a shape an instance cannot take) leave exit code 1 and a line
# on stderr; a driver error or a panic is a failure of its own.
faults = [l.strip() for l in open(err) if re.search(r"CUDA_ERROR|panicked", l)]
if rc not in (0, 1):
    error = f"exit code {rc}" + (f": {error}" if error else "")
if faults:
    error = (error + "; " if error else "") + faults[0][:300]
if not events and not error:
    error = "no output"
missing = [m for m in members if m not in reached]
print(f"{len(reached & set(members))} of {len(members)} ran"
      + (f"; STOPPED: {stopped}" if stopped else "")
      + (f"; ERROR: {error}" if error else "")
      + (f"; unfinished: {' '.join(missing)}" if missing else ""))
EOF
)
  echo "$root: rc $rc, $(( $(date +%s) - start )) s, $verdict" | tee -a "$summary"
  case "$verdict" in *STOPPED:* | *ERROR:*) status=1 ;; esac
done <<<"$groups"
echo "soak: $( [ $status -eq 0 ] && echo "no launch stopped and no group failed" || echo "a launch stopped or a group failed (above)")" | tee -a "$summary"
exit $status
