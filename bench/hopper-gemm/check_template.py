#!/usr/bin/env python3
"""Check and time tilegen's wgmma GEMM instances (engine: wgmma) on an sm_90 GPU, from a library
folder that `tilegen generate` wrote, using only its manifest.json and cubins: tensor maps are
encoded from each instance's `tensor_maps` entry, arguments from `args`, the grid from the
persistent launch rule. So this also checks that the manifest says enough to launch them.

usage: check_template.py LIB [--filter TEXT] [--no-time] [--small] [--reps N] [--shapes 4096x4096x4096,...]
Checks: ragged M/N/K (off the tile, K not a multiple of 64, K = 0), ld larger than the row,
pointers 16-byte but not 128-byte aligned, NaN-poisoned outputs (the padding past N must stay
NaN), every epilogue, against a float64 torch reference. Times the plain and bias+GELU 128x256
instances against torch.matmul (cuBLAS) and torch._addmm_activation(use_gelu=True) (cuBLASLt's
fused GELU_BIAS epilogue), turn about in one process.
"""
import argparse, ctypes, json, math, os, statistics, sys, time

SMALL_SHAPES = [(129, 264, 72), (300, 520, 200), (1, 8, 8)]  # --small: for compute-sanitizer
CHECK_SHAPES = [(1, 8, 8), (129, 264, 72), (300, 520, 200), (64, 64, 0), (1000, 1032, 1000),
                (257, 136, 4104), (2056, 3080, 2048)]
BIG = [(4096, 4096, 4096), (8192, 8192, 8192)]


def cu_ok(r):
    err = r[0] if isinstance(r, tuple) else r
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err}")
    if isinstance(r, tuple):
        return r[1] if len(r) == 2 else r[1:]
    return None


