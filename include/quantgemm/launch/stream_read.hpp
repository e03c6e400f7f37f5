/*! \file
    \brief A read-only memory stream: every byte of a buffer read once with 16-byte loads, nothing
           written but one word per block. Its bandwidth is the floor that the GEMMs are measured
           against (a copy would count writes too).
*/
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace quantgemm {

/// Reads `bytes` (a multiple of 16) at `src`; writes one word per block to `sink` (>= 4 * 1024 bytes).
cudaError_t stream_read(void const* src, int64_t bytes, uint32_t* sink, cudaStream_t stream);

}  // namespace quantgemm
