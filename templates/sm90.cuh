#if 0
{% raw %}
#endif
// (Tera: raw from here; the first and last three lines are markers, see attention.cu.)
// sm_90 helpers shared by the Hopper kernels: shared-memory addresses, mbarriers, proxy fences,
// bulk-async groups, named barriers, wgmma fences and groups, tensor maps and shared-memory
// matrix descriptors.
__device__ __forceinline__ unsigned tg_smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void tg_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// One poll of a barrier's phase of this parity, 1 once complete; SEM as in the PTX (empty:
// acquire at CTA scope).
#define TG_MBAR_TRY_WAIT(SEM) \
    "{\n.reg .pred P;\nmbarrier.try_wait.parity" SEM ".shared::cta.b64 P, [%1], %2;\nselp.u32 %0, 1, 0, P;\n}\n"
// Spins until the barrier's phase with this parity has completed. CLUSTER: also acquires what
// other blocks of the cluster released to the barrier (tg_mbar_arrive_cluster).
template <bool CLUSTER = false> __device__ __forceinline__ void tg_mbar_wait(unsigned bar, unsigned parity) {
    unsigned ok;
    do {
        if constexpr (CLUSTER) {
            asm volatile(TG_MBAR_TRY_WAIT(".acquire.cluster") : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
        } else {
            asm volatile(TG_MBAR_TRY_WAIT("") : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
        }
    } while (!ok);
}
__device__ __forceinline__ void tg_mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// ---- clusters: another block's shared memory (distributed shared memory) ----
__device__ __forceinline__ unsigned tg_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned tg_cluster_id() {
    unsigned r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned tg_cluster_count() {
    unsigned r;
    asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
    return r;
}
// Every thread of every block of the cluster arrives and waits; orders what came before.
// (Not `.aligned`: the threads of a warp may reach it on different paths.)
__device__ __forceinline__ void tg_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// The address in block `rank`'s shared memory of what lies at `addr` in this block's.
__device__ __forceinline__ unsigned tg_cluster_addr(unsigned addr, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
// Arrives on a barrier of any block of the cluster (an address from tg_cluster_addr),
// releasing this thread's earlier reads and writes to whoever waits on it (tg_mbar_wait<true>).
__device__ __forceinline__ void tg_mbar_arrive_cluster(unsigned cluster_bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}
// Arrives on a barrier of another block of the cluster (an address from tg_cluster_addr) with
// release at CTA scope only: for "this stage has been read" signals, whose reads (wgmma's) are
// complete, so there is nothing to publish to that block. A release at cluster scope would
// wait for this thread's memory operations to reach the cluster on every call: with one per k
// block it made multicast GEMMs 2-4x slower on the H200 (bench/hopper-gemm/NOTES.md).
__device__ __forceinline__ void tg_mbar_arrive_remote(unsigned cluster_bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}
// Arrives on `bar` and adds `bytes` to the transactions its phase waits for (TMA loads
// complete them).
__device__ __forceinline__ void tg_mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Generic-proxy writes to shared memory become visible to the async proxy (TMA, wgmma).
__device__ __forceinline__ void tg_fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Bulk-async groups (TMA stores, bulk copies out of shared memory): close this thread's group;
// wait until its committed ones have read their shared memory (it may be overwritten), or
// until they are complete.
__device__ __forceinline__ void tg_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void tg_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void tg_bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void tg_named_barrier(unsigned id, unsigned threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives on named barrier `id` without waiting (the `threads` counted include those that wait).
__device__ __forceinline__ void tg_bar_arrive(unsigned id, unsigned threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void tg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tg_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// tg_wgmma_wait<N>, kept after the code that computes `a` and `b`. ptxas moves a wait to the top
// of its basic block when nothing before it there depends on it, so code meant to run beside the
// wgmma would run after it. A branch on the two values ends the block after them; its body only
// sleeps a nanosecond, and for results of float arithmetic never runs (no such value has every
// bit set: the GPU's NaN has a clear sign bit).
template <int N> __device__ __forceinline__ void tg_wgmma_wait_after(float a, float b) {
    if ((__float_as_uint(a) & __float_as_uint(b)) == 0xffffffffu) __nanosleep(1);
    tg_wgmma_wait<N>();
}
// Keeps the compiler from moving reads or writes of `r` across an async wgmma.
template <int N> __device__ __forceinline__ void tg_reg_fence(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// Zeroes wgmma accumulators outside a wgmma (asm, so that the compiler keeps them the same
// registers rather than folding the zeros into their uses).
template <int N> __device__ __forceinline__ void tg_reg_zero(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("mov.b32 %0, 0;" : "=f"(r[i]));
}

// CUtensorMap as CUDA 13's cuda.h declares it (128-byte aligned), without the header.
struct alignas(128) TgTensorMap { unsigned long long v[16]; };
__device__ __forceinline__ void tg_prefetch_map(const TgTensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Shared-memory matrix descriptor: start, leading and stride byte offsets (each >> 4), the
// swizzle mode in bits 62-63 (1: 128-byte, the default; 2: 64-byte).
template <unsigned long long SWIZZLE_MODE = 1>
__device__ __forceinline__ unsigned long long tg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (SWIZZLE_MODE << 62);
}
#if 0
{% endraw %}
#endif
