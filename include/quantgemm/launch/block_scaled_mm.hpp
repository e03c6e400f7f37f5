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
    the tiles or of 128. Schedules that split K need `workspace`, as ScaledMmArgs: stream-K
    schedules CUTLASS's, split-K ones (names ending in _splitk) the slices' fp32 partials, splits x
    M x N floats, 16-byte aligned.
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

/// How many slices a split-K schedule cuts K into, for a problem of `tiles` output tiles on `sms`
/// multiprocessors: the most that divide K's 128-wide blocks evenly and keep tiles x slices CTAs
/// within one wave; 1 when K is not whole blocks or the tiles fill the GPU alone.
inline int block_scaled_splits(int tiles, int K, int sms) {
  int best = 1;
  if (K % kBlockScaleSize == 0) {
    int const blocks = K / kBlockScaleSize;
    for (int s = 2; s <= blocks && int64_t(tiles) * s <= sms; ++s) {
      if (blocks % s == 0) {
        best = s;
      }
    }
  }
  return best;
}

/// Launches one compiled schedule.
using BlockScaledMmLaunchFn = LaunchResult (*)(BlockScaledMmArgs const&);

/// Structural checks shared by every schedule.
inline bool block_scaled_mm_args_valid(BlockScaledMmArgs const& x) {
  return tma_8bit_operands_valid(x) && aligned(x.workspace, 16) &&
         (x.M == 0 || (x.a_scales && x.b_scales && aligned(x.a_scales, 4) && aligned(x.b_scales, 4)));
}

}  // namespace quantgemm
