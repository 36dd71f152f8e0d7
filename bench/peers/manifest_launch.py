"""Launch tilegen kernels from manifest.json alone, with cuda-python's driver API.

What a host in another language needs, and nothing from tilegen's Rust side: the instance's
`args` (pointer arguments as 64-bit addresses, scalars by their type), its `tensor_maps`
(encoded with cuTensorMapEncodeTiled from the manifest's description, passed by value before
the args), its binary for the device (sha256 checked against the manifest) and its
`launch` rule. Covers the attention rules (`query_tiles`, `persistent_query_tiles`) and the
GEMM's `persistent` one; the README's "Output" section is the reference for every field read
here.
"""
import ctypes
import hashlib
import json
import math
import os

from cuda.bindings import driver as cu

SCALARS = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "u32": ctypes.c_uint32, "f32": ctypes.c_float}
ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4}
MAP_DTYPES = {
    "bf16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    "f16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    "f32": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
}
SWIZZLE = {
    "none": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
    "32b": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
    "64b": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
    "128b": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
}
INTERLEAVE = {"none": cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE}
L2_PROMOTION = {
    "none": cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
    "64b": cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
    "128b": cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
    "256b": cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
}
# `zero` is CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements outside the tensor read as zeros.
OOB_FILL = {"zero": cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE}


