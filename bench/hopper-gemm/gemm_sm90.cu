// bf16 GEMM for sm_90a (H100/H200), NVRTC-only: no #include, inline PTX for
// wgmma, TMA (cp.async.bulk.tensor), mbarrier, fences, setmaxnreg, clusters.
//
//   D[M,N] (bf16, row-major) = A[M,K] (bf16, row-major) * B (bf16)
//   BT=0 ("nn"): B is [K,N] row-major  -> wgmma B operand MN-major (trans-b = 1)
//   BT=1 ("nt"): B is [N,K] row-major  -> wgmma B operand K-major  (trans-b = 0)
//   f32 accumulation, bf16 output.
//
// Design: 1 producer warpgroup (one thread issues TMA) + NCONS consumer warpgroups,
// each consumer owns WM = BM/NCONS rows x BN cols of the tile (m64nBNk16 wgmma).
// STAGES-deep smem ring guarded by full/empty mbarriers (parity waits).
// Persistent grid (gridDim.x CTAs loop over tiles) with grouped (L2-aware) order.
// CLUSTER_M=2: two CTAs on neighbouring M tiles share the B tile; each loads half of it
// and multicasts to both.  Epilogue: EPI=1 regs -> swizzled smem -> TMA store (OOB clipped),
// EPI=0 direct masked st.global.
// Ragged M/N/K: TMA zero-fills out-of-bounds loads; TMA store clips. TMA needs N%8==0
// and K%8==0 (16-byte global strides) and 16-byte aligned base pointers.
//
// Kernel params: TmaDesc A, B, D (128-byte blobs from cuTensorMapEncodeTiled), D ptr, M, N, K.
//   A map: dims {K, M}, box {64, BM}, 128B swizzle
//   B map: BT=0 dims {N, K}, BT=1 dims {K, N}; box {64, 64}, 128B swizzle
//   D map: dims {N, M}, box {64, WM}, 128B swizzle

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

struct alignas(128) TmaDesc { u64 opaque[16]; };

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef NCONS
#define NCONS 2
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef BT
#define BT 0
#endif
#ifndef EPI
#define EPI 1
#endif
#ifndef GROUP_M
#define GROUP_M 16
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 1
#endif
#ifndef PROD_REGS
#define PROD_REGS 40
#endif
#ifndef CONS_REGS
#define CONS_REGS 232
#endif
#ifndef MC_SPLIT  // cluster: 1 = each CTA loads 1/CLUSTER_M of B and multicasts; 0 = rank 0 loads all of B
#define MC_SPLIT 1
#endif
#ifndef SETMAXNREG
#define SETMAXNREG (NCONS >= 2)
#endif

#define BK 64
#define WM (BM / NCONS)
#define MT (WM / 64)
#define NACC (BN / 2)
#define NTHREADS (128 * (NCONS + 1))
#define A_STAGE_BYTES (BM * BK * 2)
#define B_STAGE_BYTES (BN * BK * 2)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#if EPI == 1
#define C_BYTES (BM * BN * 2)
#elif EPI == 2
#define C_BYTES (BM * 128 * 2)
#else
#define C_BYTES 0
#endif
#ifndef WAIT0  // 1: wait for each k-block's wgmma before releasing its stage (no wgmma overlap across k-blocks)
#define WAIT0 0
#endif
#define B_CHUNKS (BN / 64)
#if MC_SPLIT
#define B_CHUNKS_PER_CTA (B_CHUNKS / CLUSTER_M)
#else
#define B_CHUNKS_PER_CTA B_CHUNKS
#endif

static_assert(WM % 64 == 0, "each consumer needs a multiple of 64 rows");
static_assert(BN % 64 == 0 && BN <= 256, "BN");
static_assert(B_CHUNKS % CLUSTER_M == 0, "B chunks split over the cluster");

#define DEV __device__ __forceinline__

