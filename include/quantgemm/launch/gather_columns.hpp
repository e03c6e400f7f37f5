/*! \file
    \brief GPTQ act-order's activation gather on the GPU: out[m, j] = x[m, perm[j]], the activation's
           columns in the order of an act-order weight's K (mixed_input.prepack_b(..., perm=...)).

    Elements of 2 bytes (bf16, fp16) or 1 (e4m3). On Hopper the kernel is launched with programmatic
    dependent launch and lets a GEMM launched after it so (quantgemm's mixed-input kernels) start
    streaming its weight while it runs, where a framework's gather would hold the GEMM's launch until
    it ends; it reads x only once the kernel before it has completed.
*/
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace quantgemm {

/// x: [M, K] of element_bytes (1 or 2) bytes, row stride ldx elements; perm: [K] int64, 16-byte
/// aligned, each in 0..K-1; out: [M, K], row stride ldo, rows 8-element aligned. K a multiple of 8.
cudaError_t gather_columns(void const* x, int element_bytes, int64_t ldx, int M, int K, int64_t const* perm,
                           void* out, int64_t ldo, cudaStream_t stream);

}  // namespace quantgemm
