#!/usr/bin/env python3
"""Build (NVRTC, sm_90a), check and time the bf16 Hopper GEMM in gemm_sm90.cu against torch.matmul (cuBLAS).

usage: run.py [--variants a,b] [--check-only] [--no-big-check] [--reps N] [--shapes 4096x4096x4096,...]
       run.py --sanitize VARIANT      (one small ragged shape, for compute-sanitizer)
       run.py --compile-only          (works without a GPU: prints the ptxas report of each variant)
"""
import argparse, ctypes, os, re, statistics, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "gemm_sm90.cu")

# name -> (compile-time defines, grid mode). grid: "tiles" = one CTA per tile, "persist" = one CTA per SM
BASE = dict(BM=128, BN=256, NCONS=2, STAGES=3, EPI=1, GROUP_M=8, CLUSTER_M=1, BT=0, MC_SPLIT=1, PROD_REGS=40, CONS_REGS=232, WAIT0=0)
def V(grid="persist", **kw):
    d = dict(BASE); d.update(kw); return (d, grid)
VARIANTS = {
    "s1_128x128_1wg":   V("tiles", BN=128, NCONS=1, STAGES=4, EPI=0),
    "s2_128x256_2wg":   V("tiles"),
    "s3_persist_g8":    V("persist"),
    "s3_persist_g16":   V("persist", GROUP_M=16),
    "s4_cluster2":      V("persist", CLUSTER_M=2),
    "s4_cluster2_128":  V("persist:128", CLUSTER_M=2),
    "s4_cluster2_epi0": V("persist", CLUSTER_M=2, EPI=0, STAGES=4),
    "nt_cluster2":      V("persist", CLUSTER_M=2, BT=1),
    # round 2
    "p_epi0_s4":        V("persist", EPI=0, STAGES=4, GROUP_M=16),
    "p_g32":            V("persist", GROUP_M=32),
    "p_g16_r24":        V("persist", GROUP_M=16, PROD_REGS=24, CONS_REGS=240),
    "nt_persist":       V("persist", GROUP_M=16, BT=1),
    "cl2_tiles":        V("tiles", CLUSTER_M=2),
    "cl2_one_loader":   V("persist", CLUSTER_M=2, MC_SPLIT=0),
    # round 3
    "p_wait0":          V("persist", GROUP_M=16, WAIT0=1),
    "p_epi2_s4":        V("persist", GROUP_M=16, EPI=2, STAGES=4),
    "cl2_wait0":        V("persist", CLUSTER_M=2, WAIT0=1),
    "cl2_epi2_s4":      V("persist", CLUSTER_M=2, EPI=2, STAGES=4),
    "cl2_epi2_s4_w0":   V("persist", CLUSTER_M=2, EPI=2, STAGES=4, WAIT0=1),
    # round 4 (after dropping .release.cluster from the remote arrive)
    "cl2_g4":           V("persist", CLUSTER_M=2, GROUP_M=4),
    "cl2_epi2_s4_g4":   V("persist", CLUSTER_M=2, EPI=2, STAGES=4, GROUP_M=4),
}
VARIANTS["best"] = VARIANTS["s3_persist_g16"]          # = the defaults in gemm_sm90.cu
VARIANTS["best_cluster"] = VARIANTS["cl2_wait0"]
DEFAULT_VARIANTS = list(VARIANTS)
BIG_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 11008, 4096), (16384, 4096, 4096)]
RAGGED = [(1, 8, 8), (129, 264, 72), (1000, 1032, 1000), (2056, 3080, 2048), (64, 64, 64), (300, 520, 4104)]
BAD_PTXAS = ("C7504", "C7508", "C7511", "C7515")


