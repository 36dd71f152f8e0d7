#!/usr/bin/env python3
"""Runs GEMM instances on the CPU emulator (emu_shim.h) against a double-precision reference.

The rendered kernel itself is compiled with g++: the inline-PTX section of templates/gemm.cu
(between "GEMM helpers: inline PTX" and "end of PTX helpers") is replaced by emu_shim.h, which
runs each CUDA thread as a fiber and implements ldmatrix, mma.sync, cp.async groups and
__syncthreads from the PTX ISA's definitions. Each instance runs ragged shapes under four
schedules: cp.async landing lazily (at the wait that forces it) or eagerly (at issue), and the
lowest- or highest-numbered runnable thread first (one warp runs ahead as far as the barriers
allow). Also counts ldmatrix / 32-bit shared-load bank conflicts.

usage (from the repository root; needs g++ >= 12 and no GPU or NVRTC):
  cargo build --release
  TILEGEN_CACHE_DIR=/tmp/c target/release/tilegen generate --specs specs/gemm.yaml --out /tmp/gemm-lib --no-bindings
  python3 bench/gemm-emu/run_emu.py /tmp/gemm-lib/manifest.json specs/gemm.yaml [name-substring ...]
env: TILEGEN (binary), TEMPLATES (folder), MODES (e.g. lazy-low,eager-high), SHAPES
(e.g. 100x200x300x0: M x N x K x extra-ld-vectors), VERBOSE=1.
"""
import json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TILEGEN = os.environ.get("TILEGEN", os.path.join(ROOT, "target/release/tilegen"))
TEMPLATES = os.environ.get("TEMPLATES", os.path.join(ROOT, "templates"))
WORK = tempfile.mkdtemp(prefix="gemm-emu-")

CT = {"f32": "float", "f16": "tg_f16", "bf16": "tg_bf16"}


def source(name, specs):
    out = subprocess.run([TILEGEN, "show", name, "--specs", specs, "--templates", TEMPLATES],
                         check=True, capture_output=True, text=True, cwd=ROOT).stdout
    def cut(text, start, end):
        i = text.index(start)
        j = text.index(end, i) + len(end)
        return text[:i] + text[j:]
    out = cut(out, "// ---- tilegen prelude", "// ---- end of prelude ----")
    out = cut(out, "// ---- GEMM helpers: inline PTX", "// ---- end of PTX helpers ----")
    assert "asm" not in out, "inline PTX left outside the helper section"
    return out


