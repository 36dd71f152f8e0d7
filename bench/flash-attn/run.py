#!/usr/bin/env python3
"""Build (NVRTC, sm_90, the sm_80 mma.sync path), check and time templates/attention.cu
(FlashAttention-2 forward) against a float64 reference and torch's SDPA (flash and cuDNN backends).

usage: run.py [--variants a,b] [--check-only] [--reps N] [--quick]
       run.py --compile-only        (no GPU: ptxas report of every variant x dtype x causal)
       run.py --sanitize VARIANT    (no torch: one small ragged case per mode, for compute-sanitizer)
The template is compiled as is with -DTG_STANDALONE and -D overrides (prelude.cuh passed as a
header), with tilegen's NVRTC options (-std=c++17 -default-device).
"""
import argparse, ctypes, math, os, re, sys, time
from concurrent.futures import ThreadPoolExecutor

try:
    import numpy as np
except ImportError:  # --compile-only needs no numpy
    np = None

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SRC = os.path.join(ROOT, "templates", "attention.cu")
SRC_SM90 = os.environ.get("FA_SM90_SRC", os.path.join(ROOT, "templates", "attention_sm90.cu"))
PRELUDE = os.path.join(ROOT, "templates", "prelude.cuh")
ARCH = os.environ.get("FA_ARCH", "sm_90")
CUBIN_DIR = os.environ.get("FA_CUBINS", "/tmp/fa_cubins")


def smem_bytes(d):
    rowb = d["TG_HEAD_DIM"] * 2
    if d.get("SM90"):
        bm, st, qb, items = 64 * d["TG_CONSUMERS"], d["TG_STAGES"], d["TG_Q_BUFS"], 4
        staged = bm * (rowb + 16) if d.get("TG_O_STAGED") else 0  # O's rows (the template's TG_O_STAGED)
        return 1024 + qb * bm * rowb + 2 * st * d["TG_BN"] * rowb + 8 * (2 * qb + 4 * st + 2 * items) + 128 * (items + 1) + staged
    return d["TG_BM"] * rowb + d["TG_STAGES"] * 2 * d["TG_BN"] * rowb


def V(d, bm, bn, warps, stages=2, minb=1, **more):
    return dict(TG_HEAD_DIM=d, TG_BM=bm, TG_BN=bn, TG_WARPS=warps, TG_STAGES=stages, TG_MIN_BLOCKS=minb, **more)


def H(d, bn, consumers=2, stages=2, preg=40, creg=232, pingpong=1, qregs=None, tma=1, qbufs=None, pairs=1,
      coprime=1, gridall=0):
    """A Hopper (sm_90a, wgmma) variant of templates/attention_sm90.cu (Q in registers with two
    consumers; three have too few registers for it; K/V by TMA unless tma=0). Persistent blocks
    loop over work units (causal: pairs of query tiles unless pairs=0); grid min(units, SMs), or
    every unit (gridall=1); causal grids coprime to the units per head unless coprime=0. Q tiles
    in flight: 2 where Q stays in shared memory and two fit (as tilegen's plan), unless qbufs."""
    qregs = int(consumers == 2) if qregs is None else qregs
    d_ = dict(TG_HEAD_DIM=d, TG_BN=bn, TG_CONSUMERS=consumers, TG_STAGES=stages, TG_PRODUCER_REGS=preg,
              TG_CONSUMER_REGS=creg, TG_PINGPONG=pingpong, TG_Q_REGS=qregs, TG_TMA=tma, TG_PAIRS=pairs,
              SM90=1, COPRIME=coprime, GRIDALL=gridall)
    if qbufs is None:
        qbufs = 2 if not qregs and smem_bytes(dict(d_, TG_Q_BUFS=2)) <= 232448 else 1
    d_["TG_Q_BUFS"] = qbufs
    return d_



# An experiment kept for the record as a patch of the template: work items back to back
# (results-sm90-13.txt: slower). The *_chain variants build the patched copy; make it first with
#   patch -o /tmp/attention_sm90_chain.cu templates/attention_sm90.cu bench/flash-attn/attention_sm90_chain.patch
CHAIN_SM90 = os.environ.get("FA_CHAIN_SRC", "/tmp/attention_sm90_chain.cu")
LAZY_SM90 = os.environ.get("FA_LAZY_SM90_SRC", "/tmp/attention_sm90_lazy.cu")
LAZY = os.environ.get("FA_LAZY_SRC", "/tmp/attention_lazy.cu")
SLEEP_SM90 = os.environ.get("FA_SLEEP_SM90_SRC", "/tmp/attention_sm90_sleep.cu")
SERIAL_SM90 = os.environ.get("FA_SERIAL_SM90_SRC", "/tmp/attention_sm90_serial.cu")

