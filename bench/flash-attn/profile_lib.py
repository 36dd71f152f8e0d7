#!/usr/bin/env python3
"""One launch of a library's attention instance, launched from manifest.json, for Nsight Compute:
    ncu --profile-from-start off --set full -o REPORT \
        python3 bench/flash-attn/profile_lib.py LIB INSTANCE [B HQ HKV S]
(head_dim and causality come from the instance; inputs are N(0, 1) in [B, S, H, D] layout, as
bench/peers/attention.py passes them). Only the launch between profiler start and stop is
profiled, after three warm-up launches."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import manifest_launch  # noqa: E402

lib_dir, name = sys.argv[1], sys.argv[2]
b, hq, hkv, s = (int(x) for x in sys.argv[3:7]) if len(sys.argv) > 6 else (8, 16, 16, 4096)
lib = manifest_launch.Library(lib_dir)
inst = next(i for i in lib.instances("attention") if i["name"] == name)
d = inst["params"]["head_dim"]
dt = {"bf16": torch.bfloat16, "f16": torch.float16}[inst["dtype"]]
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(b, s, hq, d, device="cuda", generator=g).to(dt)
k, v = (torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dt) for _ in range(2))
o = torch.empty_like(q)
lse = torch.empty(b, hq, s, device="cuda", dtype=torch.float32)
values = manifest_launch.attention_values(q, k, v, o, lse, d ** -0.5)
stream = manifest_launch.cu.CUstream(torch.cuda.current_stream().cuda_stream)
launch = lib.load(inst).prepare(values, stream)
for _ in range(3):
    launch()
torch.cuda.synchronize()
torch.cuda.profiler.start()
launch()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print("ok", name, b, hq, hkv, s, d)
