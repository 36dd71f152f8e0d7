// CPU emulation of the tilegen GEMM kernels: every CUDA thread of a block is a fiber
// (ucontext); warp-collective PTX (ldmatrix, mma.sync, ld.shared in lockstep) and
// __syncthreads are rendezvous points. cp.async copies are queued per thread in commit groups
// and land either at issue (EMU_EAGER=1) or only when cp.async.wait_group forces them (lazy),
// so a missing wait reads stale shared memory and an early overwrite clobbers data that a
// lagging warp has not read yet. The scheduler runs the lowest (or highest) runnable fiber
// first, which lets one warp run as far ahead of the others as the barriers allow.
#pragma once
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>
#include <ucontext.h>

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
using std::max;
using std::min;

struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __ldg(const float* p) { return *p; }
inline float4 __ldg(const float4* p) { return *p; }
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float a, float b) { return a / b; }

// ---- element types (what the prelude defines with PTX) ----
struct tg_f16 { unsigned short bits; };
struct tg_bf16 { unsigned short bits; };
inline float tg_to_float(float x) { return x; }
inline float tg_to_float(tg_bf16 x) { return __uint_as_float(((unsigned)x.bits) << 16); }
inline float tg_to_float(tg_f16 x) {
    unsigned s = (x.bits >> 15) & 1, e = (x.bits >> 10) & 31, m = x.bits & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
inline unsigned short emu_f2bf(float f) {
    unsigned u = __float_as_uint(f);
    if (f != f) return 0x7fc0;
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline unsigned short emu_f2h(float f) {  // round to nearest even via _Float16
    _Float16 h = (_Float16)f;
    unsigned short b;
    memcpy(&b, &h, 2);
    return b;
}
template <typename T> T tg_from_float(float f);
template <> inline float tg_from_float<float>(float f) { return f; }
template <> inline tg_f16 tg_from_float<tg_f16>(float f) { return {emu_f2h(f)}; }
template <> inline tg_bf16 tg_from_float<tg_bf16>(float f) { return {emu_f2bf(f)}; }
inline float tg_relu(float x) { return fmaxf(x, 0.0f); }
inline float tg_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
inline float tg_silu(float x) { return x / (1.0f + expf(-x)); }

// ---- the emulated block ----
struct Dim3 { unsigned x, y, z; };
enum class Op { None, Ldsm, LdsmT, Lds32, Mma, Bar };
struct Copy { unsigned dst; const unsigned char* src; int bytes; };
struct Thread {
    ucontext_t ctx;
    std::vector<char> stack;
    bool done = false, runnable = true;
    std::vector<std::vector<Copy>> groups;  // committed, oldest first
    std::vector<Copy> open;
    // collective inputs / outputs
    Op op = Op::None;
    unsigned addr = 0;
    unsigned a[4], b[2];
    float c[4];
    unsigned r[4];
};
struct Emu {
    unsigned threads = 0, block = 0, grid = 0;
    std::vector<Thread> t;
    ucontext_t main_ctx;
    int cur = -1;
    bool eager = false, high_first = false;
    unsigned smem_bytes = 0;
    std::vector<int> warp_arrived;
    int bar_arrived = 0;
    long ldsm_conflicts = 0, lds_conflicts = 0, collectives = 0;
};
inline Emu& emu() { static Emu e; return e; }
alignas(128) unsigned char tg_smem[256 * 1024];

struct EmuIdx { Dim3 operator()() const; };
inline Dim3 emu_thread_idx() { return Dim3{(unsigned)emu().cur, 0, 0}; }
inline Dim3 emu_block_idx() { return Dim3{emu().block, 0, 0}; }
#define threadIdx (emu_thread_idx())
#define blockIdx (emu_block_idx())
inline int tg_ctaid_x() { return (int)emu().block; }
inline int tg_tid_x() { return emu().cur; }

inline void emu_yield() {
    Emu& e = emu();
    Thread& me = e.t[e.cur];
    swapcontext(&me.ctx, &e.main_ctx);
}

inline void emu_check_smem(unsigned addr, unsigned bytes) {
    if ((unsigned long)addr + bytes > emu().smem_bytes) {
        fprintf(stderr, "shared access [%u, +%u) outside the %u dynamic bytes\n", addr, bytes, emu().smem_bytes);
        abort();
    }
}

inline void emu_land(const Copy& c) {
    emu_check_smem(c.dst, 16);
    if (c.dst % 16) { fprintf(stderr, "cp.async dst misaligned\n"); abort(); }
    if (c.bytes > 0 && ((uintptr_t)c.src % 16)) { fprintf(stderr, "cp.async src misaligned\n"); abort(); }
    if (c.bytes < 0 || c.bytes > 16) { fprintf(stderr, "cp.async src-size %d\n", c.bytes); abort(); }
    if (c.bytes) memcpy(tg_smem + c.dst, c.src, c.bytes);
    memset(tg_smem + c.dst + c.bytes, 0, 16 - c.bytes);
}

inline unsigned tg_smem_u32(const void* p) { return (unsigned)((const unsigned char*)p - tg_smem); }
inline void tg_cp_async16(unsigned dst, const void* src, int bytes) {
    Copy c{dst, (const unsigned char*)src, bytes};
    if (emu().eager) emu_land(c);
    else emu().t[emu().cur].open.push_back(c);
}
inline void tg_cp_async16(unsigned dst, const void* src) { tg_cp_async16(dst, src, 16); }
inline void tg_cp_async_commit() {
    Thread& me = emu().t[emu().cur];
    me.groups.push_back(me.open);
    me.open.clear();
}
template <int N> inline void tg_cp_async_wait() {
    Thread& me = emu().t[emu().cur];
    while ((int)me.groups.size() > N) {
        for (auto& c : me.groups.front()) emu_land(c);
        me.groups.erase(me.groups.begin());
    }
}

// Warp rendezvous: deposit inputs, wait for the 32 lanes, the last one computes.
void emu_warp_compute(int warp, Op op);
inline void emu_warp_op(Op op) {
    Emu& e = emu();
    Thread& me = e.t[e.cur];
    me.op = op;
    const int warp = e.cur / 32;
    if (++e.warp_arrived[warp] == 32) {
        for (int l = 0; l < 32; ++l)
            if (e.t[warp * 32 + l].op != op) { fprintf(stderr, "warp %d diverged at a collective\n", warp); abort(); }
        emu_warp_compute(warp, op);
        e.warp_arrived[warp] = 0;
        for (int l = 0; l < 32; ++l) e.t[warp * 32 + l].runnable = true;
        e.collectives++;
    } else {
        me.runnable = false;
        emu_yield();
    }
    me.op = Op::None;
}
inline void __syncthreads() {
    Emu& e = emu();
    Thread& me = e.t[e.cur];
    me.op = Op::Bar;
    if (++e.bar_arrived == (int)e.threads) {
        e.bar_arrived = 0;
        for (auto& th : e.t) th.runnable = true;
    } else {
        me.runnable = false;
        emu_yield();
    }
    me.op = Op::None;
}

inline void tg_ldsm_x4(unsigned (&r)[4], unsigned addr) {
    Thread& me = emu().t[emu().cur];
    me.addr = addr;
    emu_warp_op(Op::Ldsm);
    for (int j = 0; j < 4; ++j) r[j] = me.r[j];
}
inline void tg_ldsm_x4_trans(unsigned (&r)[4], unsigned addr) {
    Thread& me = emu().t[emu().cur];
    me.addr = addr;
    emu_warp_op(Op::LdsmT);
    for (int j = 0; j < 4; ++j) r[j] = me.r[j];
}
inline unsigned tg_lds32(unsigned addr) {
    Thread& me = emu().t[emu().cur];
    me.addr = addr;
    emu_warp_op(Op::Lds32);
    return me.r[0];
}
// cvt.rna.tf32.f32: round to nearest, ties away from zero, to 10 mantissa bits.
inline unsigned tg_tf32(unsigned x) {
    if ((x & 0x7f800000u) == 0x7f800000u) return x;
    return (x + 0x1000u) & 0xffffe000u;
}

inline void tg_store_pair(float* p, float x, float y) { p[0] = x; p[1] = y; }
inline void tg_store_pair(tg_f16* p, float x, float y) { p[0] = tg_from_float<tg_f16>(x); p[1] = tg_from_float<tg_f16>(y); }
inline void tg_store_pair(tg_bf16* p, float x, float y) { p[0] = tg_from_float<tg_bf16>(x); p[1] = tg_from_float<tg_bf16>(y); }
inline void tg_load_pair(const float* p, float& x, float& y) { x = p[0]; y = p[1]; }
template <typename H> inline void tg_load_pair(const H* p, float& x, float& y) { x = tg_to_float(p[0]); y = tg_to_float(p[1]); }

#ifndef EMU_MMA_KIND
#define EMU_MMA_KIND 0  // 0: none (SIMT), 1: f16, 2: bf16, 3: tf32
#endif
inline void tg_mma(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    Thread& me = emu().t[emu().cur];
    for (int i = 0; i < 4; ++i) me.a[i] = a[i], me.c[i] = c[i];
    me.b[0] = b[0];
    me.b[1] = b[1];
    emu_warp_op(Op::Mma);
    for (int i = 0; i < 4; ++i) c[i] = __uint_as_float(me.r[i]);
}

inline float emu_half(unsigned short bits) {
#if EMU_MMA_KIND == 1
    return tg_to_float(tg_f16{bits});
#else
    return tg_to_float(tg_bf16{bits});
#endif
}

inline void emu_warp_compute(int warp, Op op) {
    Emu& e = emu();
    Thread* L = &e.t[warp * 32];
    auto h16 = [&](unsigned addr) {
        unsigned short v;
        memcpy(&v, tg_smem + addr, 2);
        return (unsigned)v;
    };
    if (op == Op::Ldsm || op == Op::LdsmT) {
        for (int l = 0; l < 32; ++l) {
            emu_check_smem(L[l].addr, 16);
            if (L[l].addr % 16) { fprintf(stderr, "ldmatrix row address misaligned\n"); abort(); }
        }
        // bank conflicts: each 8-row matrix should touch 8 distinct 16-byte bank groups
        for (int j = 0; j < 4; ++j) {
            int seen = 0, conflicts = 0;
            for (int i = 0; i < 8; ++i) {
                int bg = (L[8 * j + i].addr / 16) % 8;
                if (seen & (1 << bg)) conflicts++;
                seen |= 1 << bg;
            }
            e.ldsm_conflicts += conflicts;
        }
        for (int l = 0; l < 32; ++l)
            for (int j = 0; j < 4; ++j) {
                unsigned lo, hi;
                if (op == Op::Ldsm) {
                    unsigned row = L[8 * j + l / 4].addr;
                    lo = h16(row + 2 * (2 * (l % 4)));
                    hi = h16(row + 2 * (2 * (l % 4) + 1));
                } else {
                    lo = h16(L[8 * j + 2 * (l % 4)].addr + 2 * (l / 4));
                    hi = h16(L[8 * j + 2 * (l % 4) + 1].addr + 2 * (l / 4));
                }
                L[l].r[j] = lo | (hi << 16);
            }
    } else if (op == Op::Lds32) {
        int bank_count[32] = {0};
        std::vector<unsigned> distinct;
        for (int l = 0; l < 32; ++l) {
            emu_check_smem(L[l].addr, 4);
            memcpy(&L[l].r[0], tg_smem + L[l].addr, 4);
            if (std::find(distinct.begin(), distinct.end(), L[l].addr) == distinct.end()) {
                distinct.push_back(L[l].addr);
                bank_count[(L[l].addr / 4) % 32]++;
            }
        }
        for (int k = 0; k < 32; ++k) e.lds_conflicts += std::max(0, bank_count[k] - 1);
    } else if (op == Op::Mma) {
        float A[16][16] = {}, B[16][8] = {}, C[16][8];
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, t = l % 4;
#if EMU_MMA_KIND == 3
            auto tf = [](unsigned u) { return __uint_as_float(u & 0xffffe000u); };
            A[g][t] = tf(L[l].a[0]);
            A[g + 8][t] = tf(L[l].a[1]);
            A[g][t + 4] = tf(L[l].a[2]);
            A[g + 8][t + 4] = tf(L[l].a[3]);
            B[t][g] = tf(L[l].b[0]);
            B[t + 4][g] = tf(L[l].b[1]);
#else
            auto lo = [](unsigned u) { return emu_half(u & 0xffff); };
            auto hi = [](unsigned u) { return emu_half(u >> 16); };
            A[g][2 * t] = lo(L[l].a[0]); A[g][2 * t + 1] = hi(L[l].a[0]);
            A[g + 8][2 * t] = lo(L[l].a[1]); A[g + 8][2 * t + 1] = hi(L[l].a[1]);
            A[g][2 * t + 8] = lo(L[l].a[2]); A[g][2 * t + 9] = hi(L[l].a[2]);
            A[g + 8][2 * t + 8] = lo(L[l].a[3]); A[g + 8][2 * t + 9] = hi(L[l].a[3]);
            B[2 * t][g] = lo(L[l].b[0]); B[2 * t + 1][g] = hi(L[l].b[0]);
            B[2 * t + 8][g] = lo(L[l].b[1]); B[2 * t + 9][g] = hi(L[l].b[1]);
#endif
            C[g][2 * t] = L[l].c[0];
            C[g][2 * t + 1] = L[l].c[1];
            C[g + 8][2 * t] = L[l].c[2];
            C[g + 8][2 * t + 1] = L[l].c[3];
        }
        const int K = EMU_MMA_KIND == 3 ? 8 : 16;
        float D[16][8];
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 8; ++j) {
                double s = C[i][j];
                for (int kk = 0; kk < K; ++kk) s += (double)A[i][kk] * B[kk][j];
                D[i][j] = (float)s;
            }
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, t = l % 4;
            L[l].r[0] = __float_as_uint(D[g][2 * t]);
            L[l].r[1] = __float_as_uint(D[g][2 * t + 1]);
            L[l].r[2] = __float_as_uint(D[g + 8][2 * t]);
            L[l].r[3] = __float_as_uint(D[g + 8][2 * t + 1]);
        }
    }
}