def harness(inst, shapes):
    args = inst["args"]
    p = inst["params"]
    layout = p.get("layout", "nn")
    a_row, b_row = layout[0] == "n", layout[1] == "n"
    T, OT = CT[inst["dtype"]], CT[inst["out_dtype"]]
    in_vec = 16 // (4 if inst["dtype"] == "f32" else 2)
    out_vec = 16 // (4 if inst["out_dtype"] == "f32" else 2)
    tf32 = p.get("tf32", False)
    epi = inst["epilogue"]
    names = [a["name"] for a in args]
    launch = inst["launch"]
    tm, tn = launch["grid"]["tile_m"], launch["grid"]["tile_n"]
    call_args = []
    for a in args:
        n = a["name"]
        if a["kind"] in ("in", "out"):
            call_args.append(f"g_{n}")
        elif n == "alpha":
            call_args.append("g_alpha")
        else:
            call_args.append(f"g_{n}")
    epi_code = []
    for s in epi:
        epi_code.append({
            "scale": "v *= alpha;",
            "bias": "v += bias;",
            "relu": "v = v > 0 ? v : 0;",
            "gelu": "v = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));",
            "gelu_erf": "v = 0.5 * v * (1 + erf(v / sqrt(2.0)));",
            "silu": "v = v / (1 + exp(-v));",
            "residual": "v += res;",
        }[s])
    shapes_c = ",".join("{%d,%d,%d,%d}" % s for s in shapes)
    return f"""
#include <random>
static {T} *g_a, *g_b;
static {OT} *g_d, *g_bias, *g_c;
static long long g_m, g_n, g_k, g_lda, g_ldb, g_ldc, g_ldd;
static float g_alpha = 1.0f;
static void body() {{ {inst['entry_point']}({", ".join(call_args)}); }}
static double epi(double v, double bias, double res, double alpha) {{ {" ".join(epi_code)} return v; }}
static double rnd_in(double x) {{ {T} t = tg_from_float<{T}>((float)x); double r = tg_to_float(t); {"r = __uint_as_float(tg_tf32(__float_as_uint((float)r)) & 0xffffe000u);" if tf32 else ""} return r; }}
template <typename X> static X* alloc(size_t n) {{ return (X*)malloc(std::max<size_t>(n, 1) * sizeof(X)); }}
static long long up(long long x, long long v) {{ return (x + v - 1) / v * v; }}
int main(int argc, char** argv) {{
    int shapes[][4] = {{{shapes_c}}};
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    int failures = 0;
    for (auto& s : shapes) {{
        const long long M = s[0], N = s[1], K = s[2], pad = s[3];
        g_m = M; g_n = N; g_k = K;
        // leading dimensions: the row length rounded up to 16 bytes, plus `pad` vectors
        const long long a_rows = {"M" if a_row else "K"}, a_len = {"K" if a_row else "M"};
        const long long b_rows = {"K" if b_row else "N"}, b_len = {"N" if b_row else "K"};
        g_lda = up(std::max(a_len, 1LL), {in_vec}) + pad * {in_vec};
        g_ldb = up(std::max(b_len, 1LL), {in_vec}) + pad * {in_vec};
        g_ldd = up(std::max(N, 1LL), {out_vec}) + pad * {out_vec};
        g_ldc = g_ldd + {out_vec} * (pad % 2);
        const size_t na = a_rows ? (a_rows - 1) * g_lda + a_len : 0, nb = b_rows ? (b_rows - 1) * g_ldb + b_len : 0;
        const size_t nd = (M - 1) * g_ldd + N, nc = (M - 1) * g_ldc + N;
        g_a = alloc<{T}>(na); g_b = alloc<{T}>(nb); g_d = alloc<{OT}>((M - 1) * g_ldd + g_ldd);
        g_c = alloc<{OT}>(nc); g_bias = alloc<{OT}>(N);
        std::vector<double> A(M * K), B(K * N), C(M * N), bias(N);
        for (size_t i = 0; i < na; ++i) g_a[i] = tg_from_float<{T}>(NAN);  // padding poison
        for (size_t i = 0; i < nb; ++i) g_b[i] = tg_from_float<{T}>(NAN);
        for (long long i = 0; i < M; ++i) for (long long kk = 0; kk < K; ++kk) {{
            float x = U(rng); {T} v = tg_from_float<{T}>(x);
            g_a[{"i * g_lda + kk" if a_row else "kk * g_lda + i"}] = v; A[i * K + kk] = rnd_in(tg_to_float(v)); }}
        for (long long kk = 0; kk < K; ++kk) for (long long j = 0; j < N; ++j) {{
            float x = U(rng); {T} v = tg_from_float<{T}>(x);
            g_b[{"kk * g_ldb + j" if b_row else "j * g_ldb + kk"}] = v; B[kk * N + j] = rnd_in(tg_to_float(v)); }}
        for (long long i = 0; i < M; ++i) for (long long j = 0; j < N; ++j) {{
            {OT} v = tg_from_float<{OT}>(U(rng)); g_c[i * g_ldc + j] = v; C[i * N + j] = tg_to_float(v); }}
        for (long long j = 0; j < N; ++j) {{ {OT} v = tg_from_float<{OT}>(U(rng)); g_bias[j] = v; bias[j] = tg_to_float(v); }}
        g_alpha = 0.75f;
        const unsigned short sentinel = 0x7e5a;
        for (size_t i = 0; i < (size_t)((M - 1) * g_ldd + g_ldd) * sizeof({OT}) / 2; ++i) ((unsigned short*)g_d)[i] = sentinel;
        const unsigned grid = (unsigned)(((M + {tm} - 1) / {tm}) * ((N + {tn} - 1) / {tn}));
        emu_launch(grid, {launch['threads']}, {launch['shared_bytes']}, body);
        double max_err = 0; long bad = 0, untouched = 0, clobbered = 0;
        for (long long i = 0; i < M; ++i) {{
            for (long long j = 0; j < g_ldd; ++j) {{
                const unsigned short* raw = (const unsigned short*)&g_d[i * g_ldd + j];
                bool sent = true;
                for (size_t q = 0; q < sizeof({OT}) / 2; ++q) sent = sent && raw[q] == sentinel;
                if (j >= N) {{ if (!sent) clobbered++; continue; }}
                if (sent) {{ untouched++; continue; }}
                double acc = 0, mag = 0;
                for (long long kk = 0; kk < K; ++kk) {{ acc += A[i * K + kk] * B[kk * N + j]; mag += fabs(A[i * K + kk] * B[kk * N + j]); }}
                const double ref = epi(acc, bias[j], C[i * N + j], (double)g_alpha);
                const double got = tg_to_float(g_d[i * g_ldd + j]);
                const double tol = {"1e-5" if inst["out_dtype"] == "f32" else ("2e-3" if inst["out_dtype"] == "f16" else "1e-2")} * (fabs(ref) + 1) + 2e-6 * mag + {"1e-3" if tf32 else "0"} * mag;
                const double err = fabs(got - ref);
                if (!(err <= tol)) {{ if (bad < 5) printf("  (%lld,%lld) got %g ref %g\\n", i, j, got, ref); bad++; }}
                max_err = std::max(max_err, err);
            }}
        }}
        printf("  M=%lld N=%lld K=%lld pad=%lld grid=%u: max err %.3g, bad %ld, untouched %ld, clobbered %ld\\n", M, N, K, pad, grid, max_err, bad, untouched, clobbered);
        if (bad || untouched || clobbered) failures++;
        free(g_a); free(g_b); free(g_d); free(g_c); free(g_bias);
    }}
    printf("  ldmatrix bank conflicts %ld, lds32 conflicts %ld, collectives %ld\\n", emu().ldsm_conflicts, emu().lds_conflicts, emu().collectives);
    return failures ? 1 : 0;
}}
"""