def check(result):
    """A driver call's value, or an exception naming its error."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err}")
    return rest[0] if len(rest) == 1 else rest or None


class Library:
    """manifest.json of a generated folder, and the device it runs on."""

    def __init__(self, folder, device=0):
        self.folder = folder
        with open(os.path.join(folder, "manifest.json")) as f:
            self.manifest = json.load(f)
        check(cu.cuInit(0))
        dev = check(cu.cuDeviceGet(device))
        attr = cu.CUdevice_attribute
        major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
        minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
        self.sm = 10 * major + minor
        self.sm_count = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))

    def instances(self, op):
        return [i for i in self.manifest["instances"] if i["op"] == op]

    def binary(self, inst):
        """The cubin this device runs: the arch-specific target (sm_90a on sm_90) first, then the
        plain one; None when the instance has neither."""
        names = (f"sm_{self.sm}a", f"sm_{self.sm}")
        for want in names:
            for t in inst["targets"]:
                if t["arch"] == want and t.get("cubin"):
                    return t["cubin"]
        return None

    def load(self, inst):
        return Kernel(self, inst)


class Kernel:
    """One instance, loaded; `launch(values, stream)` runs it with the arguments by name."""

    def __init__(self, lib, inst):
        self.lib, self.inst = lib, inst
        entry = lib.binary(inst)
        if entry is None:
            raise RuntimeError(f"{inst['name']}: no binary for sm_{lib.sm}")
        path = os.path.realpath(os.path.join(lib.folder, entry["path"]))
        if not path.startswith(os.path.realpath(lib.folder) + os.sep):
            raise RuntimeError(f"{inst['name']}: binary path {entry['path']!r} leaves the folder")
        data = open(path, "rb").read()
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise RuntimeError(f"{inst['name']}: {entry['path']} does not match the manifest's sha256")
        self.module = check(cu.cuModuleLoadData(data))
        self.function = check(cu.cuModuleGetFunction(self.module, inst["entry_point"].encode()))
        launch = inst["launch"]
        self.threads, self.shared = launch["threads"], launch["shared_bytes"]
        self._held = None
        check(cu.cuFuncSetAttribute(
            self.function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.shared))

    def max_active_clusters(self):
        """How many of the kernel's clusters (its compiled cluster shape) the device holds at
        once, with the instance's block and shared memory (cuOccupancyMaxActiveClusters); asked
        once."""
        if self._held is not None:
            return self._held
        cluster = self.inst["launch"]["grid"].get("cluster", 1)
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = cluster, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.threads, 1, 1
        cfg.sharedMemBytes = self.shared
        cfg.numAttrs = 0
        self._held = check(cu.cuOccupancyMaxActiveClusters(self.function, cfg))
        return self._held

    def grid(self, v, hold=True):
        """Blocks per the instance's launch rule, from the argument values. A persistent GEMM
        grid in clusters holds at most as many as the device runs at once (`hold=False`: the
        rule's count before that limit, for comparison)."""
        rule = self.inst["launch"]["grid"]
        if rule["rule"] == "persistent":
            tiles = -(-v["m"] // rule["tile_m"]) * -(-v["n"] // rule["tile_n"])
            cluster = rule.get("cluster", 1)
            clusters = min(tiles, max(self.lib.sm_count * rule["ctas_per_sm"] // cluster, 1))
            if cluster > 1 and hold:
                held = self.max_active_clusters()
                if held:
                    clusters = min(clusters, held)
            return (clusters * cluster, 1, 1)
        tiles = -(-v["seq_q"] // rule["tile_q"])
        if rule["rule"] == "query_tiles":
            return (tiles, v["heads_q"], v["batch"])
        if rule["rule"] == "persistent_query_tiles":
            per_head = -(-tiles // 2) if rule.get("pairs") else tiles
            units = per_head * v["heads_q"] * v["batch"]
            x = min(units, self.lib.sm_count * rule["ctas_per_sm"])
            if rule.get("pairs"):
                while x > 1 and math.gcd(x, per_head) > 1:
                    x -= 1
            return (x, 1, 1)
        raise RuntimeError(f"{self.inst['name']}: launch rule {rule['rule']!r} is not handled here")

    def encode(self, m, v):
        """One tensor map from its manifest description; sizes and strides by argument name."""
        size = lambda s: int(s) if s.isdigit() else int(v[s])
        eb = ELEM_BYTES[m["dtype"]]
        dims = [size(s) for s in m["dims"]]
        strides = [size(s) * eb for s in m["strides"]]
        # Rows that are not whole 128-byte L2 lines apart take the map's other promotion.
        l2 = m["l2_promotion"]
        if "l2_promotion_straddling" in m and strides and strides[0] % 128:
            l2 = m["l2_promotion_straddling"]
        return check(cu.cuTensorMapEncodeTiled(
            MAP_DTYPES[m["dtype"]], len(dims), int(v[m["tensor"]]),
            [cu.cuuint64_t(x) for x in dims], [cu.cuuint64_t(x) for x in strides],
            [cu.cuuint32_t(x) for x in m["box"]], [cu.cuuint32_t(1)] * len(dims),
            INTERLEAVE[m["interleave"]], SWIZZLE[m["swizzle"]], L2_PROMOTION[l2],
            OOB_FILL[m["oob_fill"]]))

    def prepare(self, v, stream, hold=True):
        """A launch closure for these argument values (pointers as ints, null as 0)."""
        maps = [self.encode(m, v) for m in self.inst.get("tensor_maps", [])]
        vals = []
        for a in self.inst["args"]:
            if a["kind"] == "scalar":
                vals.append(SCALARS[a["type"]](v[a["name"]]))
            else:
                vals.append(ctypes.c_uint64(int(v[a["name"]])))
        ptrs = [m.getPtr() for m in maps] + [ctypes.addressof(x) for x in vals]
        params = (ctypes.c_void_p * len(ptrs))(*ptrs)
        grid, fn, threads, shared = self.grid(v, hold), self.function, self.threads, self.shared
        keep = (maps, vals, params)

        def launch():
            _ = keep
            check(cu.cuLaunchKernel(fn, *grid, threads, 1, 1, shared, stream, ctypes.addressof(params), 0))
        return launch


def attention_values(q, k, v, o, lse, scale):
    """An attention instance's argument values for dense torch tensors: q and o
    [batch, seq_q, heads_q, head_dim], k and v [batch, seq_kv, heads_kv, head_dim], lse
    [batch, heads_q, seq_q] in f32 (or None); strides in elements, no cu_seqlens."""
    for t in (q, k, v, o):  # what the bindings check (16-byte bulk copies write O)
        if t.stride(3) != 1 or t.data_ptr() % 16 or any(x % 8 for x in t.stride()[:3]):
            raise ValueError("q, k, v, o: last dimension contiguous, 16-byte aligned, strides multiples of 8")
    b, sq, hq, _ = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    values = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(),
              "lse": lse.data_ptr() if lse is not None else 0, "cu_seqlens_q": 0, "cu_seqlens_kv": 0,
              "batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_kv": skv, "scale": scale,
              "lse_bs": lse.stride(0) if lse is not None else 0, "lse_hs": lse.stride(1) if lse is not None else 0}
    for t, x in (("q", q), ("k", k), ("v", v), ("o", o)):
        values.update({f"{t}_bs": x.stride(0), f"{t}_ss": x.stride(1), f"{t}_hs": x.stride(2)})
    return values
