#!/usr/bin/env python3
"""The bf16 nn GEMM instances of a library beside cuBLAS, plain and with the fused bias+GELU and
bias+ReLU epilogues, turn about in one process (bench/peers/turns.py: three input copies, a
shuffled order every round), each instance's output checked against cuBLAS first (NaN-poisoned
D, relative L2 error under 2e-2).

Usage: python3 bench/hopper-gemm/epilogue_turns.py LIB SHAPES [REPS] [normal|uniform]
       (SHAPES: MxNxK,...; each shape and epilogue is timed REPS times, default 1; A and B
       standard normal, as torch.randn, or uniform in [-2, 2), as `tilegen bench` fills them)
Columns: cuBLAS (torch.matmul, plain: the same reference for every epilogue row), then each
instance's median time and cuBLAS's time over it. Names are shortened to tile and stages,
`_pp` for ping-pong instances and `_co` for the others (cooperative consumers).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifest_launch  # noqa: E402
from cluster_grid import expected, operands  # noqa: E402
from turns import time_turns  # noqa: E402

EPILOGUES = ([], ["bias", "gelu"], ["bias", "relu"])


def short(inst):
    n = inst["name"].replace("gemm_bf16_", "").replace("_nn_wgmma", "").replace("x64_", "_")
    for e in ("_bias_gelu", "_bias_relu"):
        n = n.replace(e, "")
    return n if n.endswith("_pp") else n + "_co"


def main():
    lib = manifest_launch.Library(sys.argv[1])
    shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    uniform = len(sys.argv) > 4 and sys.argv[4] == "uniform"
    stream = manifest_launch.cu.CUstream(torch.cuda.current_stream().cuda_stream)
    g = torch.Generator(device="cuda").manual_seed(5)
    insts = [i for i in lib.instances("gemm")
             if i["name"].startswith("gemm_bf16_") and i["params"].get("layout", "nn") == "nn"]
    for (m, n, k) in shapes:
        for epi in EPILOGUES:
            these = [i for i in insts if (i.get("epilogue") or []) == epi]
            for rep in range(reps):
                runs, keep = {"cublas": []}, []
                for copy in range(3):
                    vals, tensors, ref = operands(m, n, k, "nn", torch.bfloat16, torch.bfloat16, g)
                    if uniform:
                        tensors[0].uniform_(-2.0, 2.0, generator=g)
                        tensors[1].uniform_(-2.0, 2.0, generator=g)
                    keep.append(tensors)
                    runs["cublas"].append(ref)
                    for inst in these:
                        kern = lib.load(inst)
                        launch = kern.prepare(vals, stream)
                        keep += [kern, launch]
                        runs.setdefault(short(inst), []).append(launch)
                        if copy == 0:
                            tensors[2].fill_(float("nan"))
                            launch()
                            ref()
                            torch.cuda.synchronize()
                            want = expected(tensors, epi)
                            err = ((tensors[2].float() - want).norm() / want.norm()).item()
                            assert err < 2e-2, (inst["name"], err)
                ms = time_turns(runs, 12, 3, warmup=2, seed=rep)
                line = f"{m}x{n}x{k} {'+'.join(epi) or 'plain':9s} rep{rep}: cuBLAS {ms['cublas'] * 1e3:7.1f}us"
                for v in sorted(runs):
                    if v != "cublas":
                        line += f" | {v} {ms[v] * 1e3:7.1f} {ms['cublas'] / ms[v]:.3f}xcuBLAS"
                print(line, flush=True)
                del runs, keep
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
