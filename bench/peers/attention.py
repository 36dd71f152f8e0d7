#!/usr/bin/env python3
"""Attention forward peers on the GPU, timed the way `tilegen bench` times its kernels.

Measures torch.nn.functional.scaled_dot_product_attention with the flash backend
(FlashAttention-2) and the cuDNN backend on the shapes `tilegen bench --op attention` times
(src/gpu/attention.rs, bench_shapes), causal and not, and sets each beside tilegen's figure
for the same shape from `tilegen bench --json-out` (run it first, in the same device call):
the ratio column is tilegen's TFLOP/s over the peer's. Needs torch (the H200 machine has it).

Usage: python3 bench/peers/attention.py --tilegen-json BENCH.json [--dtypes bf16,f16] [--json-out FILE]
Method: [batch, seq, heads, head_dim] tensors (the layout tilegen's kernels read) passed to SDPA
as [batch, heads, seq, head_dim] views, as flash-attn's users do; 3 warm-up calls, then 25 timed
calls each between its own pair of CUDA events, all enqueued before one wait; the median is
reported. TFLOP/s = 4·batch·heads_q·seq²·head_dim / t, halved for causal (SDPA's is_causal is
top-left aligned, the same mask as tilegen's bottom-right one when seq_q == seq_kv).
"""
import argparse
import json
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

WARMUP, TIMED = 3, 25
SHAPES = {  # head_dim -> (batch, heads_q, heads_kv, seq), as bench_shapes in src/gpu/attention.rs
    128: [(8, 16, 16, 4096), (4, 32, 32, 8192), (4, 32, 8, 8192)],
    64: [(16, 16, 16, 2048), (8, 16, 16, 1024), (4, 16, 16, 8192)],
    256: [(4, 16, 16, 4096), (2, 32, 8, 8192)],
}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
BACKENDS = {"torch-flash": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION}


def time_ms(run):
    for _ in range(WARMUP):
        run()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(TIMED)]
    for a, b in events:
        a.record()
        run()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tilegen-json", help="tilegen bench --json-out of the same device call")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    ours = {}
    if args.tilegen_json:
        for r in json.load(open(args.tilegen_json)).get("attention", []):
            key = (r["dtype"], r["batch"], r["heads_q"], r["heads_kv"], r["seq"], r["head_dim"], r["causal"])
            if key not in ours or r["tflop_per_s"] > ours[key]["tflop_per_s"]:
                ours[key] = r
    print(torch.cuda.get_device_name(0), "torch", torch.__version__)
    print(f"{'dtype':>5} {'B':>3} {'Hq/Hkv':>7} {'S':>5} {'D':>4} {'causal':>6} {'tilegen':>8} "
          f"{'flash':>8} {'cuDNN':>8} {'vs flash':>9} {'vs cuDNN':>9}  instance")
    results = []
    for dname in args.dtypes.split(","):
        dt = DTYPES[dname]
        for d, shapes in SHAPES.items():
            for (b, hq, hkv, s) in shapes:
                g = torch.Generator(device="cuda").manual_seed(7)
                q = torch.randn(b, s, hq, d, device="cuda", generator=g).to(dt)
                k = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dt)
                v = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dt)
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                for causal in (False, True):
                    flops = 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)
                    peer = {}
                    for name, be in BACKENDS.items():
                        def run(be=be):
                            with sdpa_kernel([be]):
                                torch.nn.functional.scaled_dot_product_attention(
                                    qt, kt, vt, is_causal=causal, scale=d ** -0.5, enable_gqa=hq != hkv)
                        try:
                            peer[name] = flops / (time_ms(run) * 1e-3) / 1e12
                        except Exception as e:  # a backend that does not take the shape
                            print(f"  {name} unavailable: {type(e).__name__}: {str(e)[:100]}")
                    mine = ours.get((dname, b, hq, hkv, s, d, causal))
                    t = mine["tflop_per_s"] if mine else float("nan")
                    fl, cu = peer.get("torch-flash", float("nan")), peer.get("torch-cudnn", float("nan"))
                    row = {"dtype": dname, "batch": b, "heads_q": hq, "heads_kv": hkv, "seq": s, "head_dim": d,
                           "causal": causal, "tilegen": t, "instance": mine["instance"] if mine else None,
                           **peer, "vs_flash": t / fl, "vs_cudnn": t / cu}
                    results.append(row)
                    print(f"{dname:>5} {b:>3} {hq:>3}/{hkv:<3} {s:>5} {d:>4} {str(causal):>6} {t:8.1f} {fl:8.1f} "
                          f"{cu:8.1f} {t / fl:9.3f} {t / cu:9.3f}  {row['instance'] or '-'}", flush=True)
                del q, k, v, qt, kt, vt
                torch.cuda.empty_cache()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