def nvrtc_compile(defs):
    from cuda.bindings import nvrtc
    src = open(SRC, "rb").read()
    err, prog = nvrtc.nvrtcCreateProgram(src, b"gemm_sm90.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"--ptxas-options=-v"]
    opts += [f"-D{k}={v}".encode() for k, v in defs.items()]
    res = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors="replace").rstrip("\x00 \n")
    if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError("NVRTC failed:\n" + log)
    _, n = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * n
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.findall(r"(\d+) bytes spill (stores|loads)", log)
    stack = re.search(r"(\d+) bytes stack frame", log)
    info = dict(regs=int(regs.group(1)) if regs else -1,
                spill=sum(int(s[0]) for s in spill), stack=int(stack.group(1)) if stack else -1)
    bad = [w for w in BAD_PTXAS if w in log]
    if info["spill"] or info["stack"] > 0 or bad:
        raise RuntimeError(f"ptxas problem {bad} {info}:\n{log}")
    return cubin, log, info


def smem_bytes(d):
    stage = (d["BM"] + d["BN"]) * 64 * 2
    c = {0: 0, 1: d["BM"] * d["BN"] * 2, 2: d["BM"] * 128 * 2}[d["EPI"]]
    return d["STAGES"] * stage + c + 16 * d["STAGES"] + 1024


def cu_check(r):
    err = r[0] if isinstance(r, tuple) else r
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err}")
    return r[1:] if isinstance(r, tuple) and len(r) > 2 else (r[1] if isinstance(r, tuple) and len(r) == 2 else None)


