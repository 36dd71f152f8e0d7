"""Device-only cu_seqlens that nobody checked must not take the attention kernels outside their
buffers: the bindings then require every packed tensor to hold batch * seq rows, and the
kernel clamps each sequence into them. This launches every attention instance of a library
(from manifest.json and its sm_90 cubins, through cupy) with hostile offsets on tensors of
exactly batch * seq rows placed between guard zones, and checks that the guards of o and lse
are untouched and nothing faults. Run it under compute-sanitizer memcheck too (with
--no-guards, each tensor its own allocation, so an access past one is reported).

    python3 bench/flash-attn/hostile_offsets.py generated [--no-guards]
"""

import json
import sys

import cupy as cp
import numpy as np

GUARD = 4096  # elements of guard before and after each tensor
SENTINEL = 0x7FC1  # a bf16/f16 NaN pattern nobody writes


def hostile_offsets(batch, seq):
    cap = batch * seq
    return [
        [-1000, 5, 3, 10**9, -7][: batch + 1],
        [0, 2**31 - 1, 0, cap, cap + 1][: batch + 1],
        [cap, cap - 1, 2 * cap, -(2**31), 1][: batch + 1],
        [0, seq, 2 * seq, 3 * seq, 4 * seq][: batch + 1],  # valid, for contrast
    ]


def run(lib, inst, guards):
    d = inst["params"]["head_dim"]
    dtype = inst["dtype"]
    batch, hq, hkv, seq = 4, 4, 2, 131
    rows = batch * seq
    g = GUARD if guards else 0

    def tensor(heads, fill):
        buf = cp.full(g + rows * heads * d + g, SENTINEL, dtype=cp.uint16)
        inner = buf[g : g + rows * heads * d]
        if fill:
            # Small finite values (bf16/f16 bit patterns of +-0.0..0.25 roughly).
            inner[:] = cp.asarray(np.random.randint(0x3000, 0x3400, inner.size).astype(np.uint16))
        return buf, inner

    q, qi = tensor(hq, True)
    k, ki = tensor(hkv, True)
    v, vi = tensor(hkv, True)
    o, oi = tensor(hq, False)
    lse = cp.full(g + hq * rows + g, np.float32(12345.0), dtype=cp.float32)
    lsei = lse[g : g + hq * rows]
    mod = cp.RawModule(path=f"{lib}/kernels/{inst['name']}.sm_90.cubin")
    f = mod.get_function(inst["entry_point"])
    smem = inst["launch"]["shared_bytes"]
    f.max_dynamic_shared_size_bytes = smem
    tile_q = inst["launch"]["grid"]["tile_q"]
    grid = ((seq + tile_q - 1) // tile_q, hq, batch)
    i64 = np.int64
    failures = []
    for offs in hostile_offsets(batch, seq):
        cu = cp.asarray(np.array(offs, dtype=np.int64).clip(-(2**31), 2**31 - 1).astype(np.int32))
        args = (
            qi, ki, vi, oi, lsei, cu, cu,
            i64(hq), i64(hkv), i64(seq), i64(seq),
            i64(0), i64(hq * d), i64(d),
            i64(0), i64(hkv * d), i64(d),
            i64(0), i64(hkv * d), i64(d),
            i64(0), i64(hq * d), i64(d),
            i64(0), i64(rows),
            np.float32(1.0 / d**0.5),
        )
        f(grid, (inst["launch"]["threads"],), args, shared_mem=smem)
        cp.cuda.Device().synchronize()
        if guards:
            for name, buf, inner_len, sentinel in (
                ("o", o, rows * hq * d, SENTINEL),
                ("lse", lse, hq * rows, np.float32(12345.0)),
            ):
                host = cp.asnumpy(buf)
                front, back = host[:g], host[g + inner_len :]
                if not ((front == sentinel).all() and (back == sentinel).all()):
                    failures.append(f"{inst['name']} offsets {offs}: {name}'s guard was written")
    return failures


def main():
    lib = sys.argv[1]
    guards = "--no-guards" not in sys.argv
    manifest = json.load(open(f"{lib}/manifest.json"))
    failures = []
    n = 0
    for inst in manifest["instances"]:
        if inst["op"] != "attention":
            continue
        failures += run(lib, inst, guards)
        n += 1
    for f in failures:
        print("FAIL", f)
    print(f"{n} attention instances x 4 offset sets, guards {'on' if guards else 'off'}: "
          f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