def main():
    manifest, specs = sys.argv[1], sys.argv[2]
    filters = sys.argv[3:]
    m = json.load(open(manifest))
    shapes_env = os.environ.get("SHAPES")
    total_fail = 0
    for inst in m["instances"]:
        if filters and not any(f in inst["name"] for f in filters):
            continue
        tm, tn = inst["launch"]["grid"]["tile_m"], inst["launch"]["grid"]["tile_n"]
        tk = inst["params"]["tile"][2]
        if shapes_env:
            shapes = [tuple(int(x) for x in s.split("x")) for s in shapes_env.split(",")]
        else:
            shapes = [(1, 1, 1, 0), (1, 1, 0, 0), (3, 5, 7, 1), (tm, tn, 2 * tk, 0), (tm + 1, tn - 1, 3 * tk + 5, 1),
                      (2 * tm - 3, 2 * tn + 7, 4 * tk - 1, 2), (17, 2 * tn + 1, 13, 0),
                      (9 * tm + 5, tn + 3, tk + 9, 1)]
        kind = {"f16": 1, "bf16": 2}.get(inst["dtype"], 3 if inst["params"].get("tf32") else 0)
        src = source(inst["name"], specs)
        cpp = os.path.join(WORK, inst["name"] + ".cpp")
        exe = os.path.join(WORK, inst["name"])
        with open(cpp, "w") as f:
            f.write('#include "emu_shim.h"\n')
            f.write(src)
            f.write(harness(inst, shapes))
        r = subprocess.run(["g++", "-std=c++17", "-O1", "-w", f"-DEMU_MMA_KIND={kind}", f"-I{HERE}", cpp, "-o", exe],
                           capture_output=True, text=True)
        if r.returncode:
            print(inst["name"], "COMPILE FAILED\n", r.stderr[:3000])
            total_fail += 1
            continue
        for mode in os.environ.get("MODES", "lazy-low,eager-high,lazy-high,eager-low").split(","):
            env = dict(os.environ, EMU_MODE=mode)
            r = subprocess.run([exe], capture_output=True, text=True, env=env)
            status = "ok" if r.returncode == 0 else "FAIL"
            print(f"{inst['name']} [{mode}] {status}")
            if r.returncode or os.environ.get("VERBOSE"):
                print(r.stdout[-4000:], r.stderr[-2000:])
            total_fail += r.returncode != 0
    sys.exit(1 if total_fail else 0)


if __name__ == "__main__":
    main()