class Kernel:
    def __init__(self, name, defs, grid):
        from cuda.bindings import driver as cu
        self.cu, self.name, self.defs, self.grid_mode = cu, name, defs, grid
        t0 = time.time()
        self.cubin, self.log, self.info = nvrtc_compile(defs)
        self.compile_s = time.time() - t0
        self.smem = smem_bytes(defs)
        self.nthreads = 128 * (defs["NCONS"] + 1)
        self.mod = cu_check(cu.cuModuleLoadData(self.cubin))
        self.fn = cu_check(cu.cuModuleGetFunction(self.mod, b"gemm_bf16_sm90"))
        cu_check(cu.cuFuncSetAttribute(self.fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem))
        self.nsm = None
        self.max_clusters = None
        if defs["CLUSTER_M"] > 1:
            try:
                cfg = cu.CUlaunchConfig()
                cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 132, 1, 1
                cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.nthreads, 1, 1
                cfg.sharedMemBytes = self.smem
                cfg.numAttrs = 0
                self.max_clusters = cu_check(cu.cuOccupancyMaxActiveClusters(self.fn, cfg))
            except Exception as e:
                self.max_clusters = f"query failed: {e}"
        self._cache = {}

    def _tmap(self, ptr, inner, outer, stride_bytes, box_inner, box_outer):
        cu = self.cu
        r = cu.cuTensorMapEncodeTiled(
            cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr,
            [cu.cuuint64_t(inner), cu.cuuint64_t(outer)], [cu.cuuint64_t(stride_bytes)],
            [cu.cuuint32_t(box_inner), cu.cuuint32_t(box_outer)], [cu.cuuint32_t(1), cu.cuuint32_t(1)],
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        tm = cu_check(r)
        return ctypes.string_at(tm.getPtr(), 128)

    def args(self, A, B, D, M, N, K):
        key = (A.data_ptr(), B.data_ptr(), D.data_ptr(), M, N, K)
        if key in self._cache:
            return self._cache[key]
        d = self.defs
        assert K % 8 == 0 and N % 8 == 0, "TMA needs 16-byte row strides"
        ta = self._tmap(A.data_ptr(), K, M, K * 2, 64, d["BM"])
        if d["BT"]:   # B stored [N,K]
            tb = self._tmap(B.data_ptr(), K, N, K * 2, 64, 64)
        else:         # B stored [K,N]
            tb = self._tmap(B.data_ptr(), N, K, N * 2, 64, 64)
        td = self._tmap(D.data_ptr(), N, M, N * 2, 64, d["BM"] // d["NCONS"])
        bufs = [ctypes.create_string_buffer(ta, 128), ctypes.create_string_buffer(tb, 128),
                ctypes.create_string_buffer(td, 128), ctypes.c_uint64(D.data_ptr()),
                ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K)]
        arr = (ctypes.c_void_p * len(bufs))(*[ctypes.addressof(b) for b in bufs])
        BM, BN, CL = d["BM"], d["BN"], d["CLUSTER_M"]
        num_mc = -(-(-(-M // BM)) // CL)
        tiles = num_mc * (-(-N // BN))
        if self.grid_mode.startswith("persist"):
            ncta = int(self.grid_mode.split(":")[1]) if ":" in self.grid_mode else self.nsm
            grid = min(tiles, ncta // CL) * CL
        else:
            grid = tiles * CL
        self._cache[key] = (bufs, arr, grid)
        return self._cache[key]

    def __call__(self, A, B, D, M, N, K, stream):
        bufs, arr, grid = self.args(A, B, D, M, N, K)
        cu_check(self.cu.cuLaunchKernel(self.fn, grid, 1, 1, self.nthreads, 1, 1, self.smem, stream,
                                        ctypes.addressof(arr), 0))


def make_inputs(torch, M, N, K, bt, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    A = torch.randn(M, K, device="cuda", dtype=torch.float32, generator=g).to(torch.bfloat16)
    if bt:
        Bs = torch.randn(N, K, device="cuda", dtype=torch.float32, generator=g).to(torch.bfloat16)
        B = Bs.t()
    else:
        Bs = torch.randn(K, N, device="cuda", dtype=torch.float32, generator=g).to(torch.bfloat16)
        B = Bs
    return A, B, Bs


def check(torch, k, M, N, K, stream, seed):
    A, B, Bs = make_inputs(torch, M, N, K, k.defs["BT"], seed)
    D = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    k(A, Bs, D, M, N, K, stream)
    torch.cuda.synchronize()
    Af, Bf = A.float(), B.float()
    ref = Af @ Bf
    bound = Af.abs() @ Bf.abs()
    out = D.float()
    err = (out - ref).abs()
    tol = 2 * K * 2.0 ** -24 * bound + 2.0 ** -8 * ref.abs() + 1e-30
    bad = int((~(err <= tol)).sum().item())
    rel = ((out - ref).norm() / ref.norm()).item()
    return bad, rel


def time_pair(torch, k, M, N, K, stream, reps, inner=3):
    A, B, Bs = make_inputs(torch, M, N, K, k.defs["BT"], 1234)
    D = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    Dr = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ours = lambda: k(A, Bs, D, M, N, K, stream)
    theirs = lambda: torch.matmul(A, B, out=Dr)
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
    fl = 2.0 * M * N * K
    mo, mt = statistics.median(to), statistics.median(tt)
    return fl / mo / 1e9, fl / mt / 1e9, mo, mt, (max(to) - min(to)) / mo


def time_solo(torch, k, M, N, K, stream, reps, inner=3):
    A, B, Bs = make_inputs(torch, M, N, K, k.defs["BT"], 99)
    D = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    out = []
    for f in (lambda: k(A, Bs, D, M, N, K, stream), lambda: torch.matmul(A, B, out=D)):
        for _ in range(3):
            f()
        ts = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(inner):
                f()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) / inner)
        out.append(2.0 * M * N * K / statistics.median(ts) / 1e9)
    return out


def power_probe(torch, k, stream, shapes):
    import subprocess, threading
    for (M, N, K) in shapes:
        A, B, Bs = make_inputs(torch, M, N, K, k.defs["BT"], 5)
        D = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        for label, f in (("ours", lambda: k(A, Bs, D, M, N, K, stream)), ("cuBLAS", lambda: torch.matmul(A, B, out=D))):
            samples = []
            def sampler():
                time.sleep(1.5)
                for _ in range(4):
                    q = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                        "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip()
                    samples.append(q)
                    time.sleep(0.5)
            th = threading.Thread(target=sampler); th.start()
            t0 = time.time(); n = 0
            e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            while time.time() - t0 < 4.0:
                for _ in range(20):
                    f()
                n += 20
                torch.cuda.synchronize()
            e1.record(); e1.synchronize()
            th.join()
            tf = 2.0 * M * N * K * n / (e0.elapsed_time(e1) * 1e-3) / 1e12
            print(f"  power {M}x{N}x{K} {label:6s}: {tf:6.1f} TF/s over {n} runs; (MHz, W, C) samples: {samples}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--no-big-check", action="store_true")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--sanitize", default=None)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--solo", action="store_true", help="also time each side alone (not interleaved)")
    ap.add_argument("--power", action="store_true", help="sample SM clock / power while each side runs ~4 s")
    a = ap.parse_args()
    names = [a.sanitize] if a.sanitize else a.variants.split(",")

    if a.compile_only:
        for n in names:
            d, g = VARIANTS[n]
            try:
                _, log, info = nvrtc_compile(d)
                print(f"{n:20s} regs={info['regs']} spill={info['spill']} smem={smem_bytes(d)}")
            except Exception as e:
                print(f"{n:20s} FAILED {e}")
        return

    import torch
    from cuda.bindings import driver as cu
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    cu_check(cu.cuInit(0))
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "SMs",
          torch.cuda.get_device_properties(0).multi_processor_count, flush=True)
    stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = BIG_SHAPES if not a.shapes else [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]

    import faulthandler
    results = {}
    for n in names:
        faulthandler.dump_traceback_later(90, exit=True)  # a hung kernel ends the run instead of the lease
        d, g = VARIANTS[n]
        try:
            k = Kernel(n, d, g)
        except Exception as e:
            print(f"[{n}] BUILD FAILED: {e}", flush=True)
            continue
        k.nsm = nsm
        print(f"[{n}] defs={d} grid={g} regs={k.info['regs']} spill={k.info['spill']} smem={k.smem} "
              f"compile={k.compile_s:.1f}s max_active_clusters={k.max_clusters}", flush=True)
        if a.sanitize:
            for (M, N, K) in [(129, 264, 72), (300, 520, 200), (1, 8, 8)]:
                bad, rel = check(torch, k, M, N, K, stream, 7)
                print(f"  sanitize-run {M}x{N}x{K}: bad={bad} rel={rel:.2e}", flush=True)
            return
        ok = True
        chk = RAGGED + ([] if a.no_big_check else [BIG_SHAPES[0], (8192, 11008, 4096)])
        for i, (M, N, K) in enumerate(chk):
            try:
                bad, rel = check(torch, k, M, N, K, stream, 100 + i)
            except Exception as e:
                print(f"  check {M}x{N}x{K}: EXCEPTION {e}", flush=True)
                ok = False
                break
            flag = "ok" if bad == 0 and rel < 1e-2 else "FAIL"
            ok &= flag == "ok"
            print(f"  check {M}x{N}x{K}: bad={bad} rel={rel:.2e} {flag}", flush=True)
        if a.power and ok:
            power_probe(torch, k, stream, shapes)
            results[n] = {}
            continue
        if not ok or a.check_only:
            results[n] = None if not ok else {}
            continue
        res = {}
        for (M, N, K) in shapes:
            o, t, mo, mt, spread = time_pair(torch, k, M, N, K, stream, a.reps)
            res[(M, N, K)] = (o, t)
            print(f"  time {M}x{N}x{K}: ours {o:7.1f} TF/s ({mo*1e3:8.1f} us)  cuBLAS {t:7.1f} TF/s ({mt*1e3:8.1f} us)"
                  f"  ratio {o/t:.3f}  spread {spread:.2f}", flush=True)
            if a.solo:
                so, st = time_solo(torch, k, M, N, K, stream, a.reps)
                print(f"       solo: ours {so:7.1f} TF/s  cuBLAS {st:7.1f} TF/s  ratio {so/st:.3f}", flush=True)
        results[n] = res

    print("\n=== summary (TFLOP/s ours / cuBLAS, ratio) ===")
    hdr = "variant".ljust(20) + "".join(f"{'x'.join(map(str, s)):>24s}" for s in shapes)
    print(hdr)
    for n, res in results.items():
        if res is None:
            print(n.ljust(20) + "  INCORRECT")
            continue
        if not res:
            print(n.ljust(20) + "  correct (not timed)")
            continue
        print(n.ljust(20) + "".join(f"{res[s][0]:7.1f}/{res[s][1]:6.1f} {res[s][0]/res[s][1]:5.3f}".rjust(24) for s in shapes))


if __name__ == "__main__":
    main()