VARIANTS = {
    # round 18 (results-sm90-18.txt): cuDNN's order (S = Q K^T, wait, softmax in the turn,
    # O += P V, wait: TG_SERIAL; not kept; build the copy first with
    #   patch -o /tmp/attention_sm90_serial.cu templates/attention_sm90.cu bench/flash-attn/serial_tiles_sm90.patch)
    "s_d128_c2_n128_s3": dict(H(128, 128, 2, 3), TG_SERIAL=1, TG_SRC=SERIAL_SM90),
    "s_d128_c2_n128_s3_qs": dict(H(128, 128, 2, 3, qregs=0), TG_SERIAL=1, TG_SRC=SERIAL_SM90),
    "s_d128_c2_n128_s2": dict(H(128, 128, 2, 2), TG_SERIAL=1, TG_SRC=SERIAL_SM90),
    "s_d64_c3_n128_s3_q2": dict(H(64, 128, 3, 3, 32, 160, qbufs=2), TG_SERIAL=1, TG_SRC=SERIAL_SM90),
    # round 17 (results-sm90-17.txt): the producer's waits poll with test_wait and sleep
    # TG_WAIT_HINT ns between polls (not kept; build the copy first with
    #   patch -o /tmp/attention_sm90_sleep.cu templates/attention_sm90.cu bench/flash-attn/producer_sleep_sm90.patch)
    "t64_d128_c2_n128_s3": dict(H(128, 128, 2, 3), TG_WAIT_HINT=64, TG_SRC=SLEEP_SM90),
    "t256_d128_c2_n128_s3": dict(H(128, 128, 2, 3), TG_WAIT_HINT=256, TG_SRC=SLEEP_SM90),
    "t1000_d128_c2_n128_s3": dict(H(128, 128, 2, 3), TG_WAIT_HINT=1000, TG_SRC=SLEEP_SM90),
    "t256_d64_c3_n128_s3_q2": dict(H(64, 128, 3, 3, 32, 160, qbufs=2), TG_WAIT_HINT=256, TG_SRC=SLEEP_SM90),
    # round 15 (results-sm90-15.txt): lazy rescaling (a warp keeps its maxima until one grows by
    # more than 2^8, and O's rescale is skipped meanwhile: TG_LAZY_RESCALE) and no proxy fence after
    # TMA loads (TG_TMA_FENCE=0), against the template's tiles p_d128_c2_n128_s3,
    # p_d64_c3_n128_s3_q2, p_d256_c2_n64_s2 and the portable d128_m128w4_n32_s2, d64_m128w4_n64_s2.
    # Kept as patches of the templates (slower or no better); make the copies first with
    #   patch -o /tmp/attention_sm90_lazy.cu templates/attention_sm90.cu bench/flash-attn/lazy_rescale_sm90.patch
    #   patch -o /tmp/attention_lazy.cu templates/attention.cu bench/flash-attn/lazy_rescale.patch
    "l_d128_c2_n128_s3": dict(H(128, 128, 2, 3), TG_LAZY_RESCALE=1, TG_SRC=LAZY_SM90),
    "f_d128_c2_n128_s3": dict(H(128, 128, 2, 3), TG_TMA_FENCE=0, TG_SRC=LAZY_SM90),
    "lf_d128_c2_n128_s3": dict(H(128, 128, 2, 3), TG_LAZY_RESCALE=1, TG_TMA_FENCE=0, TG_SRC=LAZY_SM90),
    "p_d128_c2_n128_s3_qs": H(128, 128, 2, 3, qregs=0),
    "lf_d128_c2_n128_s3_qs": dict(H(128, 128, 2, 3, qregs=0), TG_LAZY_RESCALE=1, TG_TMA_FENCE=0, TG_SRC=LAZY_SM90),
    "lf_d64_c3_n128_s3_q2": dict(H(64, 128, 3, 3, 32, 160, qbufs=2), TG_LAZY_RESCALE=1, TG_TMA_FENCE=0,
                                 TG_SRC=LAZY_SM90),
    "lf_d256_c2_n64_s2": dict(H(256, 64, 2, 2, qregs=0), TG_LAZY_RESCALE=1, TG_TMA_FENCE=0, TG_SRC=LAZY_SM90),
    "l_d128_m128w4_n32_s2": V(128, 128, 32, 4, TG_LAZY_RESCALE=1, TG_SRC=LAZY),
    "l_d64_m128w4_n64_s2": V(64, 128, 64, 4, TG_LAZY_RESCALE=1, TG_SRC=LAZY),
    "d128_m128w4_n32_s3": V(128, 128, 32, 4, 3),
    "d64_m128w4_n64_s3": V(64, 128, 64, 4, 3),
    # round 13: the items-back-to-back copy; the template's same tiles are p_d128_c2_n128_s3,
    # p_d64_c3_n128_s3_q2 and p_d256_c2_n64_s2
    "c_d128_c2_n128_s3_chain": dict(H(128, 128, 2, 3), TG_SRC=CHAIN_SM90),
    "c_d64_c3_n128_s3_q2_chain": dict(H(64, 128, 3, 3, 32, 160, qbufs=2), TG_SRC=CHAIN_SM90),
    "c_d256_c2_n64_s2_chain": dict(H(256, 64, 2, 2, qregs=0), TG_SRC=CHAIN_SM90),
    # round 12: persistent blocks (p_*) against the default tiles of the time; causal grids
    # coprime to the units per head unless _nc. The template is persistent since, so the p_*
    # without a suffix are the t_* of the same tiles.
    "p_d128_c2_n128_s3": H(128, 128, 2, 3),
    "p_d128_c2_n128_s3_nc": H(128, 128, 2, 3, coprime=0),
    "p_d128_c2_n128_s3_stride": H(128, 128, 2, 3, pairs=0),
    "p_d128_c2_n128_s3_all": H(128, 128, 2, 3, gridall=1),
    "p_d64_c3_n128_s3": H(64, 128, 3, 3, 32, 160, qbufs=1),
    "p_d64_c3_n128_s3_q2": H(64, 128, 3, 3, 32, 160, qbufs=2),
    "p_d64_c3_n128_s3_q2_nc": H(64, 128, 3, 3, 32, 160, qbufs=2, coprime=0),
    "p_d64_c3_n128_s3_q2_stride": H(64, 128, 3, 3, 32, 160, qbufs=2, pairs=0),
    "p_d64_c3_n128_s3_q2_all": H(64, 128, 3, 3, 32, 160, qbufs=2, gridall=1),
    "p_d256_c2_n64_s2": H(256, 64, 2, 2, qregs=0),
    "p_d256_c2_n64_s2_nc": H(256, 64, 2, 2, qregs=0, coprime=0),
    "p_d256_c2_n64_s2_all": H(256, 64, 2, 2, qregs=0, gridall=1),
    # round 7: K/V by TMA (the default from here) against the cp.async producer (_cp)
    "t_d128_c2_n128_s2": H(128, 128, 2, 2),
    "t_d128_c2_n128_s3": H(128, 128, 2, 3),
    "t_d128_c2_n128_s2_cp": H(128, 128, 2, 2, tma=0),
    "t_d64_c3_n128_s2": H(64, 128, 3, 2, 32, 160),
    "t_d64_c3_n128_s2_cp": H(64, 128, 3, 2, 32, 160, tma=0),
    "t_d256_c2_n64_s2": H(256, 64, 2, 2, qregs=0),
    "t_d256_c2_n64_s2_cp": H(256, 64, 2, 2, qregs=0, tma=0),
    # round 10: smaller K/V tiles for causal head_dim 64 (less masked work on the diagonal)
    "t_d64_c3_n64_s2": H(64, 64, 3, 2, 32, 160),
    "t_d64_c3_n64_s3": H(64, 64, 3, 3, 32, 160),
    "t_d64_c2_n64_s3": H(64, 64, 2, 3),
    "t_d64_c2_n64_s4": H(64, 64, 2, 4),
    "t_d64_c3_n128_s3": H(64, 128, 3, 3, 32, 160),
    "t_d64_c2_n128_s3": H(64, 128, 2, 3),
    "t_d64_c2_n256_s2": H(64, 256, 2, 2),
    "t_d64_c3_n64_s4": H(64, 64, 3, 4, 32, 160),
    "t_d128_c3_n64_s4": H(128, 64, 3, 4, 32, 160),
    # Hopper path (sm_90a): producer warpgroup + 64-row consumer warpgroups on wgmma
    "h_d128_c2_n128_s2": H(128, 128, 2, 2),
    "h_d128_c2_n64_s3": H(128, 64, 2, 3),
    "h_d128_c2_n128_s3": H(128, 128, 2, 3),
    "h_d64_c2_n128_s3": H(64, 128, 2, 3),
    "h_d64_c3_n128_s2": H(64, 128, 3, 2, 32, 160),
    "h_d64_c2_n256_s2": H(64, 256, 2, 2),
    # round 2: ping-pong between consumers (above: on; _np: off), 192-key tiles, 3 consumers at d128
    "h_d128_c2_n128_s3_np": H(128, 128, 2, 3, pingpong=0),
    "h_d128_c2_n128_s2_np": H(128, 128, 2, 2, pingpong=0),
    "h_d128_c2_n192_s2": H(128, 192, 2, 2),
    "h_d128_c3_n64_s3": H(128, 64, 3, 3, 32, 160),
    "h_d64_c3_n128_s2_np": H(64, 128, 3, 2, 32, 160, pingpong=0),
    "h_d64_c2_n192_s2": H(64, 192, 2, 2),
    "h_d64_c3_n128_s3": H(64, 128, 3, 3, 32, 160),
    # round 3: Q in registers (default from here) against Q in shared memory (_qs)
    "h_d128_c2_n128_s3_qs": H(128, 128, 2, 3, qregs=0),
    "h_d64_c2_n128_s3_qs": H(64, 128, 2, 3, qregs=0),
    "h_d128_c3_n64_s4": H(128, 64, 3, 4, 32, 160),
    # experiments on a copy of the template (FA_SM90_SRC): no K/V copies (timing only), one
    # proxy fence per tile
    "h_d256_c2_n64_s2": H(256, 64, 2, 2, qregs=0),
    "h_d256_c2_n64_s2_np": H(256, 64, 2, 2, pingpong=0, qregs=0),
    "x_d128_noload": dict(H(128, 128, 2, 2), TG_EXP_NOLOAD=1),
    "x_d128_onefence": dict(H(128, 128, 2, 2), TG_EXP_ONEFENCE=1),
    # round 1 (results-1.txt): m64w4 won at both head dims
    "d128_m128w8_n64_s2": V(128, 128, 64, 8),
    "d128_m64w4_n64_s2": V(128, 64, 64, 4),
    "d128_m128w8_n64_s3": V(128, 128, 64, 8, 3),
    "d64_m128w8_n128_s2": V(64, 128, 128, 8),
    "d64_m64w4_n128_s2": V(64, 64, 128, 4),
    "d64_m128w8_n64_s3": V(64, 128, 64, 8, 3),
    # round 2: 3 blocks per SM (<= 168 registers), 32-row warps (MI = 2), a 3-stage ring (measured
    # with two template changes since reverted, see NOTES.md)
    "d128_m64w4_n64_s3": V(128, 64, 64, 4, 3),
    "d128_m64w4_n32_s2_b3": V(128, 64, 32, 4, 2, 3),
    "d128_m64w4_n32_s3_b3": V(128, 64, 32, 4, 3, 3),
    "d128_m128w4_n32_s2": V(128, 128, 32, 4),
    "d64_m64w4_n128_s2_b3": V(64, 64, 128, 4, 2, 3),
    "d64_m64w4_n64_s2_b3": V(64, 64, 64, 4, 2, 3),
    "d64_m64w4_n64_s3_b3": V(64, 64, 64, 4, 3, 3),
    "d64_m128w4_n64_s2": V(64, 128, 64, 4),
}
# round 3 (results-3.txt): the template of round 1 with the best shapes of rounds 1 and 2
DEFAULT_VARIANTS = ["d128_m64w4_n64_s2", "d128_m128w4_n32_s2", "d128_m64w4_n32_s2_b3", "d128_m64w4_n64_s3",
                    "d64_m64w4_n128_s2", "d64_m128w4_n64_s2", "d64_m64w4_n128_s2_b3", "d64_m64w4_n64_s2_b3"]
