#!/usr/bin/env bash
# For the device machine: the kernels of a prebuilt bundle load there and
# pass `tilegen verify`. Make the bundle here first and carry it with the binary:
#   target/release/tilegen bundle create --lib generated --out .dev/generated.tar.gz
# then on the device: bash scripts/gpu-bundle-check.sh .dev/generated.tar.gz
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/tilegen-out}
mkdir -p "$OUT"
bin=${TILEGEN_BIN:-./target/release/tilegen}
bundle=${1:?usage: gpu-bundle-check.sh BUNDLE}
lib=$(mktemp -d)/lib
{
  $bin bundle verify "$bundle" &&
  $bin generate --bundle "$bundle" --specs /nonexistent --out "$lib" &&
  timeout 500 $bin verify --lib "$lib"
  echo "verify exit: $?"
} 2>&1 | tee "$OUT/bundle-verify.txt"
