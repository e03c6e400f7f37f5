/*! \file
    \brief The second kernel of a GEMM whose K is split over independent slices: sums the slices'
           fp32 partial outputs in slice order (the same result on every run) and writes bf16.

    On Hopper it is launched with programmatic dependent launch: its launch overlaps the GEMM's tail,
    and it reads the partials only once the GEMM has completed.
*/
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace quantgemm {

/// out[m, n] = bf16(sum over s < splits of partials[(s * M + m) * N + n]), out's rows `ldo` apart.
/// N and ldo multiples of 8, out 16-byte aligned, partials 16-byte aligned; M >= 0, splits >= 1.
cudaError_t split_k_reduce(float const* partials, int splits, int M, int N, __nv_bfloat16* out, int64_t ldo,
                           cudaStream_t stream);

}  // namespace quantgemm
