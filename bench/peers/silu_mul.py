#!/usr/bin/env python3
"""SwiGLU gating (`silu(gate) * up`) peers on the GPU, timed the way `tilegen bench` times its
kernels.

Measures, in one process at the size `tilegen bench` uses for elementwise ops (2^28
elements): a device-to-device copy (torch's copy_, the ceiling `tilegen bench` uses), torch
unfused (`F.silu(gate) * up`, two kernels, as eager PyTorch runs a Llama MLP) and, where it
compiles, the same function under torch.compile (Inductor fuses it into one kernel). Needs
torch (the H200 test machine has it).

Usage: python3 bench/peers/silu_mul.py [--json-out FILE] [--no-compile]
Method: inputs rotate over sets covering >= 4x the L2, 3 warm-up launches, then 25 timed
calls each between its own pair of CUDA events, all enqueued before one wait; the median is
reported. GB/s counts what the fused op must move, as `tilegen bench` does: gate and up read,
out written (the unfused pair moves more: it writes silu(gate) and reads it back); the copy
counts one read and one write of a tensor.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

N = 1 << 28
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
WARMUP, TIMED = 3, 25


def unfused(gate, up):
    return F.silu(gate) * up


def time_ms(run, sets):
    for i in range(WARMUP):
        run(*sets[i % len(sets)])
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(TIMED)]
    for i, (a, b) in enumerate(events):
        a.record()
        run(*sets[i % len(sets)])
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json-out")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    results = []
    print(f"{'n':>10} {'dtype':>5} {'peer':<22} {'ms':>8} {'GB/s':>7} {'vs copy':>8}", flush=True)
    for dname, dtype in DTYPES.items():
        size = torch.finfo(dtype).bits // 8
        tensor = N * size
        moved = 3 * tensor  # gate, up read; out written
        n_sets = max(2, -(-4 * l2 // moved))
        sets = [
            (torch.randn(N, device="cuda", dtype=dtype), torch.randn(N, device="cuda", dtype=dtype))
            for _ in range(n_sets)
        ]
        copy_dst = torch.empty(N, device="cuda", dtype=dtype)
        peers = [
            ("copy", lambda g, u: copy_dst.copy_(g), 2 * tensor),
            ("torch unfused", unfused, moved),
        ]
        if not args.no_compile:
            peers.append(("torch.compile", None, moved))
        copy_gbs = None
        for name, run, nbytes in peers:
            if name == "torch.compile":
                # Compiled last, so a slow or failing compile costs no other figure.
                try:
                    run = torch.compile(unfused, dynamic=False)
                    run(*sets[0])
                    torch.cuda.synchronize()
                except Exception as e:  # no compiler toolchain, or Inductor refused it
                    print(f"  skip torch.compile: {type(e).__name__}: {e}", flush=True)
                    continue
            ms = time_ms(run, sets)
            gbs = nbytes / ms / 1e6
            if name == "copy":
                copy_gbs = gbs
            results.append({"n": N, "dtype": dname, "peer": name, "ms": ms, "gbs": gbs, "vs_copy": gbs / copy_gbs})
            print(f"{N:>10} {dname:>5} {name:<22} {ms:8.4f} {gbs:7.0f} {gbs / copy_gbs:8.3f}", flush=True)
        del sets, copy_dst, peers
        torch.cuda.empty_cache()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
