#!/usr/bin/env python3
"""Attention forward peers on the GPU, timed the way `tilegen bench` times its kernels.

Measures torch.nn.functional.scaled_dot_product_attention with the flash backend
(FlashAttention-2) and the cuDNN backend on the shapes `tilegen bench --op attention` times
(src/gpu/attention.rs, bench_shapes), causal and not, and sets each beside tilegen's figure
for the same shape from `tilegen bench --json-out` (run it first, in the same device call):
the ratio column is tilegen's TFLOP/s over the peer's. Needs torch (the H200 machine has it).

Usage: python3 bench/peers/attention.py --tilegen-json BENCH.json [--dtypes bf16,f16] [--json-out FILE]
       python3 bench/peers/attention.py --lib generated [--dtypes ...] [--json-out FILE]
With --lib, tilegen's instances are launched from the folder's manifest.json alone
(bench/peers/manifest_launch.py: cuda-python, tensor maps encoded from the manifest), each checked
once against the flash backend's output, and timed turn about with both peers in this process:
per round every contestant runs ROUND_CALLS calls, in a new shuffled order each round, each call
between its own pair of events and reading the next of SETS copies of the inputs (never the copy
the call before it read); medians over ROUNDS rounds. Hopper (wgmma) and portable (mma.sync) instances are
reported apart, each beside the peer its goal names (cuDNN and flash respectively).
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

from turns import time_turns

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


ROUNDS, ROUND_CALLS = 15, 3
# Copies of the inputs in a turn: no call reads the copy the call before it read (with one copy,
# whoever ran after a peer found part of its K/V in L2).
SETS = 3
# Largest |ours - flash| an output may show before its timing is not reported (inputs N(0, 1)).
AGREE = {"bf16": 3e-2, "f16": 4e-3}


def random_qkv(g, b, s, hq, hkv, d, dt):
    """Q [b, s, hq, d] and K, V [b, s, hkv, d], N(0, 1) from generator g, in dtype dt."""
    q = torch.randn(b, s, hq, d, device="cuda", generator=g).to(dt)
    k = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dt)
    v = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dt)
    return q, k, v


def turn_about(args):
    """--lib: tilegen's instances from the manifest beside the peers, in one process."""
    import manifest_launch

    lib = manifest_launch.Library(args.lib)
    stream = manifest_launch.cu.CUstream(torch.cuda.current_stream().cuda_stream)
    insts = lib.instances("attention")
    loaded = {}
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, f"sm_{lib.sm}, {lib.sm_count} SMs")
    print(f"{'dtype':>5} {'B':>3} {'Hq/Hkv':>7} {'S':>5} {'D':>4} {'causal':>6} {'hopper':>8} {'portable':>8} "
          f"{'flash':>8} {'cuDNN':>8} {'hop/cuDNN':>9} {'port/flash':>10}  instances", flush=True)
    results = []
    for dname in args.dtypes.split(","):
        dt = DTYPES[dname]
        for d, shapes in SHAPES.items():
            for (b, hq, hkv, s) in shapes:
                g = torch.Generator(device="cuda").manual_seed(7)
                inputs = []  # per set: the tensors and the kernel's argument values
                for _ in range(SETS):
                    q, k, v = random_qkv(g, b, s, hq, hkv, d, dt)
                    o = torch.empty_like(q)
                    lse = torch.empty(b, hq, s, device="cuda", dtype=torch.float32)
                    values = manifest_launch.attention_values(q, k, v, o, lse, d ** -0.5)
                    inputs.append(((q, k, v, o, lse), values))
                for causal in (False, True):
                    flops = 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)
                    runs, notes = {}, []

                    def sdpa(be, t):
                        qt, kt, vt = (x.transpose(1, 2) for x in t[:3])

                        def run():
                            with sdpa_kernel([be]):
                                return torch.nn.functional.scaled_dot_product_attention(
                                    qt, kt, vt, is_causal=causal, scale=d ** -0.5, enable_gqa=hq != hkv)
                        return run
                    ref = sdpa(BACKENDS["torch-flash"], inputs[0][0])().transpose(1, 2)
                    mine = [i for i in insts if i["dtype"] == dname and i["params"]["head_dim"] == d
                            and bool(i["params"].get("causal")) == causal and lib.binary(i)]
                    for inst in mine:
                        name = inst["name"]
                        if name not in loaded:
                            loaded[name] = lib.load(inst)
                        sets = [loaded[name].prepare(values, stream) for _, values in inputs]
                        o = inputs[0][0][3]
                        o.fill_(float("nan"))
                        sets[0]()
                        err = (o.float() - ref.float()).abs().max().item()
                        if not err <= AGREE[dname]:
                            notes.append(f"{name}: max |ours - flash| {err:.3g}, not timed")
                            continue
                        runs[name] = sets
                    for pname, be in BACKENDS.items():
                        try:
                            sdpa(be, inputs[0][0])()
                            runs[pname] = [sdpa(be, t) for t, _ in inputs]
                        except Exception as e:  # a backend that does not take the shape
                            notes.append(f"{pname} unavailable: {type(e).__name__}: {str(e)[:100]}")
                    tf = {n: flops / (ms * 1e-3) / 1e12
                          for n, ms in time_turns(runs, ROUNDS, ROUND_CALLS, warmup=WARMUP).items()}
                    best = {}
                    for inst in mine:
                        kind = "hopper" if inst["params"].get("engine") == "wgmma" else "portable"
                        t = tf.get(inst["name"])
                        if t is not None and t > best.get(kind, (None, 0.0))[1]:
                            best[kind] = (inst["name"], t)
                    nan = float("nan")
                    hop, port = best.get("hopper", (None, nan)), best.get("portable", (None, nan))
                    fl, cd = tf.get("torch-flash", nan), tf.get("torch-cudnn", nan)
                    row = {"dtype": dname, "batch": b, "heads_q": hq, "heads_kv": hkv, "seq": s, "head_dim": d,
                           "causal": causal, "hopper": hop[1], "hopper_instance": hop[0], "portable": port[1],
                           "portable_instance": port[0], "torch-flash": fl, "torch-cudnn": cd,
                           "hopper_vs_cudnn": hop[1] / cd, "portable_vs_flash": port[1] / fl,
                           "instances": {i["name"]: tf[i["name"]] for i in mine if i["name"] in tf}}
                    results.append(row)
                    print(f"{dname:>5} {b:>3} {hq:>3}/{hkv:<3} {s:>5} {d:>4} {str(causal):>6} {hop[1]:8.1f} "
                          f"{port[1]:8.1f} {fl:8.1f} {cd:8.1f} {hop[1] / cd:9.3f} {port[1] / fl:10.3f}  "
                          f"{hop[0] or '-'} {port[0] or '-'}", flush=True)
                    kinds = [("hopper" if i["params"].get("engine") == "wgmma" else "portable") for i in mine]
                    for inst, kind in zip(mine, kinds):  # every instance where a kind has several
                        if kinds.count(kind) > 1 and inst["name"] in tf:
                            print(f"    {inst['name']}: {tf[inst['name']]:.1f}", flush=True)
                    for n in notes:
                        print("    " + n, flush=True)
                del inputs, ref
                torch.cuda.empty_cache()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "mode": "turn-about",
                       "rounds": ROUNDS, "round_calls": ROUND_CALLS, "results": results}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tilegen-json", help="tilegen bench --json-out of the same device call")
    ap.add_argument("--lib", help="a generated folder: launch its instances from manifest.json, turn about")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--json-out")
    ap.add_argument("--head-dims", help="only these head_dims' shapes, e.g. 128 or 64,128")
    args = ap.parse_args()
    if args.head_dims:
        keep = {int(d) for d in args.head_dims.split(",")}
        for d in list(SHAPES):
            if d not in keep:
                del SHAPES[d]
    if args.lib:
        return turn_about(args)
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
                q, k, v = random_qkv(g, b, s, hq, hkv, d, dt)
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                for causal in (False, True):
                    flops = 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)
                    peer = {}
                    for name, be in BACKENDS.items():
                        def run(be=be, qt=qt, kt=kt, vt=vt):
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
