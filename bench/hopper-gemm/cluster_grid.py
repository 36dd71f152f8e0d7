#!/usr/bin/env python3
"""GEMM instances with clusters (split-K, multicast): how many clusters the device holds at once,
what a persistent grid of more clusters than that costs, and each instance beside cuBLAS.

The manifest's rule launches min(tiles, floor(SMs / S)) clusters of S blocks. Whether the
device can hold that many clusters at once depends on how its SMs are grouped (clusters do not
span GPCs), which only cuOccupancyMaxActiveClusters tells. This script prints that number for
every instance of a library with clusters, then times each instance (and the library's unsplit
instances, as controls) at decode shapes with the manifest's grid and with the grid capped to
the clusters the device holds, turn about with cuBLAS (torch.matmul) in one process
(bench/peers/turns.py: shuffled order, three input copies), after checking both grids' output
against cuBLAS.

Usage: python3 bench/hopper-gemm/cluster_grid.py --lib LIB [--shapes 16x11008x4096,...] [--json-out F]
       python3 bench/hopper-gemm/cluster_grid.py --lib LIB --profile NAME --shapes MxNxK [--capped]
(`rule` is the grid of min(tiles, floor(SMs / S)) clusters, `capped` the one the launcher now
uses: at most the clusters the device holds.)
(--profile: a few launches of one instance, or of cuBLAS with `--profile cublas` (nn), for ncu.)
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import manifest_launch  # noqa: E402
from turns import time_turns  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
SHAPES = "1x11008x4096,16x11008x4096,32x11008x4096,16x4096x4096,16x4096x11008"
COPIES, ROUNDS, CALLS = 3, 15, 2


def operands(m, n, k, layout, dt, odt, g):
    """A (M x K), B as the layout stores it, D, bias; and the cuBLAS call computing A.B."""
    a = torch.randn(m, k, device="cuda", generator=g).to(dt)
    b_kn = layout[1] == "n"  # nn/tn: B stored K x N
    b = (torch.randn(k, n, device="cuda", generator=g) if b_kn
         else torch.randn(n, k, device="cuda", generator=g)).to(dt)
    d = torch.empty(m, n, device="cuda", dtype=odt)
    bias = torch.randn(n, device="cuda", generator=g).to(odt)
    ref_out = torch.empty(m, n, device="cuda", dtype=dt)
    bm = b if b_kn else b.t()
    vals = {"a": a.data_ptr(), "b": b.data_ptr(), "d": d.data_ptr(), "bias": bias.data_ptr(),
            "c": 0, "m": m, "n": n, "k": k, "lda": k, "ldb": n if b_kn else k, "ldd": n,
            "ldc": n, "alpha": 1.0}
    return vals, (a, b, d, bias, ref_out), lambda: torch.matmul(a, bm, out=ref_out)


def expected(tensors, epilogue):
    a, b, d, bias, ref = tensors
    x = ref.float()
    if "bias" in epilogue:
        x = x + bias.float()
    if "gelu" in epilogue:
        x = torch.nn.functional.gelu(x, approximate="tanh")
    if "relu" in epilogue:
        x = torch.relu(x)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--json-out")
    ap.add_argument("--profile")
    ap.add_argument("--capped", action="store_true")
    ap.add_argument("--keep-going", action="store_true", help="time instances whose check failed too")
    args = ap.parse_args()
    lib = manifest_launch.Library(args.lib)
    stream = manifest_launch.cu.CUstream(torch.cuda.current_stream().cuda_stream)
    insts = [i for i in lib.instances("gemm") if i["launch"]["grid"]["rule"] == "persistent"]
    kernels = {i["name"]: lib.load(i) for i in insts}
    held = {}
    for name, kern in kernels.items():
        cluster = kern.inst["launch"]["grid"].get("cluster", 1)
        held[name] = kern.max_active_clusters() if cluster > 1 else None
        print(f"{name}: cluster {cluster}, shared {kern.shared} B, "
              f"max active clusters {held[name]} (rule: floor({lib.sm_count} / {cluster}) = {lib.sm_count // cluster})",
              flush=True)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    g = torch.Generator(device="cuda").manual_seed(7)
    if args.profile == "cublas":
        m, n, k = shapes[0]
        _, keep, ref = operands(m, n, k, "nn", torch.bfloat16, torch.bfloat16, g)
        for _ in range(5):
            ref()
        torch.cuda.synchronize()
        return
    if args.profile:
        kern = kernels[args.profile]
        m, n, k = shapes[0]
        p = kern.inst["params"]
        vals, keep, _ = operands(m, n, k, p.get("layout", "nn"), DTYPES[kern.inst["dtype"]],
                                 DTYPES[kern.inst.get("out_dtype", kern.inst["dtype"])], g)
        print("grid", kern.grid(vals, args.capped), flush=True)
        launch = kern.prepare(vals, stream, args.capped)
        for _ in range(5):
            launch()
        torch.cuda.synchronize()
        return
    rows = []
    for (m, n, k) in shapes:
        for name, kern in kernels.items():
            inst = kern.inst
            p = inst["params"]
            layout = p.get("layout", "nn")
            dt = DTYPES[inst["dtype"]]
            odt = DTYPES[inst.get("out_dtype", inst["dtype"])]
            epi = inst.get("epilogue") or []
            runs, grids = {"cublas": []}, {}
            keep = []
            variants = ["rule"] + (["capped"] if held[name] else [])
            for var in variants:
                runs[var] = []
            for copy in range(COPIES):
                vals, tensors, ref = operands(m, n, k, layout, dt, odt, g)
                keep.append(tensors)
                runs["cublas"].append(ref)
                for var in variants:
                    grids[var] = kern.grid(vals, var == "capped")
                    launch = kern.prepare(vals, stream, var == "capped")
                    keep.append(launch)
                    runs[var].append(launch)
                    if copy == 0:  # check this grid's output once
                        tensors[2].fill_(float("nan"))
                        launch()
                        ref()
                        torch.cuda.synchronize()
                        want = expected(tensors, epi)
                        err = ((tensors[2].float() - want).norm() / want.norm()).item()
                        if not err < 2e-2:
                            print(f"{name} {var} at {m}x{n}x{k}: relative error {err}", flush=True)
                            if not args.keep_going:
                                raise SystemExit(1)
            ms = time_turns(runs, ROUNDS, CALLS, warmup=2)
            flop = 2.0 * m * n * k
            row = {"instance": name, "shape": [m, n, k], "held_clusters": held[name],
                   "cublas_us": ms["cublas"] * 1e3}
            line = f"{name:48s} {m}x{n}x{k:<6d} cuBLAS {ms['cublas'] * 1e3:7.1f} us"
            for var in variants:
                row[var + "_us"] = ms[var] * 1e3
                row[var + "_grid"] = grids[var][0]
                line += (f" | {var} grid {grids[var][0]:4d}: {ms[var] * 1e3:7.1f} us "
                         f"{flop / ms[var] / 1e9:6.1f} TFLOP/s {ms['cublas'] / ms[var]:.3f}x")
            print(line, flush=True)
            rows.append(row)
            del keep, runs
            torch.cuda.empty_cache()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "sm_count": lib.sm_count, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
