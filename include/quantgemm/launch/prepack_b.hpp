/*! \file
    \brief Prepacking of 4-bit weight codes into the layout of layout/prepacked_b.hpp: on the GPU,
           and on the host (the reference, and its inverse for round trips).

    codes: [N, K] uint8, row-major, one code (0..15) per byte; packed: N * K / 2 bytes.
    N % 128 == 0 and K % 64 == 0: a weight off the blocks is padded with the zero code (8) first
    (quantgemm.prepack_b does it).
*/
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace quantgemm {

/// GPU prepack on `stream`.
cudaError_t prepack_b_u4b8(uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream);

/// Host reference of prepack_b_u4b8.
void prepack_b_u4b8_host(uint8_t const* codes, int N, int K, uint8_t* packed);

/// Inverse of prepack_b_u4b8_host.
void unpack_b_u4b8_host(uint8_t const* packed, int N, int K, uint8_t* codes);

}  // namespace quantgemm
