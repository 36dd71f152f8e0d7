#!/usr/bin/env python3
"""One call of SDPA's cuDNN (or flash) backend, for Nsight Compute (its launch configuration and
counters beside ours from profile.py):
    ncu --profile-from-start off --section LaunchStats ... python3 profile_peer.py [cudnn|flash] [causal] [B H S D]
Only the call between profiler start and stop is profiled (the warm-up calls are not)."""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[sys.argv[1] if len(sys.argv) > 1 else "cudnn"]
causal = len(sys.argv) > 2 and sys.argv[2] == "1"
B, H, S, D = (int(x) for x in sys.argv[3:7]) if len(sys.argv) > 6 else (4, 32, 8192, 128)
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))


def call():
    with sdpa_kernel([backend]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


for _ in range(3):
    call()
torch.cuda.synchronize()
torch.cuda.profiler.start()
call()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print("ok", sys.argv[1:] if len(sys.argv) > 1 else "cudnn")