// Runs `body` (the kernel call) for every block of the grid.
typedef void (*EmuBody)();
static EmuBody emu_body;
static void emu_entry() {
    emu_body();
    Emu& e = emu();
    e.t[e.cur].done = true;
    e.t[e.cur].runnable = false;
    if (!e.t[e.cur].groups.empty() || !e.t[e.cur].open.empty()) {
        for (auto& g : e.t[e.cur].groups)
            if (!g.empty()) { fprintf(stderr, "thread exits with cp.async copies in flight\n"); abort(); }
    }
    swapcontext(&e.t[e.cur].ctx, &e.main_ctx);
}
inline void emu_launch(unsigned grid, unsigned threads, unsigned smem, EmuBody body) {
    Emu& e = emu();
    const char* mode = getenv("EMU_MODE");
    e.eager = mode && strstr(mode, "eager");
    e.high_first = mode && strstr(mode, "high");
    e.threads = threads;
    e.grid = grid;
    e.smem_bytes = smem;
    emu_body = body;
    for (unsigned blk = 0; blk < grid; ++blk) {
        e.block = blk;
        // poison shared memory: stale data must not pass as zeros
        for (unsigned i = 0; i < sizeof(tg_smem); ++i) tg_smem[i] = (unsigned char)(0x7b + i * 131);
        e.t.assign(threads, Thread());
        e.warp_arrived.assign((threads + 31) / 32, 0);
        e.bar_arrived = 0;
        for (unsigned i = 0; i < threads; ++i) {
            Thread& th = e.t[i];
            th.stack.resize(256 * 1024);
            getcontext(&th.ctx);
            th.ctx.uc_stack.ss_sp = th.stack.data();
            th.ctx.uc_stack.ss_size = th.stack.size();
            th.ctx.uc_link = nullptr;
            makecontext(&th.ctx, emu_entry, 0);
        }
        for (;;) {
            int pick = -1;
            if (e.high_first) {
                for (int i = (int)threads - 1; i >= 0; --i)
                    if (e.t[i].runnable && !e.t[i].done) { pick = i; break; }
            } else {
                for (unsigned i = 0; i < threads; ++i)
                    if (e.t[i].runnable && !e.t[i].done) { pick = (int)i; break; }
            }
            if (pick < 0) break;
            e.cur = pick;
            swapcontext(&e.main_ctx, &e.t[pick].ctx);
        }
        for (unsigned i = 0; i < threads; ++i)
            if (!e.t[i].done) { fprintf(stderr, "deadlock: thread %u of block %u never finished\n", i, blk); abort(); }
        e.cur = -1;
    }
}
