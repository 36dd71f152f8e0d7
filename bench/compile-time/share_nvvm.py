#!/usr/bin/env python3
"""Could the portable kernels' two compiles (sm_80 and sm_90) share NVVM's work?

For every instance of a library that has both an sm_80 and an sm_90 target, this compiles its
CUDA C with NVRTC twice, once to PTX only (`compute_80`: front end and NVVM) and once to a
cubin (`sm_80`: the same plus ptxas), with tilegen's options, and reports the time of each.
It also checks that the library's sm_80 and sm_90 PTX differ only in the `.target` line, and,
given `--nvjitlink LIB` and/or `--ptxas BIN`, whether assembling the sm_80 PTX retargeted to
sm_90 gives the library's sm_90 cubin byte for byte (what a refactor must keep).

    LD_LIBRARY_PATH=.nvrtc/nvidia/cu13/lib python3 bench/compile-time/share_nvvm.py \
        generated/manifest.json [--every N] [--nvjitlink libnvJitLink.so.13] [--ptxas ptxas]
"""
import argparse
import ctypes
import json
import os
import subprocess
import tempfile
import time

OPTIONS = ["-std=c++17", "--ptxas-options=-v", "-default-device"]  # nvrtc.rs BASE_OPTIONS


def nvrtc_compile(lib, name, source, arch):
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source, f"{name}.cu".encode(), 0, None, None) == 0
    opts = [f"--gpu-architecture={arch}"] + OPTIONS
    argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    start = time.perf_counter()
    rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
    took = time.perf_counter() - start
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc != 0:
        raise SystemExit(f"{name}: NVRTC failed ({rc}) for {arch}")
    return took


def nvjitlink_cubin(lib, ptx, arch):
    """The cubin nvJitLink makes of one PTX module (symbols are versioned in CUDA 13)."""
    fn = lambda n: getattr(lib, f"__nvJitLink{n}_13_0")
    handle = ctypes.c_void_p()
    opts = [f"-arch={arch}"]
    argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    assert fn("Create")(ctypes.byref(handle), len(opts), argv) == 0
    assert fn("AddData")(handle, 2, ptx, len(ptx), b"kernel.ptx") == 0  # 2: PTX input
    assert fn("Complete")(handle) == 0
    size = ctypes.c_size_t()
    fn("GetLinkedCubinSize")(handle, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    fn("GetLinkedCubin")(handle, buf)
    fn("Destroy")(ctypes.byref(handle))
    return buf.raw


def ptxas_cubin(ptxas, ptx, arch):
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        open(src, "wb").write(ptx)
        subprocess.run([ptxas, f"-arch={arch}", "-v", src, "-o", out], check=True, capture_output=True)
        return open(out, "rb").read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("--every", type=int, default=1, help="time every Nth instance")
    ap.add_argument("--nvjitlink")
    ap.add_argument("--ptxas")
    args = ap.parse_args()
    root = os.path.dirname(os.path.abspath(args.manifest))
    manifest = json.load(open(args.manifest))
    nvrtc = ctypes.CDLL("libnvrtc.so.13")
    jitlink = ctypes.CDLL(args.nvjitlink) if args.nvjitlink else None
    read = lambda p: open(os.path.join(root, p), "rb").read()

    both = [i for i in manifest["instances"] if {"sm_80", "sm_90"} <= {t["arch"] for t in i["targets"]}]
    same_ptx = same_link = same_ptxas = 0
    ptx_only = with_ptxas = 0.0
    for n, inst in enumerate(both):
        t = {x["arch"]: x for x in inst["targets"]}
        ptx80, ptx90 = read(t["sm_80"]["ptx"]["path"]), read(t["sm_90"]["ptx"]["path"])
        retargeted = ptx80.replace(b".target sm_80", b".target sm_90", 1)
        same_ptx += retargeted == ptx90
        cubin90 = read(t["sm_90"]["cubin"]["path"])
        if jitlink:
            same_link += nvjitlink_cubin(jitlink, retargeted, "sm_90") == cubin90
        if args.ptxas:
            same_ptxas += ptxas_cubin(args.ptxas, retargeted, "sm_90") == cubin90
        if n % args.every == 0:
            source = read(inst["source"]["path"])
            ptx_only += nvrtc_compile(nvrtc, inst["name"], source, "compute_80")
            with_ptxas += nvrtc_compile(nvrtc, inst["name"], source, "sm_80")
    timed = len(range(0, len(both), args.every))
    print(f"{len(both)} instances with sm_80 and sm_90 targets")
    print(f"sm_90 PTX = sm_80 PTX but for .target: {same_ptx} of {len(both)}")
    print(f"{timed} timed: PTX only {ptx_only:.1f} s, PTX and cubin {with_ptxas:.1f} s "
          f"(NVVM and the front end {100 * ptx_only / with_ptxas:.0f} % of a compile)")
    if jitlink:
        print(f"nvJitLink's sm_90 cubin = the library's: {same_link} of {len(both)}")
    if args.ptxas:
        print(f"ptxas' sm_90 cubin = the library's: {same_ptxas} of {len(both)}")


if __name__ == "__main__":
    main()
