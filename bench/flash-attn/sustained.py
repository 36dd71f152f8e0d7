#!/usr/bin/env python3
"""A library's attention instance and SDPA's cuDNN backend, each called back to back for a few
seconds (sustained, so at the clocks the power cap allows), with nvidia-smi sampling the SM clock
and the board's power every 100 ms; two rounds, alternating. On the device machine:
    python3 bench/flash-attn/sustained.py LIB INSTANCE [B H S] [SECONDS]
(bf16 or f16 from the instance; no mask, heads_q = heads_kv; inputs N(0, 1) in [B, S, H, D]).
The turn-about figures of bench/peers/attention.py are taken in short bursts, at boost clocks;
this shows whether the comparison holds when both run long enough to reach the power cap."""
import os
import subprocess
import sys
import tempfile
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import manifest_launch  # noqa: E402

lib = manifest_launch.Library(sys.argv[1])
inst = next(i for i in lib.instances("attention") if i["name"] == sys.argv[2])
b, h, s = (int(x) for x in sys.argv[3:6]) if len(sys.argv) > 5 else (8, 16, 4096)
seconds = float(sys.argv[6]) if len(sys.argv) > 6 else 4.0
if inst["params"].get("causal"):
    sys.exit(f"{inst['name']}: this script times attention without a mask (cuDNN is called without one)")
d = inst["params"]["head_dim"]
dt = {"bf16": torch.bfloat16, "f16": torch.float16}[inst["dtype"]]
q, k, v = (torch.randn(b, s, h, d, device="cuda").to(dt) for _ in range(3))
o = torch.empty_like(q)
lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
values = manifest_launch.attention_values(q, k, v, o, lse, d ** -0.5)
ours = lib.load(inst).prepare(values, manifest_launch.cu.CUstream(torch.cuda.current_stream().cuda_stream))
qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))


def cudnn():
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, scale=d ** -0.5)


flops = 4.0 * b * h * s * s * d
print(torch.cuda.get_device_name(0), inst["name"], f"B={b} H={h} S={s} D={d}, {seconds} s per run", flush=True)
for rnd in range(2):
    for label, call in (("ours", ours), ("cudnn", cudnn)):
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        with tempfile.TemporaryFile("w+") as log:
            smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active",
                                    "--format=csv,noheader,nounits", "-lms", "100"], stdout=log)
            time.sleep(0.3)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            calls, t0 = 0, time.time()
            while time.time() - t0 < seconds:
                for _ in range(50):
                    call()
                calls += 50
                torch.cuda.synchronize()
            end.record()
            torch.cuda.synchronize()
            smi.terminate()
            smi.wait()
            log.seek(0)
            rows = [line.split(", ") for line in log if line.strip()][3:-1]  # samples inside the run
        if not rows:
            sys.exit("nvidia-smi gave no samples inside the run: give it more seconds")
        ms = start.elapsed_time(end) / calls
        clock = [float(r[0]) for r in rows]
        power = [float(r[1]) for r in rows]
        reasons = sorted({r[2].strip() for r in rows})
        print(f"{label:>5} round {rnd}: {calls} calls, {ms:.4f} ms, {flops / ms / 1e9:.1f} TFLOP/s; SM clock mean "
              f"{sum(clock) / len(clock):.0f} MHz (min {min(clock):.0f}), power mean {sum(power) / len(power):.0f} W "
              f"(max {max(power):.0f}); throttle reasons {reasons}", flush=True)
