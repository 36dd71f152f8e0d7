#!/usr/bin/env python3
"""Row softmax peers on the GPU, timed the way `tilegen bench` times its kernels.

Measures torch.softmax, a Triton softmax (best of a small sweep of warps and pipelining
depths, persistent grid sized from the compiled kernel's occupancy) and a device-to-device
copy (torch's copy_, the same ceiling `tilegen bench` uses) on the goal shapes of issue 3,
so tilegen's figures can be set beside peers measured on the same machine in the same
session. Needs torch and triton (the H200 test machine has both; see ../shared/GPU.md).

Usage: python3 bench/peers/softmax.py [--json-out FILE]
Method: inputs rotate over sets covering >= 4x the L2, 3 warm-up launches, then 25 timed
launches each between its own pair of CUDA events, all enqueued before one wait; the median
is reported. GB/s counts one read and one write of the tensor.
"""
import argparse
import json
import statistics

import torch
import triton
import triton.language as tl

SHAPES = [(32768, 4096), (8192, 32768), (65536, 1024)]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
WARMUP, TIMED = 3, 25


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    # One program walks rows pid, pid + programs, ...; with STAGES > 1 Triton prefetches the
    # next rows' loads while a row is reduced.
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e / tl.sum(e, axis=0)
        tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def triton_runner(x, y, warps, stages):
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    kernel = softmax_rows.warmup(x, y, rows, cols, BLOCK=block, STAGES=stages, num_warps=warps, grid=(1,))
    kernel._init_handles()
    props = torch.cuda.get_device_properties(x.device)
    regs_per_sm = props.regs_per_multiprocessor
    by_regs = regs_per_sm // max(1, kernel.n_regs * 32 * warps)
    smem = kernel.metadata.shared
    by_smem = props.shared_memory_per_multiprocessor // smem if smem else by_regs
    programs = min(rows, props.multi_processor_count * max(1, min(by_regs, by_smem)))

    def run(xi, yi):
        kernel[(programs, 1, 1)](xi, yi, rows, cols, block, stages)

    return run, f"triton w{warps} s{stages} grid {programs}"


def time_ms(run, sets):
    for i in range(WARMUP):
        run(*sets[i % len(sets)])
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(TIMED)]
    for i, (a, b) in enumerate(events):
        xi, yi = sets[i % len(sets)]
        a.record()
        run(xi, yi)
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json-out")
    args = ap.parse_args()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    results = []
    print(f"{'shape':>12} {'dtype':>5} {'peer':<34} {'ms':>8} {'GB/s':>7} {'vs copy':>8}")
    for rows, cols in SHAPES:
        for dname, dtype in DTYPES.items():
            nbytes = rows * cols * torch.finfo(dtype).bits // 8
            n_sets = max(2, -(-4 * l2 // (2 * nbytes)))
            sets = [(torch.randn(rows, cols, device="cuda", dtype=dtype), torch.empty(rows, cols, device="cuda", dtype=dtype)) for _ in range(n_sets)]
            peers = [("copy", lambda xi, yi: yi.copy_(xi)), ("torch.softmax", lambda xi, yi: torch.softmax(xi, dim=-1, out=yi))]
            for warps in (4, 8, 16):
                for stages in (1, 2, 4):
                    try:
                        run, name = triton_runner(*sets[0], warps, stages)
                    except Exception as e:  # a config that does not fit (registers, shared memory)
                        print(f"  skip triton w{warps} s{stages}: {type(e).__name__}")
                        continue
                    peers.append((name, run))
            copy_gbs = None
            best_triton = None
            for name, run in peers:
                ms = time_ms(run, sets)
                gbs = 2 * nbytes / ms / 1e6
                if name == "copy":
                    copy_gbs = gbs
                row = {"rows": rows, "cols": cols, "dtype": dname, "peer": name, "ms": ms, "gbs": gbs, "vs_copy": gbs / copy_gbs}
                results.append(row)
                if name.startswith("triton") and (best_triton is None or gbs > best_triton["gbs"]):
                    best_triton = row
                print(f"{rows}x{cols:<6} {dname:>5} {name:<34} {ms:8.4f} {gbs:7.0f} {gbs / copy_gbs:8.3f}")
            if best_triton:
                print(f"{rows}x{cols:<6} {dname:>5} {'best triton: ' + best_triton['peer']:<34} {best_triton['gbs']:7.0f} GB/s")
            del sets
            torch.cuda.empty_cache()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
