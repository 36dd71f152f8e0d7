#!/usr/bin/env python3
"""One launch of a run.py variant at one bench shape, for Nsight Compute:
    ncu --section SpeedOfLight ... python3 profile.py VARIANT [causal] [B H S D]
(no torch: random bf16 inputs made on the host with numpy)."""
import math, sys
import numpy as np
import run
from cuda.bindings import driver as cu

name = sys.argv[1]
causal = len(sys.argv) > 2 and sys.argv[2] == "1"
B, H, S, D = (int(x) for x in sys.argv[3:7]) if len(sys.argv) > 6 else (4, 32, 8192, 128)
run.cu_check(cu.cuInit(0))
ctx = run.cu_check(cu.cuDevicePrimaryCtxRetain(run.cu_check(cu.cuDeviceGet(0))))
run.cu_check(cu.cuCtxSetCurrent(ctx))
key, b = run.build(name, "bf16", causal)
k = run.Kernel(key, b)
n = B * S * H * D
bits = (np.random.default_rng(0).standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
bufs = []
for _ in range(4):
    p = run.cu_check(cu.cuMemAlloc(n * 2))
    run.cu_check(cu.cuMemcpyHtoD(p, bits.ctypes.data, n * 2))
    bufs.append(int(p))
lse = int(run.cu_check(cu.cuMemAlloc(B * H * S * 4)))
st = [S * H * D, H * D, D] * 4 + [H * S, S]
p = dict(q=bufs[0], k=bufs[1], v=bufs[2], o=bufs[3], lse=lse, cu_q=0, cu_kv=0, batch=B, hq=H, hkv=H, sq=S, skv=S,
         strides=st, scale=1.0 / math.sqrt(D))
launch = k.prepare(p, cu.CUstream(0))
for _ in range(2):
    launch()
run.cu_check(cu.cuCtxSynchronize())
print("ok", name, "causal" if causal else "", B, H, S, D)