BAD_PTXAS = ("C7504", "C7508", "C7511", "C7515")


HOST_KEYS = ("SM90", "COPRIME", "GRIDALL", "TG_SRC")  # launch facts, not -D defines


def nvrtc_compile(defs):
    from cuda.bindings import nvrtc
    sm90 = defs.get("SM90")
    path = defs.get("TG_SRC") or (SRC_SM90 if sm90 else SRC)
    defs = {k: v for k, v in defs.items() if k not in HOST_KEYS}
    src, pre = open(path, "rb").read(), open(PRELUDE, "rb").read()
    heads, names = [pre], [b"prelude.cuh"]
    for h in ("attention.cuh", "sm90.cuh", "wgmma.cuh"):
        heads.append(open(os.path.join(ROOT, "templates", h), "rb").read())
        names.append(h.encode())
    err, prog = nvrtc.nvrtcCreateProgram(src, b"attention.cu", len(heads), heads, names)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    arch = "sm_90a" if sm90 else ARCH
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17", b"-default-device", b"--ptxas-options=-v",
            b"-DTG_STANDALONE"] + [f"-D{k}={v}".encode() for k, v in defs.items()]
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
    info = dict(regs=int(regs.group(1)) if regs else -1, spill=sum(int(s[0]) for s in spill),
                stack=int(stack.group(1)) if stack else -1, bad=[w for w in BAD_PTXAS if w in log])
    return cubin, log, info


