/*! \file
    \brief The launcher body of one sm80 mixed-input schedule (kernel/sm80_mixed_input.hpp);
           included by the generated translation unit that instantiates it.

    The weight is in the sm80 prepacked layout (layout/prepacked_b_sm80.hpp): rows padded to a
    multiple of 64, columns to a multiple of 64. Every group size that MixedInputMmArgs admits
    (multiples of 32 dividing K, or K) runs on every schedule.
*/
#pragma once

#include "quantgemm/kernel/sm80_mixed_input.hpp"
#include "quantgemm/launch/mixed_input_mm.hpp"

namespace quantgemm {

/// Stages that fit the kernel's share of an H100's 227 KB (kMinBlocks CTAs an SM), at most 96 KB
/// (every sm_80+ GPU gives a block that much).
template <class Weight, class Element, int TileN, int TileM>
constexpr int sm80_mixed_input_stages() {
  using Probe = sm80::MixedInputKernel<Weight, Element, TileN, TileM, 2>;
  constexpr int kShare = 227 * 1024 / Probe::kMinBlocks - 1024;
  constexpr int kBudget = kShare < 96 * 1024 ? kShare : 96 * 1024;
  constexpr int kStages = (kBudget - Probe::kReduceBytes) / Probe::kStageBytes;
  return kStages < 8 ? kStages : 8;
}

/// The shortest stream-K range worth its fixup, in 64-deep iterations.
inline constexpr int kSm80MinStreamKIters = 4;

template <class Weight, class Element, int TileN, int TileM>
LaunchResult launch_sm80_mixed_input_mm(MixedInputMmArgs const& x) {
  using Kernel =
      sm80::MixedInputKernel<Weight, Element, TileN, TileM, sm80_mixed_input_stages<Weight, Element, TileN, TileM>()>;
  static_assert(Kernel::Stages >= 3, "fewer than three stages");
  LaunchResult result;
  if (!mixed_input_mm_args_valid(x) || (Weight::kGroupZeros && x.M > 0 && x.group_zeros == nullptr)) {
    result.status = Status::kInvalidArgument;
    return result;
  }
  if (x.M == 0) {
    return result;
  }
  auto fail = [&](cudaError_t err) -> LaunchResult {
    result.status = Status::kCudaError;
    result.cuda = err;
    return result;
  };
  int const sms = multiprocessor_count();
  if (sms <= 0) {
    return fail(cudaGetLastError());
  }
  if (compute_capability() < 80) {
    return fail(cudaErrorNoKernelImageForDevice);
  }
  constexpr auto kernel = &sm80::sm80_mixed_input_stream_k<Kernel>;
  if (cudaError_t const err = allow_shared_memory<kernel>(Kernel::kSharedBytes); err != cudaSuccess) {
    return fail(err);
  }
  int const per_sm = resident_blocks_per_sm<kernel>(Kernel::kThreads, Kernel::kSharedBytes);
  if (per_sm <= 0) {
    return fail(cudaErrorInvalidConfiguration);
  }
  int const k_iters = (x.K + Kernel::TileK - 1) / Kernel::TileK;
  // every CTA must be resident at once (the stream-K fixup waits for other CTAs)
  StreamKDecomposition const work = StreamKDecomposition::make(
      (x.N + TileN - 1) / TileN, (x.M + TileM - 1) / TileM, k_iters, sms * per_sm, kSm80MinStreamKIters);
  if (!stream_k_scratch_fits(work, Kernel::kTileFloats, x, result)) {
    return result;
  }
  typename Kernel::Params p;
  p.a = static_cast<Element const*>(x.a);
  p.lda = x.lda;
  p.b = static_cast<uint8_t const*>(x.b);
  p.scales = static_cast<Element const*>(x.group_scales);
  p.zeros = static_cast<Element const*>(x.group_zeros);
  p.channel_scales = x.channel_scales;
  p.token_scales = x.token_scales;
  p.out = static_cast<Element*>(x.out);
  p.ldo = x.ldo;
  p.M = x.M;
  p.N = x.N;
  p.K = x.K;
  p.n_blocks = (x.N + 63) / 64;
  p.group_size = x.group_size == x.K ? k_iters * Kernel::TileK : x.group_size;  // one group: never ends
  p.groups = x.K / x.group_size;
  p.work = work;
  p.workspace = static_cast<float*>(x.workspace);
  p.counters = x.counters;
  // on Hopper, programmatic dependent launch (the kernel's launch overlaps the previous kernel's
  // tail; it reads nothing before that kernel completes); QUANTGEMM_PDL=0 turns it off
  cudaError_t const err = launch_kernel(kernel, work.grid, Kernel::kThreads, Kernel::kSharedBytes, x.stream,
                                        compute_capability() >= 90, p);
  if (err != cudaSuccess) {
    return fail(err);
  }
  return result;
}

}  // namespace quantgemm