DEV u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// ---------------------------------------------------------------- mbarrier
DEV void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
DEV void mbar_wait(u32 bar, u32 parity) {
  u32 ok;
  do {
    asm volatile(
        "{\n.reg .pred P;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\n"
        "selp.u32 %0, 1, 0, P;\n}\n"
        : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  } while (!ok);
}
DEV void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
DEV void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// NOTE: plain (release.cta) arrive. ".release.cluster" makes ptxas emit MEMBAR.ALL.GPU + ERRBAR before
// every arrive, which cost ~30% of throughput here; the consumer has no generic writes to publish,
// its wgmma smem reads are already complete (wgmma.wait_group) when it signals.
DEV void mbar_arrive_cluster(u32 bar, u32 cta) {
  asm volatile(
      "{\n.reg .b32 ra;\n"
      "mapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(cta) : "memory");
}

// ---------------------------------------------------------------- TMA
DEV void tma_load_2d(u32 dst, const TmaDesc* map, u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
DEV void tma_load_2d_mc(u32 dst, const TmaDesc* map, u32 bar, int c0, int c1, u16 mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}
DEV void tma_store_2d(const TmaDesc* map, u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"((u64)map),
               "r"(src), "r"(c0), "r"(c1) : "memory");
}
DEV void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
DEV void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
DEV void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
DEV void prefetch_map(const TmaDesc* map) { asm volatile("prefetch.tensormap [%0];" ::"l"((u64)map) : "memory"); }

// ---------------------------------------------------------------- misc sync
DEV void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
DEV void named_bar(u32 id, u32 n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
DEV void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
DEV u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// ---------------------------------------------------------------- wgmma
DEV void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
DEV void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
DEV void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
DEV void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// smem matrix descriptor: start>>4 [0,14), LBO>>4 [16,30), SBO>>4 [32,46), swizzle 128B = 1<<62
DEV u64 make_desc(u32 addr, u32 lbo, u32 sbo) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
}

// BEGIN GENERATED WGMMA
template <int TB>
DEV void wgmma_n64(float* d, u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TB));
}
template <int TB>
DEV void wgmma_n128(float* d, u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TB));
}
template <int TB>
DEV void wgmma_n192(float* d, u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, %99;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TB));
}
template <int TB>
DEV void wgmma_n256(float* d, u64 da, u64 db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, %131;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TB));
}
// END GENERATED WGMMA

template <int TB>
DEV void wgmma_bn(float* d, u64 da, u64 db, int scale_d) {
#if BN == 256
  wgmma_n256<TB>(d, da, db, scale_d);
#elif BN == 192
  wgmma_n192<TB>(d, da, db, scale_d);
#elif BN == 128
  wgmma_n128<TB>(d, da, db, scale_d);
#else
  wgmma_n64<TB>(d, da, db, scale_d);
#endif
}

DEV u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// grouped tile order: GROUP_M consecutive (cluster-)row tiles sweep the N tiles together
DEV void tile_coords(int t, int num_m, int num_n, int& tm, int& tn) {
  int per_group = GROUP_M * num_n;
  int g = t / per_group;
  int first = g * GROUP_M;
  int gs = num_m - first < GROUP_M ? num_m - first : GROUP_M;
  int r = t - g * per_group;
  tm = first + r % gs;
  tn = r / gs;
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
#if CLUSTER_M > 1
    __cluster_dims__(CLUSTER_M, 1, 1)
#endif
        gemm_bf16_sm90(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
                       const __grid_constant__ TmaDesc tmD, u16* __restrict__ Dptr, int M, int N, int K) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 sbase = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const u32 sA = sbase;
  const u32 sB = sA + STAGES * A_STAGE_BYTES;
  const u32 sC = sB + STAGES * B_STAGE_BYTES;
  const u32 sBar = sC + C_BYTES;
#define FULL(s) (sBar + 8u * (u32)(s))
#define EMPTY(s) (sBar + 8u * (u32)(STAGES + (s)))

  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
#if CLUSTER_M > 1
  const u32 crank = cluster_rank();
  const int cid = blockIdx.x / CLUSTER_M;
  const int ncl = gridDim.x / CLUSTER_M;
#else
  const u32 crank = 0;
  const int cid = blockIdx.x;
  const int ncl = gridDim.x;
#endif

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(FULL(s), 1);
      mbar_init(EMPTY(s), NCONS * CLUSTER_M);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    prefetch_map(&tmA);
    prefetch_map(&tmB);
    prefetch_map(&tmD);
  }