def cu_check(r):
    err = r[0] if isinstance(r, tuple) else r
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err}")
    if isinstance(r, tuple):
        return r[1] if len(r) == 2 else r[1:]
    return None


def builds(name, causal):
    """Whether the template builds this variant: on sm_90a, causal tiles with more query rows than
    keys skip key tiles, which is safe only with ping-pong turns (the template asserts it)."""
    d = VARIANTS[name]
    if not (causal and d.get("SM90")):
        return True
    consumers = d["TG_CONSUMERS"]
    return d["TG_PINGPONG"] != 0 and consumers > 1 or 64 * consumers <= d["TG_BN"]


def build(name, dtype, causal):
    d = dict(VARIANTS[name])
    d["TG_BF16"] = 1 if dtype == "bf16" else 0
    d["TG_CAUSAL"] = 1 if causal else 0
    t0 = time.time()
    cache = os.path.join(CUBIN_DIR, f"{name}_{dtype}_c{int(causal)}")
    if os.path.exists(cache + ".cubin"):  # a sanitizer run reuses the main run's builds
        import json
        cubin, info, log = open(cache + ".cubin", "rb").read(), json.load(open(cache + ".json")), ""
    else:
        cubin, log, info = nvrtc_compile(d)
        os.makedirs(CUBIN_DIR, exist_ok=True)
        import json
        open(cache + ".cubin", "wb").write(cubin)
        json.dump(info, open(cache + ".json", "w"))
    return (name, dtype, causal), dict(defs=d, cubin=cubin, log=log, info=info, secs=time.time() - t0)


