//! cuBLAS and cuBLASLt as the GEMM reference and peer, through cudarc.
//!
//! Our matrices are row-major; cuBLAS is column-major. A row-major D (m×n) is a column-major
//! Dᵀ (n×m), and Dᵀ = Bᵀ·Aᵀ, so every call swaps the operands and the m/n sizes.

use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t,
};
use cudarc::cublaslt::{Activation, CudaBlasLT, Matmul, MatmulConfig};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use super::problem::GEMM_ALPHA;
use super::{gpu_err, Gpu};
use crate::error::Result;
use crate::manifest::InstanceEntry;
use crate::spec::model::{DType, Epilogue, Layout};

fn data_type(d: DType) -> cudaDataType_t {
    match d {
        DType::F32 => cudaDataType_t::CUDA_R_32F,
        DType::F16 => cudaDataType_t::CUDA_R_16F,
        DType::Bf16 => cudaDataType_t::CUDA_R_16BF,
    }
}

fn layout(inst: &InstanceEntry) -> (bool, bool) {
    let l = inst.params.layout.unwrap_or(Layout::Nn);
    (l.a_transposed(), l.b_transposed())
}

/// A cuBLAS handle on the GPU's stream.
pub struct Blas {
    blas: cudarc::cublas::CudaBlas,
    lt: CudaBlasLT,
}

impl Blas {
    pub fn new(gpu: &Gpu) -> Result<Blas> {
        Ok(Blas {
            blas: cudarc::cublas::CudaBlas::new(gpu.stream.clone())
                .map_err(|e| gpu_err("cuBLAS", e))?,
            lt: CudaBlasLT::new(gpu.stream.clone()).map_err(|e| gpu_err("cuBLASLt", e))?,
        })
    }

    /// D = A·B with cublasGemmEx: inputs in the instance's dtype, D in `out` (f32 for a
    /// reference, the instance's output dtype for a peer), f32 accumulation (TF32 when `tf32`);
    /// `ld` is (lda, ldb, ldd) in elements, as the instance takes them (`problem::gemm_ld`).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        gpu: &Gpu,
        inst: &InstanceEntry,
        (m, n, k): (u64, u64, u64),
        (lda, ldb, ldd): (u64, u64, u64),
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        d: &mut CudaSlice<u8>,
        out: DType,
        tf32: bool,
    ) -> Result<()> {
        let (ta, tb) = layout(inst);
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let compute = if tf32 {
            cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let (pa, _ra) = a.device_ptr(&gpu.stream);
        let (pb, _rb) = b.device_ptr(&gpu.stream);
        let (pd, _rd) = d.device_ptr_mut(&gpu.stream);
        // SAFETY: buffers were sized for this problem and these leading dimensions; dims fit
        // i32 for every shape we run.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                op(tb),
                op(ta),
                n as i32,
                m as i32,
                k as i32,
                (&alpha) as *const f32 as *const _,
                pb as *const _,
                data_type(inst.dtype),
                ldb as i32,
                pa as *const _,
                data_type(inst.dtype),
                lda as i32,
                (&beta) as *const f32 as *const _,
                pd as *mut _,
                data_type(out),
                ldd as i32,
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| gpu_err("cublasGemmEx", e))
    }

    /// cuBLASLt with its fused bias epilogue (bias alone, bias+GELU(tanh) or bias+ReLU), the
    /// peer of our fused epilogues; for the residual chain (scale, bias, residual) its
    /// alpha·A·B + beta·C with beta 1 and the bias epilogue, which reads C from `d` and
    /// writes D over it (a residual stream updated in place). Output in the input dtype.
    /// None when the instance's epilogue has no cuBLASLt equivalent. `ld` as for [`Blas::gemm`].
    #[allow(clippy::too_many_arguments)]
    pub fn fused_epilogue(
        &self,
        inst: &InstanceEntry,
        (m, n, k): (u64, u64, u64),
        (lda, ldb, ldd): (u64, u64, u64),
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        bias: &CudaSlice<u8>,
        d: &mut CudaSlice<u8>,
    ) -> Option<Result<()>> {
        let (act, alpha, beta) = match inst.epilogue.as_slice() {
            [Epilogue::Bias] => (None, 1.0, 0.0),
            [Epilogue::Bias, Epilogue::Gelu] => (Some(Activation::Gelu), 1.0, 0.0),
            [Epilogue::Bias, Epilogue::Relu] => (Some(Activation::Relu), 1.0, 0.0),
            [Epilogue::Scale, Epilogue::Bias, Epilogue::Residual] => (None, GEMM_ALPHA, 1.0),
            _ => return None,
        };
        // cuBLASLt's f32 matmul may run on TF32 tensor cores: an f32 GEMM's peer is SGEMM.
        if inst.out_dtype != inst.dtype || inst.dtype == DType::F32 {
            return None;
        }
        let (ta, tb) = layout(inst);
        let cfg = MatmulConfig {
            transa: tb,
            transb: ta,
            transc: false,
            m: n,
            n: m,
            k,
            alpha,
            lda: ldb as i64,
            ldb: lda as i64,
            beta,
            ldc: ldd as i64,
            stride_a: None,
            stride_b: None,
            stride_c: None,
            stride_bias: None,
            batch_size: None,
        };
        macro_rules! run {
            ($t:ty) => {{
                // SAFETY: the byte buffers hold whole elements of $t (sized by buffer_len).
                unsafe {
                    let av = a.transmute::<$t>(a.len() / std::mem::size_of::<$t>())?;
                    let bv = b.transmute::<$t>(b.len() / std::mem::size_of::<$t>())?;
                    let biasv = bias.transmute::<$t>(bias.len() / std::mem::size_of::<$t>())?;
                    let dlen = d.len() / std::mem::size_of::<$t>();
                    let mut dv = d.transmute_mut::<$t>(dlen)?;
                    Some(
                        self.lt
                            .matmul(cfg, &bv, &av, &mut dv, Some(&biasv), act.as_ref())
                            .map_err(|e| gpu_err("cublasLtMatmul", e)),
                    )
                }
            }};
        }
        match inst.dtype {
            DType::Bf16 => run!(half::bf16),
            DType::F16 => run!(half::f16),
            DType::F32 => None,
        }
    }
}