#if CLUSTER_M > 1
  cluster_sync();
#else
  __syncthreads();
#endif

  const int num_m = (M + BM - 1) / BM;
  const int num_n = (N + BN - 1) / BN;
  const int num_mc = (num_m + CLUSTER_M - 1) / CLUSTER_M;  // cluster rows
  const int total = num_mc * num_n;
  const int nk = (K + BK - 1) / BK;

  if (wg == 0) {
    // ------------------------------------------------------------ producer
#if SETMAXNREG
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PROD_REGS));
#endif
    if (tid == 0) {
      int s = 0;
      u32 ph = 0;
      for (int t = cid; t < total; t += ncl) {
        int tmc, tn;
        tile_coords(t, num_mc, num_n, tmc, tn);
        const int tm = tmc * CLUSTER_M + (int)crank;
        for (int kb = 0; kb < nk; ++kb) {
          mbar_wait(EMPTY(s), ph ^ 1u);
          mbar_expect_tx(FULL(s), STAGE_BYTES);
          tma_load_2d(sA + s * A_STAGE_BYTES, &tmA, FULL(s), kb * BK, tm * BM);
#pragma unroll
          for (int c = 0; c < B_CHUNKS_PER_CTA; ++c) {
#if MC_SPLIT
            const int cc = (int)crank * B_CHUNKS_PER_CTA + c;
#else
            const int cc = c;
            if (CLUSTER_M > 1 && crank != 0) break;
#endif
            const u32 dst = sB + s * B_STAGE_BYTES + cc * (64 * 128);
#if BT
            const int c0 = kb * BK, c1 = tn * BN + 64 * cc;
#else
            const int c0 = tn * BN + 64 * cc, c1 = kb * BK;
#endif
#if CLUSTER_M > 1
            tma_load_2d_mc(dst, &tmB, FULL(s), c0, c1, (u16)((1u << CLUSTER_M) - 1u));
#else
            tma_load_2d(dst, &tmB, FULL(s), c0, c1);
#endif
          }
          if (++s == STAGES) { s = 0; ph ^= 1u; }
        }
      }
    }
  } else {
    // ------------------------------------------------------------ consumers
#if SETMAXNREG
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONS_REGS));
#endif
    const int cw = wg - 1;
    const int warp = tid / 32, lane = tid % 32;
    float acc[MT][NACC];
    int s = 0;
    u32 ph = 0;
    for (int t = cid; t < total; t += ncl) {
      int tmc, tn;
      tile_coords(t, num_mc, num_n, tmc, tn);
      const int tm = tmc * CLUSTER_M + (int)crank;
      int prev = 0;
      for (int kb = 0; kb < nk; ++kb) {
        mbar_wait(FULL(s), ph);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < NACC; ++i) reg_fence(acc[mt][i]);
        wgmma_fence();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk) {
            const u64 da = make_desc(sA + s * A_STAGE_BYTES + (cw * WM + mt * 64) * 128 + kk * 32, 16, 1024);
#if BT
            const u64 db = make_desc(sB + s * B_STAGE_BYTES + kk * 32, 16, 1024);
            wgmma_bn<0>(acc[mt], da, db, (kb | kk) != 0);
#else
            const u64 db = make_desc(sB + s * B_STAGE_BYTES + kk * 2048, 64 * 128, 1024);
            wgmma_bn<1>(acc[mt], da, db, (kb | kk) != 0);
#endif
          }
        }
        wgmma_commit();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < NACC; ++i) reg_fence(acc[mt][i]);
#if WAIT0
        wgmma_wait<0>();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < NACC; ++i) reg_fence(acc[mt][i]);
#if CLUSTER_M > 1
        if (tid < CLUSTER_M) mbar_arrive_cluster(EMPTY(s), (u32)tid);
#else
        if (tid == 0) mbar_arrive(EMPTY(s));
#endif
#else
        if (kb > 0) {
          wgmma_wait<1>();
#if CLUSTER_M > 1
          if (tid < CLUSTER_M) mbar_arrive_cluster(EMPTY(prev), (u32)tid);
#else
          if (tid == 0) mbar_arrive(EMPTY(prev));
#endif
        }