class Kernel:
    """One compiled instance; launched with raw device pointers and element strides."""

    def __init__(self, key, b):
        from cuda.bindings import driver as cu
        self.cu, self.key, self.defs, self.info = cu, key, b["defs"], b["info"]
        self.smem = smem_bytes(self.defs)
        if self.defs.get("SM90"):
            self.threads = 128 * (1 + self.defs["TG_CONSUMERS"])
            self.bm = 64 * self.defs["TG_CONSUMERS"]
        else:
            self.threads = 32 * self.defs["TG_WARPS"]
            self.bm = self.defs["TG_BM"]
        self.mod = cu_check(cu.cuModuleLoadData(b["cubin"]))
        self.fn = cu_check(cu.cuModuleGetFunction(self.mod, b"attention_fwd"))
        cu_check(cu.cuFuncSetAttribute(self.fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem))
        self._keep = None

    def prepare(self, p, stream):
        """p: dict with q,k,v,o,lse,cu_q,cu_kv (ints), batch, hq, hkv, sq, skv (max for varlen),
        strides (12 + 2 ints), scale. Returns a launch closure."""
        assert p["hq"] % p["hkv"] == 0
        for key in ("q", "k", "v", "o"):
            assert p[key] % 16 == 0, f"{key} not 16-byte aligned"
        for s in p["strides"][:12]:
            assert s % 8 == 0, "strides must be multiples of 8 elements"
        maps = []
        if self.defs.get("SM90") and self.defs.get("TG_TMA", 1):
            maps = [self.encode_map(p, "k", 3), self.encode_map(p, "v", 6)]
        vals = [ctypes.c_uint64(p[x]) for x in ("q", "k", "v", "o", "lse", "cu_q", "cu_kv")]
        vals += [ctypes.c_int32(p[x]) for x in ("batch", "hq", "hkv", "sq", "skv")]
        vals += [ctypes.c_int64(s) for s in p["strides"]]
        vals += [ctypes.c_float(p["scale"])]
        addrs = [m.getPtr() for m in maps] + [ctypes.addressof(x) for x in vals]
        arr = (ctypes.c_void_p * len(addrs))(*addrs)
        grid = (max(1, -(-p["sq"] // self.bm)), p["hq"], p["batch"])
        if self.defs.get("SM90"):
            n_qt = -(-p["sq"] // self.bm)
            causal = self.defs["TG_CAUSAL"]
            pairs = causal and self.defs["TG_PAIRS"]
            per_head = -(-n_qt // 2) if pairs else n_qt
            units = per_head * p["hq"] * p["batch"]
            blocks = max(1, units if self.defs.get("GRIDALL") else min(units, Kernel.SMS))
            if causal and self.defs.get("COPRIME"):
                while blocks > 1 and math.gcd(blocks, per_head) > 1:  # every block sees every unit
                    blocks -= 1
            grid = (blocks, 1, 1)
        cu, fn, thr, smem = self.cu, self.fn, self.threads, self.smem
        keep = (vals, arr, maps)

        def launch():
            _ = keep
            cu_check(cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], thr, 1, 1, smem, stream, ctypes.addressof(arr), 0))
        return launch


    MAP_LOG = []
    SMS = 132

    def encode_map(self, p, t, first):
        """The K or V map as the manifest gives it: dims [head_dim, seq_kv, heads_kv, batch],
        strides [t_ss, t_hs, t_bs] (elements), box [64, BN, 1, 1], 128-byte swizzle, zero fill.
        A packed varlen call (batch strides 0) does not read it; if the driver refuses that
        encoding, zeros are passed (and logged)."""
        cu = self.cu
        st = p["strides"][first:first + 3]  # bs, ss, hs
        dt = cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if self.defs["TG_BF16"] else \
            cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16
        dims = [self.defs["TG_HEAD_DIM"], p["skv"], p["hkv"], p["batch"]]
        strides = [st[1] * 2, st[2] * 2, st[0] * 2]
        r = cu.cuTensorMapEncodeTiled(dt, 4, p[t], [cu.cuuint64_t(x) for x in dims],
                                      [cu.cuuint64_t(x) for x in strides],
                                      [cu.cuuint32_t(x) for x in (64, self.defs["TG_BN"], 1, 1)], [cu.cuuint32_t(1)] * 4,
                                      cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                                      cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                                      cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                      cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        if int(r[0]) != 0:
            msg = f"encode {t}: {r[0]} dims={dims} strides(bytes)={strides} varlen={p['cu_kv'] != 0}"
            if msg not in Kernel.MAP_LOG:
                Kernel.MAP_LOG.append(msg)
                print("MAP", msg, flush=True)
            if p["cu_kv"] == 0:
                raise RuntimeError(msg)
            return cu.CUtensorMap()
        return r[1]


# ---------------- float64 reference (numpy) ----------------
def ref_attn(q, k, v, causal, scale):
    """q [B,Sq,Hq,D], k/v [B,Skv,Hkv,D] float64 -> o [B,Sq,Hq,D], lse [B,Hq,Sq]."""
    B, Sq, Hq, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    qt = q.transpose(0, 2, 1, 3)
    kt = np.repeat(k, g, axis=2).transpose(0, 2, 3, 1)
    vt = np.repeat(v, g, axis=2).transpose(0, 2, 1, 3)
    s = np.matmul(qt, kt) * scale
    if causal:
        r = np.arange(Sq)[:, None]
        c = np.arange(Skv)[None, :]
        s = np.where(c > r + (Skv - Sq), -np.inf, s)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = s.max(-1, keepdims=True) if Skv > 0 else np.full(s.shape[:-1] + (1,), -np.inf)
        ms = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(s - ms)
        l = e.sum(-1, keepdims=True)
        p = e / np.where(l > 0, l, 1.0)
        o = np.matmul(p, vt).transpose(0, 2, 1, 3)
        lse = np.where(l > 0, np.log(np.where(l > 0, l, 1.0)) + ms, -np.inf)[..., 0]
    return o, lse


TOL = {"bf16": dict(abs=2.5e-2, rel=1.2e-2), "f16": dict(abs=4e-3, rel=2.5e-3)}
LSE_TOL = 2e-3


def compare(o, o_ref, lse, lse_ref, dtype):
    """o/o_ref float64 arrays of the valid region; returns (ok, max_abs, rel, lse_err, msg)."""
    msg = []
    nan = int(np.isnan(o).sum())
    if nan:
        msg.append(f"{nan} NaN")
    err = np.abs(o - o_ref)
    max_abs = float(np.nanmax(err)) if err.size else 0.0
    den = float(np.linalg.norm(o_ref))
    rel = float(np.linalg.norm(np.nan_to_num(o - o_ref, nan=1e9)) / den) if den > 0 else max_abs
    t = TOL[dtype]
    if not (max_abs <= t["abs"]):
        msg.append(f"max_abs {max_abs:.2e}")
    if not (rel <= t["rel"]):
        msg.append(f"rel {rel:.2e}")
    lse_err = 0.0
    if lse is not None:
        fin = np.isfinite(lse_ref)
        if not np.array_equal(np.isfinite(lse), fin) or np.any(lse[~fin] != -np.inf):
            msg.append("LSE -inf pattern differs")
        if fin.any():
            lse_err = float(np.nanmax(np.abs(lse[fin] - lse_ref[fin])))
            if not (lse_err <= LSE_TOL):
                msg.append(f"lse_err {lse_err:.2e}")
    return (not msg), max_abs, rel, lse_err, ", ".join(msg)


# ---------------- checks (torch) ----------------
def check_cases(bm, bn):
    """(name, batch, sq, skv, hq, hkv, layout) ; layout: 'sep' | 'fused' (views of one QKV buffer) |
    'bhsd' (views of [batch, heads, seq, d] tensors) | 'varlen'."""
    c = [
        ("s1", 1, 1, 1, 2, 2, "sep"),
        ("s17", 2, 17, 17, 2, 1, "sep"),
        ("bm-1/bn+1", 1, bm - 1, bn + 1, 2, 2, "sep"),
        ("bm+1/bn-1", 1, bm + 1, bn - 1, 2, 2, "sep"),
        ("primes q<kv", 1, 131, 257, 2, 2, "sep"),
        ("primes q>kv", 2, 257, 131, 2, 2, "sep"),
        ("q>>kv", 1, 300, 7, 2, 2, "sep"),
        ("gqa4", 2, 100, 300, 8, 2, "sep"),
        ("gqa8", 1, 77, 93, 16, 2, "sep"),
        ("mqa", 1, 64, 200, 4, 1, "sep"),
        ("fused qkv", 2, 190, 190, 4, 2, "fused"),
        ("head-major", 2, 150, 260, 4, 2, "bhsd"),
        ("mid", 1, 1000, 1000, 4, 4, "sep"),
        ("long kv", 1, 333, 2049, 2, 1, "sep"),
        # keys scaled up along the sequence (1 + f * j / skv): row maxima keep growing, by more
        # than a lazy rescale's threshold (f = 6) or less (f = 1)
        ("ramp 6", 1, 200, 1000, 2, 2, "ramp:6"),
        ("ramp 1", 1, 130, 700, 2, 1, "ramp:1"),
        ("varlen", [5, 0, 130, 1, 64, 257], [7, 3, 130, 200, 0, 129], 4, 2, "varlen"),
    ]
    out = []
    for x in c:
        if x[-1] == "varlen":
            out.append(dict(name=x[0], lq=x[1], lkv=x[2], hq=x[3], hkv=x[4], layout="varlen"))
        else:
            out.append(dict(name=x[0], batch=x[1], sq=x[2], skv=x[3], hq=x[4], hkv=x[5], layout=x[6]))
    return out


def run_case(torch, kern, case, dtype, causal, d, stream, seed, want_lse=True):
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    g = torch.Generator(device="cuda").manual_seed(seed)
    hq, hkv = case["hq"], case["hkv"]
    scale = 1.0 / math.sqrt(d)
    pad = 8  # output rows padded: the gap must stay NaN (no writes outside the view)
    if case["layout"] == "varlen":
        lq, lkv = case["lq"], case["lkv"]
        tq, tkv = sum(lq), sum(lkv)
        q = torch.randn(tq, hq, d, device="cuda", generator=g).to(tdt)
        k = torch.randn(max(tkv, 1), hkv, d, device="cuda", generator=g).to(tdt)
        v = torch.randn(max(tkv, 1), hkv, d, device="cuda", generator=g).to(tdt)
        obuf = torch.full((tq, hq, d + pad), float("nan"), device="cuda", dtype=tdt)
        o = obuf[..., :d]
        lse = torch.full((hq, tq), float("nan"), device="cuda", dtype=torch.float32)
        cq = torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32, device="cuda")
        ckv = torch.tensor(np.concatenate([[0], np.cumsum(lkv)]), dtype=torch.int32, device="cuda")
        B = len(lq)
        strides = [0, q.stride(0), q.stride(1), 0, k.stride(0), k.stride(1), 0, v.stride(0), v.stride(1),
                   0, o.stride(0), o.stride(1), 0, lse.stride(0)]
        p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr() if want_lse else 0,
                 cu_q=cq.data_ptr(), cu_kv=ckv.data_ptr(), batch=B, hq=hq, hkv=hkv, sq=max(lq), skv=max(lkv),
                 strides=strides, scale=scale)
    else:
        B, sq, skv = case["batch"], case["sq"], case["skv"]
        if case["layout"] == "fused":
            qkv = torch.randn(B, sq, hq + 2 * hkv, d, device="cuda", generator=g).to(tdt)
            q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
        elif case["layout"] == "bhsd":
            q = torch.randn(B, hq, sq, d, device="cuda", generator=g).to(tdt).transpose(1, 2)
            k = torch.randn(B, hkv, skv, d, device="cuda", generator=g).to(tdt).transpose(1, 2)
            v = torch.randn(B, hkv, skv, d, device="cuda", generator=g).to(tdt).transpose(1, 2)
        else:
            q = torch.randn(B, sq, hq, d, device="cuda", generator=g).to(tdt)
            k = torch.randn(B, skv, hkv, d, device="cuda", generator=g).to(tdt)
            v = torch.randn(B, skv, hkv, d, device="cuda", generator=g).to(tdt)
            if case["layout"].startswith("ramp:"):
                f = float(case["layout"].split(":")[1])
                ramp = 1.0 + f * torch.arange(skv, device="cuda", dtype=torch.float32) / skv
                k = (k.float() * ramp[None, :, None, None]).to(tdt)
        obuf = torch.full((B, sq, hq, d + pad), float("nan"), device="cuda", dtype=tdt)
        o = obuf[..., :d]
        lse = torch.full((B, hq, sq), float("nan"), device="cuda", dtype=torch.float32)
        strides = [q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                   v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                   lse.stride(0), lse.stride(1)]
        p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr() if want_lse else 0,
                 cu_q=0, cu_kv=0, batch=B, hq=hq, hkv=hkv, sq=sq, skv=skv, strides=strides, scale=scale)
    kern.prepare(p, stream)()
    torch.cuda.synchronize()
    gap_ok = bool(torch.isnan(obuf[..., d:]).all().item())
    O = o.double().cpu().numpy()
    L = lse.double().cpu().numpy()
    qn, kn, vn = q.double().cpu().numpy(), k.double().cpu().numpy(), v.double().cpu().numpy()
    if case["layout"] == "varlen":
        oks, worst = [], (0.0, 0.0, 0.0)
        msgs = []
        cqn, ckn = np.concatenate([[0], np.cumsum(case["lq"])]), np.concatenate([[0], np.cumsum(case["lkv"])])
        for i in range(len(case["lq"])):
            a, b_ = cqn[i], cqn[i + 1]
            c0, c1 = ckn[i], ckn[i + 1]
            if b_ == a:
                continue
            o_ref, l_ref = ref_attn(qn[None, a:b_], kn[None, c0:c1], vn[None, c0:c1], causal, scale)
            ok, ma, rel, le, msg = compare(O[a:b_][None], o_ref, L[:, a:b_][None] if want_lse else None, l_ref, dtype)
            oks.append(ok)
            if msg:
                msgs.append(f"seq{i}: {msg}")
            worst = (max(worst[0], ma), max(worst[1], rel), max(worst[2], le))
        ok = all(oks)
        ma, rel, le, msg = worst[0], worst[1], worst[2], "; ".join(msgs)
    else:
        o_ref, l_ref = ref_attn(qn, kn, vn, causal, scale)
        ok, ma, rel, le, msg = compare(O, o_ref, L if want_lse else None, l_ref, dtype)
        yard_ref = o_ref
    if not gap_ok:
        ok = False
        msg += " wrote outside the output view"
    # yardstick: torch's flash SDPA on the same inputs (where its semantics match: no varlen, and
    # causal only with sq == skv since SDPA's is_causal is top-left aligned)
    yard = None
    if case["layout"] != "varlen" and (not causal or case["sq"] == case["skv"]):
        try:
            from torch.nn.attention import sdpa_kernel, SDPBackend
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                yo = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, scale=scale,
                    enable_gqa=hq != hkv).transpose(1, 2)
            torch.cuda.synchronize()
            yard = float(np.max(np.abs(yo.double().cpu().numpy() - yard_ref)))
        except Exception as e:
            yard = f"n/a ({type(e).__name__})"
    return ok, ma, rel, le, msg, yard


