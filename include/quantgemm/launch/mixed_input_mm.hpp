/*! \file
    \brief Host launcher of the sm90 mixed-input GEMM: raw pointers, sizes, strides and a stream in,
           a status out; nothing throws.

             out[m, n] = cs[n] * ts[m] * sum_k a[m, k] * ((q[n, k] - zero) * s[k / group_size, n])
             (zero = 8 for u4b8, z[k / group_size, n] for u4; cs, ts optional fp32, else 1)

    a: [M, K] bf16, row stride lda (elements, a multiple of 8); b: the prepacked weight
    (layout/prepacked_b.hpp) of an [N, K] u4b8 or u4 weight, zero-padded (code 8) to a multiple of
    128 rows and 64 columns; group_scales (and for u4 group_zeros, integer zero points as bf16):
    [K / group_size, N] bf16, contiguous; out: [M, N] bf16, row
    stride ldo. N and K multiples of 8; group_size K (one group), a multiple of 64 dividing K, or 32
    dividing K (the schedules compiled for groups of 32). Stream-K needs scratch: `workspace` (fp32 partials, reused freely) and
    `counters` (int32, zero at rest; the kernel leaves them zero). A launch that needs more than
    given returns kWorkspaceTooSmall with the sizes it needs, launching nothing.
*/
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "quantgemm/launch/status.hpp"

namespace quantgemm {

struct MixedInputMmArgs {
  void const* a = nullptr;
  int64_t lda = 0;
  void const* b = nullptr;
  void const* group_scales = nullptr;
  void const* group_zeros = nullptr;  ///< [K / group_size, N] bf16 zero points, for weights with group zeros (u4)
  float const* channel_scales = nullptr;  ///< optional [N] fp32: out[m, n] *= channel_scales[n]
  float const* token_scales = nullptr;    ///< optional [M] fp32: out[m, n] *= token_scales[m]
  void* out = nullptr;
  int64_t ldo = 0;
  int M = 0;
  int N = 0;
  int K = 0;
  int group_size = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int* counters = nullptr;
  int counters_len = 0;
  cudaStream_t stream = nullptr;
};

/// Launches one compiled schedule.
using MixedInputMmLaunchFn = LaunchResult (*)(MixedInputMmArgs const&);

/// The stream-K scratch a launch of `work` (any StreamKDecomposition) needs, for tiles of
/// `tile_floats` fp32 accumulators (and `extra_bytes` more), into `result`; false, with result's
/// status set, when the problem cannot be decomposed (kInvalidArgument) or the caller's scratch is
/// short (kWorkspaceTooSmall).
template <class Work>
inline bool stream_k_scratch_fits(Work const& work, int tile_floats, MixedInputMmArgs const& x, LaunchResult& result,
                                  size_t extra_bytes = 0) {
  if (work.grid == 0) {
    result.status = Status::kInvalidArgument;
    return false;
  }
  result.workspace_bytes_needed = size_t(work.sk_slots()) * tile_floats * sizeof(float) + extra_bytes;
  result.counters_needed = work.sk_tiles;
  if (result.workspace_bytes_needed > x.workspace_bytes || work.sk_tiles > x.counters_len) {
    result.status = Status::kWorkspaceTooSmall;
    return false;
  }
  return true;
}

/// Structural checks shared by every schedule.
inline bool mixed_input_mm_args_valid(MixedInputMmArgs const& x) {
  return x.M >= 0 && x.N > 0 && x.K > 0 && x.N % 8 == 0 && x.K % 8 == 0 &&
         (x.group_size == x.K || (x.group_size > 0 && x.group_size % 32 == 0 && x.K % x.group_size == 0)) &&
         x.lda >= x.K && x.lda % 8 == 0 && x.ldo >= x.N &&
         x.ldo % 8 == 0 && (x.M == 0 || (x.a && x.b && x.group_scales && x.out));
}

}  // namespace quantgemm
