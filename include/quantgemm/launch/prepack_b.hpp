/*! \file
    \brief Prepacking of 4- and 8-bit weight codes into the layout of layout/prepacked_b.hpp: on the
           GPU, and on the host (the reference, and its inverse for round trips).

    codes: [N, K] uint8, row-major, one code per byte (0..15 for the 4-bit layout of u4b8 and u4,
    0..255 for the 8-bit one of u8b128 and u8); packed: N * K / 2 bytes (4-bit), N * K bytes (8-bit).
    N % 128 == 0 and K % 64 == 0: a weight off the blocks is padded with the zero code first
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

/// The same for 8-bit codes (u8b128 and u8 share the layout).
cudaError_t prepack_b_u8(uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream);
void prepack_b_u8_host(uint8_t const* codes, int N, int K, uint8_t* packed);
void unpack_b_u8_host(uint8_t const* packed, int N, int K, uint8_t* codes);

/// The sm80 kernel's layout (layout/prepacked_b_sm80.hpp) of `bits`-bit codes (4 or 8): N % 64 == 0
/// and K % 64 == 0; the GPU prepack, its host reference, and the inverse of that.
cudaError_t prepack_b_sm80(int bits, uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream);
void prepack_b_sm80_host(int bits, uint8_t const* codes, int N, int K, uint8_t* packed);
void unpack_b_sm80_host(int bits, uint8_t const* packed, int N, int K, uint8_t* codes);

/// The W4A8 kernels' layout (layout/prepacked_b.hpp, PrepackedBLayoutE4m3) of 4-bit codes, for e4m3
/// activations: N % 128 == 0, K % 64 == 0.
cudaError_t prepack_b_e4m3(uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream);
void prepack_b_e4m3_host(uint8_t const* codes, int N, int K, uint8_t* packed);
void unpack_b_e4m3_host(uint8_t const* packed, int N, int K, uint8_t* codes);

}  // namespace quantgemm
