/*! \file
    \brief Per-token dynamic FP8 quantization of a 16-bit activation, one pass, on the GPU:

             scale[m] = max(max_k |x[m, k]|, 1e-12) / 448,   q[m, k] = e4m3(x[m, k] / scale[m])

    (round to nearest even, saturating at +-448: the same bits as quantgemm.quantize_fp8's torch
    expression). One block a row, held in registers between the max and the conversion (rows up to
    32768 values; longer ones are read twice). The kernel lets a GEMM launched after it with
    programmatic dependent launch (quantgemm's mixed-input kernels) start streaming its weight
    while it runs.
*/
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace quantgemm {

/// x: [M, K] bf16 (fp16: x_is_fp16), row stride ldx elements; q: [M, K] e4m3 bytes, row stride ldq;
/// scales: [M] fp32. K, ldx and ldq multiples of 8, x 16-byte and q 8-byte aligned.
cudaError_t quantize_fp8_per_token(void const* x, bool x_is_fp16, int64_t ldx, int M, int K, uint8_t* q, int64_t ldq,
                                   float* scales, cudaStream_t stream);

}  // namespace quantgemm
