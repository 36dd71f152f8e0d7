#if 0
{% raw %}
#endif
// (Tera: raw from here; the first and last three lines are markers, see attention.cu.)
// What the portable and the Hopper attention kernels share: the parameter list of the
// standalone build, copies, fragments, conversions and varlen offsets. Needs T and BF16.
#ifdef TG_STANDALONE
// The kernel's parameters; tilegen's are the op's signature (integers as long long, the
// cu_seqlens as const void*), which the kernel reads the same way. A kernel with tensor maps
// defines TG_MAP_PARAMS, which come first.
#ifndef TG_MAP_PARAMS
#define TG_MAP_PARAMS
#endif
#define TG_PARAMS                                                                                      \
    TG_MAP_PARAMS const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,       \
        float* __restrict__ lse, const int* __restrict__ cu_seqlens_q, const int* __restrict__ cu_seqlens_kv, \
        int batch, int heads_q, int heads_kv, int seq_q, int seq_kv, long long q_bs, long long q_ss, long long q_hs,  \
        long long k_bs, long long k_ss, long long k_hs, long long v_bs, long long v_ss, long long v_hs,    \
        long long o_bs, long long o_ss, long long o_hs, long long lse_bs, long long lse_hs, float scale
#endif

// 16-byte global -> shared copy bypassing L1; `src_bytes` 0 zero-fills and reads nothing.
__device__ __forceinline__ void tg_cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void tg_ldsm_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0, %1, %2, %3 }, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// Two floats as one 32-bit pair of T, `lo` in the low half (the lower column of a fragment).
__device__ __forceinline__ unsigned tg_pack2(float lo, float hi) {
    unsigned u;
    if constexpr (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(u) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(u) : "f"(hi), "f"(lo));
    return u;
}
__device__ __forceinline__ float tg_exp2(float x) {  // ex2.approx.ftz: -inf gives 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Rows [start, start + len) of sequence b of a packed batch whose offsets are `cu`, clamped
// into [0, cap) with len <= seq (cap: the batch * seq rows the launcher checked).
__device__ __forceinline__ void tg_clamp_rows(const int* cu, int b, long long cap, long long seq, long long& start,
                                              int& len) {
    const long long s0 = min(max((long long)cu[b], 0LL), cap);
    const long long s1 = min(max((long long)cu[b + 1], s0), min(cap, s0 + seq));
    start = s0;
    len = (int)(s1 - s0);
}
__device__ __forceinline__ void tg_clamp_sequence(const int* cu, int b, long long batch, long long seq,
                                                  long long& start, int& len) {
    tg_clamp_rows(cu, b, batch * seq, seq, start, len);
}

// What one block owns: its (batch, query head) and K/V head, its sequence's rows (varlen offsets
// applied), its query tile (causal grids run theirs in reverse, longest rows first) and the key
// tiles its rows see.
struct tg_attn_block {
    int b, h, hk;                  // batch entry, query head, K/V head (GQA: heads in groups)
    long long q_start, kv_start;   // first row of the sequence in a packed batch (else 0)
    int sq, skv;                   // the sequence's lengths
    int m0, q_rows;                // first query row of the tile, rows it has
    int off;                       // causal: query row r sees keys 0 ..= r + off (bottom-right)
    int n_tiles, n_full;           // key tiles seen; tiles [0, n_full) need no mask
};

// False when the block's query tile lies past its sequence (the whole block leaves).
// The offsets are device data the launcher may not have seen: each sequence is clamped to at
// most seq rows inside the batch * seq rows the launcher checked the tensors hold, so bad
// offsets give wrong rows, never accesses outside the buffers (valid ones are unchanged).
template <int BM_, int BN_, bool CAUSAL_>
__device__ __forceinline__ bool tg_attn_block_of(const void* cu_seqlens_q, const void* cu_seqlens_kv, long long batch,
                                                 long long heads_q, long long heads_kv, long long seq_q, long long seq_kv,
                                                 tg_attn_block& k) {
    k.b = (int)blockIdx.z;
    k.h = (int)blockIdx.y;
    k.hk = k.h / ((int)heads_q / (int)heads_kv);
    const int* const cu_q = static_cast<const int*>(cu_seqlens_q);
    const int* const cu_kv = static_cast<const int*>(cu_seqlens_kv);
    k.q_start = 0;
    k.kv_start = 0;
    k.sq = (int)seq_q;
    k.skv = (int)seq_kv;
    if (cu_q != nullptr) tg_clamp_sequence(cu_q, k.b, batch, seq_q, k.q_start, k.sq);
    if (cu_kv != nullptr) tg_clamp_sequence(cu_kv, k.b, batch, seq_kv, k.kv_start, k.skv);
    const int mt = CAUSAL_ ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    k.m0 = mt * BM_;
    if (k.m0 >= k.sq) return false;
    k.off = k.skv - k.sq;
    k.q_rows = min(BM_, k.sq - k.m0);
    const int kv_end = CAUSAL_ ? min(k.skv, k.m0 + k.q_rows + k.off) : k.skv;
    k.n_tiles = kv_end > 0 ? (kv_end + BN_ - 1) / BN_ : 0;
    k.n_full = CAUSAL_ ? min(k.skv / BN_, max(0, k.m0 + k.off + 1) / BN_) : k.skv / BN_;
    return true;
}
#if 0
{% endraw %}
#endif