# ---------------- timing ----------------
BENCH = [  # batch, hq, hkv, seq, d
    (8, 16, 16, 4096, 128), (4, 32, 32, 8192, 128), (16, 16, 16, 2048, 64), (4, 32, 8, 8192, 128),
    (16, 32, 32, 512, 128), (8, 16, 16, 1024, 64), (4, 16, 16, 8192, 64), (4, 16, 16, 4096, 256),
    (2, 32, 8, 8192, 256),
]
if os.environ.get("FA_BENCH"):  # "B,hq,hkv,S,d;..." instead of the shapes above
    BENCH = [tuple(int(x) for x in s.split(",")) for s in os.environ["FA_BENCH"].split(";")]


def bench_shape(torch, kerns, B, hq, hkv, S, d, causal, stream, reps, inner=3, sets=3):
    """TFLOP/s of each kernel and of SDPA's flash and cuDNN backends, timed turn about
    (bench/peers/turns.py)."""
    sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
    from turns import time_turns
    tdt = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(7)
    scale = 1.0 / math.sqrt(d)
    from torch.nn.attention import sdpa_kernel, SDPBackend
    # `sets` copies of the inputs (time_turns gives no call the copy the call before it read).
    fns = {}
    for _ in range(sets):
        q = torch.randn(B, S, hq, d, device="cuda", generator=g).to(tdt)
        k = torch.randn(B, S, hkv, d, device="cuda", generator=g).to(tdt)
        v = torch.randn(B, S, hkv, d, device="cuda", generator=g).to(tdt)
        o = torch.empty(B, S, hq, d, device="cuda", dtype=tdt)
        lse = torch.empty(B, hq, S, device="cuda", dtype=torch.float32)
        strides = [q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), v.stride(0),
                   v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2), lse.stride(0), lse.stride(1)]
        p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(), cu_q=0,
                 cu_kv=0, batch=B, hq=hq, hkv=hkv, sq=S, skv=S, strides=strides, scale=scale)
        for name, kr in kerns.items():
            f = kr.prepare(p, stream)
            f.keep = (q, k, v, o, lse)  # the buffers live as long as the launch
            fns.setdefault(name, []).append(f)
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def sdpa(backend, qt=qt, kt=kt, vt=vt):
            def f():
                with sdpa_kernel([backend]):
                    torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale,
                                                                     enable_gqa=hq != hkv)
            return f
        for nm, be in (("torch-flash", SDPBackend.FLASH_ATTENTION), ("torch-cudnn", SDPBackend.CUDNN_ATTENTION)):
            if nm in fns and fns[nm] is None:
                continue
            try:
                sdpa(be)()
                torch.cuda.synchronize()
                fns.setdefault(nm, []).append(sdpa(be))
            except Exception as e:
                print(f"    {nm}: unavailable ({type(e).__name__}: {str(e)[:120]})", flush=True)
                fns[nm] = None
    fns = {n: fs for n, fs in fns.items() if fs}
    ms = time_turns(fns, rounds=reps, calls=inner)
    flops = 4.0 * B * hq * S * S * d * (0.5 if causal else 1.0)
    return {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}