class Instance:
    def __init__(self, lib, entry, cu, nsm):
        self.e, self.cu, self.nsm = entry, cu, nsm
        tgt = [t for t in entry["targets"] if t["arch"] == "sm_90a"][0]
        self.resources = tgt["resources"]
        cubin = open(os.path.join(lib, tgt["cubin"]["path"]), "rb").read()
        self.mod = cu_ok(cu.cuModuleLoadData(cubin))
        self.fn = cu_ok(cu.cuModuleGetFunction(self.mod, entry["entry_point"].encode()))
        self.smem = entry["launch"]["shared_bytes"]
        cu_ok(cu.cuFuncSetAttribute(self.fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem))
        self.layout = entry["params"].get("layout", "nn")
        self.epi = entry["epilogue"]
        self.name = entry["name"]
        self._cache = {}

    def tmap(self, m, ptr, sizes):
        cu = self.cu
        dt = {"bf16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
              "f16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
              "f32": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}[m["dtype"]]
        es = {"bf16": 2, "f16": 2, "f32": 4}[m["dtype"]]
        # K = 0: the kernel reads no A or B, but a map needs non-zero dims.
        dims = [max(1, sizes[d]) for d in m["dims"]]
        strides = [sizes[s] * es for s in m["strides"]]
        sw = {"none": "NONE", "32b": "32B", "64b": "64B", "128b": "128B"}[m["swizzle"]]
        # Rows that are not whole 128-byte L2 lines apart take the map's other promotion.
        promotion = m["l2_promotion"]
        if "l2_promotion_straddling" in m and strides and strides[0] % 128:
            promotion = m["l2_promotion_straddling"]
        l2 = {"none": "NONE", "64b": "L2_64B", "128b": "L2_128B", "256b": "L2_256B"}[promotion]
        il = {"none": "NONE", "16b": "16B", "32b": "32B"}[m["interleave"]]
        oob = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}[m["oob_fill"]]
        r = cu.cuTensorMapEncodeTiled(
            dt, len(dims), ptr, [cu.cuuint64_t(d) for d in dims], [cu.cuuint64_t(s) for s in strides],
            [cu.cuuint32_t(b) for b in m["box"]], [cu.cuuint32_t(1)] * len(dims),
            getattr(cu.CUtensorMapInterleave, "CU_TENSOR_MAP_INTERLEAVE_" + il),
            getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + sw),
            getattr(cu.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + l2),
            getattr(cu.CUtensorMapFloatOOBfill, "CU_TENSOR_MAP_FLOAT_OOB_FILL_" + oob))
        tm = cu_ok(r)
        return ctypes.string_at(tm.getPtr(), 128)

    def prepare(self, ptrs, sizes, alpha=1.0):
        key = (tuple(sorted(ptrs.items())), tuple(sorted(sizes.items())), alpha)
        if key in self._cache:
            return self._cache[key]
        bufs = []
        for m in self.e.get("tensor_maps", []):
            bufs.append(ctypes.create_string_buffer(self.tmap(m, ptrs[m["tensor"]], sizes), 128))
        for a in self.e["args"]:
            if a["kind"] in ("in", "out"):
                bufs.append(ctypes.c_uint64(ptrs[a["name"]]))
            elif a["type"] == "i64":
                bufs.append(ctypes.c_int64(sizes[a["name"]]))
            elif a["type"] == "f32":
                bufs.append(ctypes.c_float(alpha))
            else:
                raise RuntimeError(f"unknown arg {a}")
        arr = (ctypes.c_void_p * len(bufs))(*[ctypes.addressof(b) for b in bufs])
        g = self.e["launch"]["grid"]
        assert g["rule"] == "persistent", g
        tiles = -(-sizes["m"] // g["tile_m"]) * -(-sizes["n"] // g["tile_n"])
        grid = min(tiles, self.nsm * g["ctas_per_sm"])
        self._cache[key] = (bufs, arr, grid)
        return self._cache[key]

    def launch(self, ptrs, sizes, stream, alpha=1.0):
        bufs, arr, grid = self.prepare(ptrs, sizes, alpha)
        if grid == 0:
            return
        cu_ok(self.cu.cuLaunchKernel(self.fn, grid, 1, 1, self.e["launch"]["threads"], 1, 1, self.smem,
                                     stream, ctypes.addressof(arr), 0))


def tdt(torch, s):
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[s]


def padded(torch, rows, cols, ld, dtype, fill=None, gen=None, offset=8):
    """rows x cols view with leading dimension ld, starting `offset` elements (16 bytes for
    16-bit, 32 for f32) into its allocation: 16-byte but not 128-byte aligned."""
    buf = torch.empty(rows * ld + offset + 64, device="cuda", dtype=dtype)
    if fill is None:
        buf.copy_(torch.randn(buf.numel(), device="cuda", generator=gen).to(dtype))
    else:
        buf.fill_(fill)
    view = buf[offset:offset + rows * ld].view(rows, ld)
    return buf, view


def reference(torch, inst, A, B, bias, C, alpha):
    v = A.double() @ B.double()
    pre_bound = A.double().abs() @ B.double().abs()
    extra = torch.zeros_like(v)
    for step in inst.epi:
        if step == "scale":
            v = v * alpha
        elif step == "bias":
            v = v + bias.double()[None, :]
            extra = extra + bias.double().abs()[None, :]
        elif step == "relu":
            v = torch.clamp(v, min=0)
        elif step == "gelu":
            v = 0.5 * v * (1 + torch.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
        elif step == "gelu_erf":
            v = 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))
        elif step == "silu":
            v = v * torch.sigmoid(v)
        elif step == "residual":
            v = v + C.double()
            extra = extra + C.double().abs()
    return v, pre_bound, extra