#endif
        prev = s;
        if (++s == STAGES) { s = 0; ph ^= 1u; }
      }
#if !WAIT0
      wgmma_wait<0>();
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < NACC; ++i) reg_fence(acc[mt][i]);
#if CLUSTER_M > 1
      if (tid < CLUSTER_M) mbar_arrive_cluster(EMPTY(prev), (u32)tid);
#else
      if (tid == 0) mbar_arrive(EMPTY(prev));
#endif
#endif

      // -------------------------------------------------------- epilogue
      const int row0 = tm * BM + cw * WM;
#if EPI == 2
      // half-size staging: two 64-col chunks at a time (frees smem for a 4th stage)
      const u32 myC = sC + cw * (WM * 128 * 2);
#pragma unroll
      for (int h = 0; h < B_CHUNKS / 2; ++h) {
        if (tid == 0) bulk_wait_read0();
        named_bar(1 + cw, 128);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int r = mt * 64 + warp * 16 + lane / 4;
#pragma unroll
          for (int jj = 0; jj < 16; ++jj) {
            const int j = h * 16 + jj;
            const u32 a = myC + (jj / 8) * (WM * 128) + r * 128 + ((((u32)jj % 8u) ^ ((u32)r & 7u)) << 4) + (lane % 4) * 4;
            const u32 v0 = pack_bf16x2(acc[mt][j * 4 + 0], acc[mt][j * 4 + 1]);
            const u32 v1 = pack_bf16x2(acc[mt][j * 4 + 2], acc[mt][j * 4 + 3]);
            asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(v0) : "memory");
            asm volatile("st.shared.b32 [%0], %1;" ::"r"(a + 8 * 128), "r"(v1) : "memory");
          }
        }
        fence_proxy_async_smem();
        named_bar(1 + cw, 128);
        if (tid == 0 && row0 < M) {
#pragma unroll
          for (int c = 0; c < 2; ++c)
            if (tn * BN + 64 * (2 * h + c) < N) tma_store_2d(&tmD, myC + c * (WM * 128), tn * BN + 64 * (2 * h + c), row0);
        }
        if (tid == 0) bulk_commit();
      }
#elif EPI == 1
      const u32 myC = sC + cw * (WM * BN * 2);
      if (tid == 0) bulk_wait_read0();  // previous tile's TMA store has read smem
      named_bar(1 + cw, 128);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int r = mt * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const u32 a = myC + (j / 8) * (WM * 128) + r * 128 + ((((u32)j % 8u) ^ ((u32)r & 7u)) << 4) + (lane % 4) * 4;
          const u32 v0 = pack_bf16x2(acc[mt][j * 4 + 0], acc[mt][j * 4 + 1]);
          const u32 v1 = pack_bf16x2(acc[mt][j * 4 + 2], acc[mt][j * 4 + 3]);
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(v0) : "memory");
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(a + 8 * 128), "r"(v1) : "memory");
        }
      }
      fence_proxy_async_smem();
      named_bar(1 + cw, 128);
      if (tid == 0 && row0 < M) {
#pragma unroll
        for (int c = 0; c < B_CHUNKS; ++c)
          if (tn * BN + 64 * c < N) tma_store_2d(&tmD, myC + c * (WM * 128), tn * BN + 64 * c, row0);
        bulk_commit();
      }
#else
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int r = row0 + mt * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int c = tn * BN + j * 8 + (lane % 4) * 2;
          if (c < N) {
            if (r < M) *(u32*)(Dptr + (size_t)r * N + c) = pack_bf16x2(acc[mt][j * 4 + 0], acc[mt][j * 4 + 1]);
            if (r + 8 < M) *(u32*)(Dptr + (size_t)(r + 8) * N + c) = pack_bf16x2(acc[mt][j * 4 + 2], acc[mt][j * 4 + 3]);
          }
        }
      }
#endif
    }
#if EPI
    if (tid == 0) bulk_wait0();
#endif
  }
#if CLUSTER_M > 1
  cluster_sync();  // no CTA leaves while its partner may still signal its barriers
#endif
}