# ---------------- sanitizer mode (no torch) ----------------
def sanitize(names):
    from cuda.bindings import driver as cu
    cu_check(cu.cuInit(0))
    dev = cu_check(cu.cuDeviceGet(0))
    ctx = cu_check(cu.cuDevicePrimaryCtxRetain(dev))
    cu_check(cu.cuCtxSetCurrent(ctx))
    rng = np.random.default_rng(3)

    def to_bf16_bits(x):
        u = x.astype(np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    def from_bf16_bits(b):
        return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    def dev_put(a):
        ptr = cu_check(cu.cuMemAlloc(max(a.nbytes, 16)))
        if a.nbytes:
            cu_check(cu.cuMemcpyHtoD(ptr, a.ctypes.data, a.nbytes))
        return ptr

    def dev_get(ptr, shape, dt):
        a = np.empty(shape, dtype=dt)
        cu_check(cu.cuMemcpyDtoH(a.ctypes.data, ptr, a.nbytes))
        return a
    allok = True
    for name, causal in [(n, c) for n in names.split(",") for c in (False, True) if builds(n, c)]:
        d = VARIANTS[name]["TG_HEAD_DIM"]
        key, b = build(name, "bf16", causal)
        kern = Kernel(key, b)
        for (B, sq, skv, hq, hkv) in ((2, 67, 45, 4, 2), (1, 45, 131, 2, 1)):
            qf = rng.standard_normal((B, sq, hq, d))
            kf = rng.standard_normal((B, skv, hkv, d))
            vf = rng.standard_normal((B, skv, hkv, d))
            qb, kb, vb = to_bf16_bits(qf), to_bf16_bits(kf), to_bf16_bits(vf)
            qp, kp, vp = dev_put(qb), dev_put(kb), dev_put(vb)
            op = dev_put(np.full((B, sq, hq, d), 0x7FC0, dtype=np.uint16))
            lp = dev_put(np.full((B, hq, sq), np.nan, dtype=np.float32))
            st = [sq * hq * d, hq * d, d, skv * hkv * d, hkv * d, d, skv * hkv * d, hkv * d, d,
                  sq * hq * d, hq * d, d, hq * sq, sq]
            p = dict(q=int(qp), k=int(kp), v=int(vp), o=int(op), lse=int(lp), cu_q=0, cu_kv=0, batch=B, hq=hq,
                     hkv=hkv, sq=sq, skv=skv, strides=st, scale=1.0 / math.sqrt(d))
            kern.prepare(p, cu.CUstream(0))()
            cu_check(cu.cuCtxSynchronize())
            O = from_bf16_bits(dev_get(op, (B, sq, hq, d), np.uint16))
            L = dev_get(lp, (B, hq, sq), np.float32).astype(np.float64)
            o_ref, l_ref = ref_attn(from_bf16_bits(qb), from_bf16_bits(kb), from_bf16_bits(vb), causal, 1.0 / math.sqrt(d))
            ok, ma, rel, le, msg = compare(O, o_ref, L, l_ref, "bf16")
            allok &= ok
            print(f"  sanitize {name} causal={int(causal)} B{B} sq{sq} skv{skv} hq{hq}/{hkv}: "
                  f"{'ok' if ok else 'FAIL ' + msg} max_abs={ma:.2e} lse_err={le:.2e}", flush=True)
            for x in (qp, kp, vp, op, lp):
                cu_check(cu.cuMemFree(x))
    print("sanitize-run", "ok" if allok else "FAIL")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--sanitize", default=None)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--dtypes", default="bf16,f16")
    ap.add_argument("--quick", action="store_true", help="check bf16 non-fused cases only")
    ap.add_argument("--allow-spills", action="store_true", help="time variants that spill (experiments)")
    ap.add_argument("--time-unchecked", default="", help="variants timed even when their checks fail (experiments)")
    a = ap.parse_args()
    if os.environ.get("FA_SMS"):  # fewer blocks than SMs: persistent blocks then take several items
        Kernel.SMS = int(os.environ["FA_SMS"])
    if a.sanitize:
        sanitize(a.sanitize)
        return
    names = a.variants.split(",")
    dtypes = a.dtypes.split(",")
    jobs = [(n, dt, c) for n in names for dt in dtypes for c in (False, True) if builds(n, c)]
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 2)) as ex:
        built = dict(ex.map(lambda j: build(*j), jobs))
    for key, b in built.items():
        i = b["info"]
        print(f"build {key[0]:22s} {key[1]:4s} causal={int(key[2])}: regs={i['regs']} spill={i['spill']} "
              f"stack={i['stack']} bad={i['bad']} smem={smem_bytes(b['defs'])} ({b['secs']:.1f}s)", flush=True)
    if a.compile_only:
        return

    import torch
    from cuda.bindings import driver as cu
    torch.zeros(1, device="cuda")
    cu_check(cu.cuInit(0))
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "SMs",
          torch.cuda.get_device_properties(0).multi_processor_count, flush=True)
    stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
    Kernel.SMS = int(os.environ.get("FA_SMS") or torch.cuda.get_device_properties(0).multi_processor_count)
    import faulthandler
    kerns = {}
    for key, b in built.items():
        if (b["info"]["spill"] or b["info"]["stack"] > 0) and not a.allow_spills or b["info"]["bad"]:
            print(f"skip {key}: spills/stack", flush=True)
            continue
        kerns[key] = Kernel(key, b)
    correct = {}
    for key, kern in kerns.items():
        faulthandler.dump_traceback_later(120, exit=True)
        name, dtype, causal = key
        d = kern.defs["TG_HEAD_DIM"]
        n_ok, n_all, worst, fails = 0, 0, [0.0, 0.0, 0.0], []
        yards = []
        for i, case in enumerate(check_cases(kern.bm, kern.defs["TG_BN"])):
            try:
                ok, ma, rel, le, msg, yard = run_case(torch, kern, case, dtype, causal, d, stream, 1000 + i)
            except Exception as e:
                ok, ma, rel, le, msg, yard = False, 0, 0, 0, f"EXCEPTION {e}", None
            n_all += 1
            n_ok += ok
            worst = [max(worst[0], ma), max(worst[1], rel), max(worst[2], le)]
            if isinstance(yard, float):
                yards.append((ma, yard))
            if not ok:
                fails.append(f"{case['name']}: {msg}")
        # also once without LSE (lse == nullptr path)
        ok2 = run_case(torch, kern, check_cases(kern.bm, kern.defs["TG_BN"])[5], dtype, causal, d, stream, 77, want_lse=False)[0]
        n_all += 1
        n_ok += ok2
        if not ok2:
            fails.append("no-lse: FAIL")
        ymax = max((y for _, y in yards), default=float("nan"))
        print(f"check {name:22s} {dtype:4s} causal={int(causal)}: {n_ok}/{n_all} ok  max_abs={worst[0]:.2e} "
              f"rel={worst[1]:.2e} lse_err={worst[2]:.2e}  (torch-flash max_abs on comparable cases {ymax:.2e})"
              + ("" if not fails else "\n    FAIL " + "\n    FAIL ".join(fails)), flush=True)
        correct[key] = n_ok == n_all or name in a.time_unchecked.split(",")
    faulthandler.cancel_dump_traceback_later()
    if a.check_only:
        return
    print("\n=== timing (bf16, TFLOP/s = 4*B*H*S*S*D / t, halved for causal; interleaved medians) ===", flush=True)
    for (B, hq, hkv, S, d) in BENCH:
        for causal in (False, True):
            ks = {k[0]: kr for k, kr in kerns.items() if k[1] == "bf16" and k[2] == causal
                  and kr.defs["TG_HEAD_DIM"] == d and correct.get(k)}
            if not ks:
                continue
            faulthandler.dump_traceback_later(120, exit=True)
            res = bench_shape(torch, ks, B, hq, hkv, S, d, causal, stream, a.reps)
            fl = res.get("torch-flash", float("nan"))
            ours = {n: t for n, t in res.items() if not n.startswith("torch")}
            best = max(ours, key=ours.get)
            line = "  ".join(f"{n}={t:.1f}" for n, t in res.items())
            print(f"B{B} H{hq}/{hkv} S{S} d{d} causal={int(causal)}: best {best} {ours[best]:.1f} TF/s, "
                  f"vs flash {ours[best] / fl:.3f}x | {line}", flush=True)
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