def check(torch, inst, M, N, K, stream, seed):
    e = inst.e
    it, ot = tdt(torch, e["dtype"]), tdt(torch, e["out_dtype"])
    g = torch.Generator(device="cuda").manual_seed(seed)
    vin, vout = 16 // (2 if it != torch.float32 else 4), 16 // (4 if ot == torch.float32 else 2)
    up = lambda x, v: -(-x // v) * v
    lay = inst.layout
    # ld larger than the row, rounded to whole 16-byte vectors.
    if lay[0] == "n":
        lda = up(K, vin) + vin; abuf, Ast = padded(torch, M, K, lda, it, gen=g); A = Ast[:, :K]
    else:
        lda = up(M, vin) + vin; abuf, Ast = padded(torch, K, M, lda, it, gen=g); A = Ast[:, :M].t()
    if lay[1] == "n":
        ldb = up(N, vin) + vin; bbuf, Bst = padded(torch, K, N, ldb, it, gen=g); B = Bst[:, :N]
    else:
        ldb = up(K, vin) + vin; bbuf, Bst = padded(torch, N, K, ldb, it, gen=g); B = Bst[:, :K].t()
    ldd = up(N, vout) + vout
    dbuf, Dst = padded(torch, M, N, ldd, ot, fill=float("nan"))
    ptrs = {"a": Ast.data_ptr(), "b": Bst.data_ptr(), "d": Dst.data_ptr()}
    sizes = {"m": M, "n": N, "k": K, "lda": lda, "ldb": ldb, "ldd": ldd}
    bias = C = None
    keep = [abuf, bbuf, dbuf]
    if "bias" in inst.epi:
        bias = torch.randn(N + 1, device="cuda", generator=g).to(ot)[1:]  # element-aligned only
        ptrs["bias"] = bias.data_ptr(); keep.append(bias)
    if "residual" in inst.epi:
        ldc = up(N, vout) + 2 * vout
        cbuf, Cst = padded(torch, M, N, ldc, ot, gen=g)
        C = Cst[:, :N]; ptrs["c"] = Cst.data_ptr(); sizes["ldc"] = ldc; keep.append(cbuf)
    alpha = 0.75
    inst.launch(ptrs, sizes, stream, alpha)
    torch.cuda.synchronize()
    ref, bound, extra = reference(torch, inst, A, B, bias, C, alpha)
    out = Dst[:, :N].double()
    u = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[ot]
    fast = 2.0 ** -10 if any(s in inst.epi for s in ("gelu", "silu")) and ot != torch.float32 else 2.0 ** -18
    tol = (2 * K * 2.0 ** -24 * bound * 2 + 2 * u * ref.abs() + fast * (bound + extra) + 1e-30
           + (2.0 ** -20 if ot == torch.float32 else 2.0 ** -14))
    err = (out - ref).abs()
    bad = int((~(err <= tol)).sum().item())
    worst = ""
    if bad:
        idx = int(torch.argmax(torch.where(err <= tol, torch.zeros_like(err), err / tol)).item())
        r, c = divmod(idx, N)
        worst = f" worst ({r},{c}) got {out[r, c].item():.6g} want {ref[r, c].item():.6g} tol {tol[r, c].item():.3g}"
    pad_written = int((~torch.isnan(Dst[:, N:].float())).sum().item()) if ldd > N else 0
    rel = ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()
    ok = bad == 0 and pad_written == 0 and rel < 1e-2
    return ok, f"bad={bad} pad_written={pad_written} rel={rel:.2e}{worst}"


def time_pair(torch, ours, theirs, reps, inner=3):
    for _ in range(3):
        ours(); theirs()
    torch.cuda.synchronize()
    to, tt = [], []
    for r in range(reps):
        for f, lst in ((ours, to), (theirs, tt)) if r % 2 == 0 else ((theirs, tt), (ours, to)):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(inner):
                f()
            e1.record()
            e1.synchronize()
            lst.append(e0.elapsed_time(e1) / inner)
    return statistics.median(to), statistics.median(tt)


def bench(torch, inst, M, N, K, stream, reps):
    it, ot = tdt(torch, inst.e["dtype"]), tdt(torch, inst.e["out_dtype"])
    g = torch.Generator(device="cuda").manual_seed(5)
    A = torch.randn(M, K, device="cuda", generator=g).to(it)
    Bs = (torch.randn(K, N, device="cuda", generator=g) if inst.layout[1] == "n"
          else torch.randn(N, K, device="cuda", generator=g)).to(it)
    B = Bs if inst.layout[1] == "n" else Bs.t()
    D = torch.empty(M, N, device="cuda", dtype=ot)
    Dr = torch.empty(M, N, device="cuda", dtype=ot)
    ptrs = {"a": A.data_ptr(), "b": Bs.data_ptr(), "d": D.data_ptr()}
    sizes = {"m": M, "n": N, "k": K, "lda": K, "ldb": Bs.shape[1], "ldd": N}
    peer = "cuBLAS"
    if "bias" in inst.epi:
        bias = torch.randn(N, device="cuda", generator=g).to(ot)
        ptrs["bias"] = bias.data_ptr()
        if "gelu" in inst.epi:
            theirs = lambda: torch._addmm_activation(bias, A, B, use_gelu=True, out=Dr)
            peer = "cuBLASLt GELU_BIAS"
        else:
            theirs = lambda: torch._addmm_activation(bias, A, B, use_gelu=False, out=Dr)
            peer = "cuBLASLt RELU_BIAS"
    else:
        theirs = lambda: torch.matmul(A, B, out=Dr)
    ours = lambda: inst.launch(ptrs, sizes, stream)
    mo, mt = time_pair(torch, ours, theirs, reps)
    fl = 2.0 * M * N * K
    return fl / mo / 1e9, fl / mt / 1e9, peer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--filter", default="")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--time-filter", default="128x256x64")
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--small", action="store_true", help="only small ragged checks (for compute-sanitizer)")
    a = ap.parse_args()
    import torch
    from cuda.bindings import driver as cu
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.zeros(1, device="cuda")
    cu_ok(cu.cuInit(0))
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "SMs", nsm, flush=True)
    stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
    man = json.load(open(os.path.join(a.lib, "manifest.json")))
    insts = [e for e in man["instances"] if e["params"].get("engine") == "wgmma" and a.filter in e["name"]]
    shapes = BIG if not a.shapes else [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    import faulthandler
    failed, timed = [], []
    for e in insts:
        faulthandler.dump_traceback_later(60, exit=True)
        inst = Instance(a.lib, e, cu, nsm)
        r = inst.resources
        print(f"[{inst.name}] regs={r['registers']} spill={r['spill_store_bytes']}/{r['spill_load_bytes']} "
              f"stack={r['stack_bytes']} smem={inst.smem} maps={[m['name'] for m in e.get('tensor_maps', [])]}", flush=True)
        ok_all = True
        for i, (M, N, K) in enumerate(SMALL_SHAPES if a.small else CHECK_SHAPES):
            try:
                ok, msg = check(torch, inst, M, N, K, stream, 100 + i)
            except Exception as ex:
                ok, msg = False, f"EXCEPTION {ex}"
            ok_all &= ok
            print(f"  check {M}x{N}x{K}: {'ok' if ok else 'FAIL'} {msg}", flush=True)
        if not ok_all:
            failed.append(inst.name)
            continue
        plain_or_fused = not inst.epi or inst.epi in (["bias", "gelu"], ["bias", "relu"])
        if a.no_time or a.time_filter not in inst.name or not plain_or_fused or e["out_dtype"] == "f32":
            continue
        for (M, N, K) in shapes:
            o, t, peer = bench(torch, inst, M, N, K, stream, a.reps)
            line = f"  time {M}x{N}x{K}: ours {o:7.1f} TF/s  {peer} {t:7.1f} TF/s  ratio {o / t:.3f}"
            print(line, flush=True)
            timed.append((inst.name, M, N, K, o, t, peer))
        faulthandler.cancel_dump_traceback_later()
    print("\n=== summary ===")
    print(f"{len(insts) - len(failed)}/{len(insts)} instances correct; failed: {failed}")
    for (n, M, N, K, o, t, peer) in timed:
        print(f"{n:50s} {M}x{N}x{K}: {o:7.1f} / {t:7.1f} ({peer}) = {o / t:.3f}")


if __name__ == "__main__":
    main()
