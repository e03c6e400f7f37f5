/*! \file
    \brief Host launcher arguments of the block-scaled FP8 GEMM (DeepSeek-V3's recipe): raw pointers,
           sizes, strides and a stream in, a status out; nothing throws.

             out[m, n] = sum over 128-wide k blocks kb of
                           a_scales[m, kb] * b_scales[n / 128, kb] * sum_{k in kb} a[m, k] * b[n, k]

    a: [M, K] e4m3, row stride lda; a_scales: fp32 [M, ceil(K / 128)], row-major, contiguous (one
    scale per token per 128 of K). b: the [N, K] e4m3 weight, row stride ldb; b_scales: fp32
    [ceil(N / 128), ceil(K / 128)], row-major, contiguous (one scale per 128 x 128 block). out: [M, N]
    bf16, row stride ldo. Each 128-wide k block accumulates in the tensor core and is promoted into
    fp32 with its two scales. K, lda and ldb multiples of 16, N and ldo multiples of 8; 16-byte
    aligned operand and output bases, 4-byte aligned scales. M, N and K need not be multiples of
    the tiles or of 128. Schedules that split K (stream-K) need `workspace`, as ScaledMmArgs.
*/
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "quantgemm/launch/scaled_mm.hpp"
#include "quantgemm/launch/status.hpp"

namespace quantgemm {

/// k (and weight rows) per scale block.
constexpr int kBlockScaleSize = 128;

struct BlockScaledMmArgs : Gemm8BitArgs {
  float const* a_scales = nullptr;  ///< fp32 [M, ceil(K / 128)], row-major
  float const* b_scales = nullptr;  ///< fp32 [ceil(N / 128), ceil(K / 128)], row-major
};

/// Launches one compiled schedule.
using BlockScaledMmLaunchFn = LaunchResult (*)(BlockScaledMmArgs const&);

/// Structural checks shared by every schedule.
inline bool block_scaled_mm_args_valid(BlockScaledMmArgs const& x) {
  auto aligned4 = [](void const* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
  return tma_8bit_operands_valid(x) &&
         (x.M == 0 || (x.a_scales && x.b_scales && aligned4(x.a_scales) && aligned4(x.b_scales)));
}

}  // namespace quantgemm
