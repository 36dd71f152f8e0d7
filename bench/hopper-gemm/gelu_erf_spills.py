#!/usr/bin/env python3
"""Which wgmma GEMMs with `gelu_erf` compile without spilling?

Writes one spec per combination of tile (every swap-AB and regular wgmma tile), pingpong,
split_k, multicast, dtype, output dtype, layout and epilogue chain holding `gelu_erf`, keeps
the ones `tilegen check` accepts, and generates them all with NVRTC (sm_90a: ptxas' spill,
stack and serialisation checks fail a compile). Prints how many were accepted and which
failed to compile; with `src/ops/gemm/sm90.rs`'s limit right, none fails.

    LD_LIBRARY_PATH=.nvrtc/nvidia/cu13/lib python3 bench/hopper-gemm/gelu_erf_spills.py \
        target/release/tilegen /tmp/gelu-erf
"""
import itertools
import os
import re
import subprocess
import sys

tilegen, work = sys.argv[1], sys.argv[2]
accepted_dir = os.path.join(work, "accepted")
os.makedirs(accepted_dir, exist_ok=True)
tiles = [(16, 64), (16, 128), (32, 64), (32, 128)] + [
    (m, n) for m in (64, 128, 256) for n in (64, 96, 128, 192, 256)
]
chains = [
    ["gelu_erf"],
    ["bias", "gelu_erf"],
    ["scale", "bias", "gelu_erf"],
    ["bias", "gelu_erf", "residual"],
    ["scale", "bias", "residual", "gelu_erf"],
]
one = os.path.join(work, "one.yaml")
tried = accepted = 0
for (tm, tn), pp, sk, mc, dt, out, chain, layout in itertools.product(
    tiles, [False, True], [1, 2], [1, 2], ["bf16", "f16"], [None, "f32"], chains,
    ["nn", "nt", "tn", "tt"],
):
    name = f"k{tried}"
    tried += 1
    y = (
        f"kernels:\n  - name: {name}\n    op: gemm\n    engine: wgmma\n    archs: [sm_90a]\n"
        f"    dtype: {dt}\n    tile: [{tm}, {tn}, 64]\n    layout: {layout}\n"
        f"    epilogue: [{', '.join(chain)}]\n"
    )
    y += f"    out_dtype: {out}\n" if out else ""
    y += "    pingpong: true\n" if pp else ""
    y += f"    split_k: {sk}\n" if sk > 1 else ""
    y += f"    multicast: {mc}\n" if mc > 1 else ""
    with open(one, "w") as f:
        f.write(y)
    if subprocess.run([tilegen, "check", "--specs", one], capture_output=True).returncode == 0:
        accepted += 1
        with open(os.path.join(accepted_dir, f"{name}.yaml"), "w") as f:
            f.write(y)
print(f"{tried} combinations, {accepted} accepted by check")
r = subprocess.run(
    [tilegen, "generate", "--specs", accepted_dir, "-o", os.path.join(work, "out"),
     "--cache-dir", os.path.join(work, "cache"), "--no-bindings"],
    capture_output=True, text=True,
)
print(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")
failed = sorted(set(re.findall(r"(k\d+_\w+) \(sm_90a\)", r.stderr)))
first = re.search(r"compile (k\d+_\w+) for sm_90a", r.stderr)
failed = sorted(set(failed + ([first.group(1)] if first else [])))
print(f"generate exit {r.returncode}; {len(failed)} failed to compile" + "".join(f"\n  {f}" for f in failed))
