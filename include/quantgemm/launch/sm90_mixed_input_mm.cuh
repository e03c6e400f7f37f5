/*! \file
    \brief The launcher body of one sm90 mixed-input schedule; included by the generated translation
           unit that instantiates it (a __global__ template must be instantiated where it is launched).
*/
#pragma once

#include "quantgemm/collective/sm90_mma_bulk_tma_gmma_rs_mixed_input.hpp"
#include "quantgemm/collective/sm90_mma_w4a8.hpp"
#include "quantgemm/kernel/sm90_gemm_mixed_input_stream_k.hpp"
#include "quantgemm/launch/mixed_input_mm.hpp"
#include "quantgemm/launch/tma_descriptor.hpp"

namespace quantgemm {

inline constexpr int kSm90SharedMemoryBytes = 232448;  // 227 KB per block

/// The mainloop of a schedule: Activation e4m3 takes the W4A8 one (u4b8 weights, 128-deep stages,
/// Element the scales' and output's type), any other the 16-bit mixed-input one.
template <class Weight, class Element, int TileN, int TileM, int TileK, int ScaleRows, class Activation, int Stages>
using Sm90MixedInputMainloop =
    cute::conditional_t<cute::is_same_v<Activation, cutlass::float_e4m3_t>, Sm90MmaW4A8<Element, TileN, TileM, Stages>,
                        Sm90MmaBulkTmaGmmaRsMixedInput<Weight, Element, TileN, TileM, TileK, Stages, ScaleRows>>;

/// As many stages as fit beside the epilogue tile (and, split over a cluster of ClusterK CTAs, the
/// other ranks' partials), at most 32.
template <class Weight, class Element, int TileN, int TileM, int TileK, int ScaleRows, class Activation, int ClusterK>
constexpr int sm90_mixed_input_stages() {
  using Probe = Sm90MixedInputMainloop<Weight, Element, TileN, TileM, TileK, ScaleRows, Activation, 1>;
  constexpr int kFixed = TileM * TileN * 2 + 2048 + (ClusterK - 1) * TileM * TileN * 4;
  constexpr int kStages = (kSm90SharedMemoryBytes - kFixed) / int(Probe::kStageBytes + 16);
  return kStages < 32 ? kStages : 32;
}

/// The shortest stream-K range worth its fixup, in k.
inline constexpr int kMinStreamKDepth = 256;

/// One schedule; ScaleRows 2 is the variant for groups of 32 (two scale rows a 64-deep k-block),
/// which takes group_size 32 only, and ScaleRows 1 every other group size. Activation e4m3: the W4A8
/// kernels (u4b8 weights in the e4m3 layout, 128-deep stages, groups of a multiple of 128 or K; K and
/// lda multiples of 16). ClusterK > 1: split-K over clusters of ClusterK CTAs instead of stream-K.
template <class Weight, class Element, int TileN, int TileM, int TileK, int ScaleRows = 1, class Activation = Element,
          int ClusterK = 1>
LaunchResult launch_sm90_mixed_input_mm(MixedInputMmArgs const& x) {
  using Mainloop = Sm90MixedInputMainloop<
      Weight, Element, TileN, TileM, TileK, ScaleRows, Activation,
      sm90_mixed_input_stages<Weight, Element, TileN, TileM, TileK, ScaleRows, Activation, ClusterK>()>;
  constexpr bool kE4m3 = cute::is_same_v<Activation, cutlass::float_e4m3_t>;
  using BLayout = typename Mainloop::BLayout;
  using Kernel = Sm90GemmMixedInputStreamK<Mainloop, ClusterK>;
  static_assert(Kernel::kSharedBytes <= kSm90SharedMemoryBytes, "shared storage too large");

  LaunchResult result;
  bool const group_ok = ScaleRows == 2 ? x.group_size == 32 && x.K != 32
                        : x.group_size == x.K || x.group_size % (kE4m3 ? 128 : 64) == 0;
  bool const rows_ok = !kE4m3 || (x.K % 16 == 0 && x.lda % 16 == 0);  // 16-byte rows of e4m3 for the TMA
  if (!mixed_input_mm_args_valid(x) || !group_ok || !rows_ok ||
      (Weight::kGroupZeros && x.M > 0 && x.group_zeros == nullptr)) {
    result.status = Status::kInvalidArgument;
    return result;
  }
  if (x.M == 0) {
    return result;
  }
  int const sms = multiprocessor_count();
  if (sms <= 0) {
    result.status = Status::kCudaError;
    result.cuda = cudaGetLastError();
    return result;
  }
  // the kernels are sm_90a code: on any other GPU (where a build for its architecture holds an empty
  // kernel) refuse rather than return garbage
  if (compute_capability() != 90) {
    result.status = Status::kCudaError;
    result.cuda = cudaErrorNoKernelImageForDevice;
    return result;
  }
  int const tiles_n = (x.N + TileN - 1) / TileN, tiles_m = (x.M + TileM - 1) / TileM;
  int const iters = (x.K + Mainloop::TileK - 1) / Mainloop::TileK;
  StreamKDecomposition const work =
      ClusterK > 1 ? StreamKDecomposition::make_split(tiles_n, tiles_m, iters, ClusterK)
                   : StreamKDecomposition::make(tiles_n, tiles_m, iters, sms, kMinStreamKDepth / Mainloop::TileK);
  if (!stream_k_scratch_fits(work, Kernel::kTileFloats, x, result)) {
    return result;
  }

  typename Kernel::Params p;
  constexpr CUtensorMapDataType kTmaType =
      cute::is_same_v<Element, cutlass::half_t> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  cudaError_t err = make_tma_2d(&p.tma_act, kE4m3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : kTmaType, kE4m3 ? 1 : 2, x.a, x.M,
                                x.K, x.lda, TileM, Mainloop::kActBoxK, CU_TENSOR_MAP_SWIZZLE_128B);
  if (err == cudaSuccess) {
    err = make_tma_2d(&p.tma_out, kTmaType, 2, x.out, x.M, x.N, x.ldo, TileM, TileN,
                      CU_TENSOR_MAP_SWIZZLE_NONE);
  }
  if (err != cudaSuccess) {
    result.status = Status::kCudaError;
    result.cuda = err;
    return result;
  }
  p.mainloop.b = static_cast<uint8_t const*>(x.b);
  p.mainloop.scales = static_cast<Element const*>(x.group_scales);
  p.mainloop.zeros = static_cast<Element const*>(x.group_zeros);
  p.mainloop.N = x.N;
  p.mainloop.k_blocks = (x.K + BLayout::kBlockK - 1) / BLayout::kBlockK;
  p.mainloop.group_k_blocks =
      ScaleRows == 2 ? 1 : (x.group_size == x.K ? p.mainloop.k_blocks : x.group_size / BLayout::kBlockK);
  p.mainloop.groups = x.K / x.group_size;
  p.work = work;
  p.workspace = static_cast<float*>(x.workspace);
  p.counters = x.counters;
  p.channel_scales = x.channel_scales;
  p.token_scales = x.token_scales;
  p.M = x.M;

  auto* kernel = &sm90_gemm_mixed_input_stream_k<Kernel>;
  static bool attribute_set[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device >= 64 || !attribute_set[device]) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSharedBytes);
    if (err != cudaSuccess) {
      result.status = Status::kCudaError;
      result.cuda = err;
      return result;
    }
    if (device < 64) {
      attribute_set[device] = true;
    }
  }
  // programmatic dependent launch (see the kernel): may start while the previous kernel in the
  // stream finishes; QUANTGEMM_PDL=0 in the environment turns it off
  err = launch_kernel(kernel, work.grid, Kernel::kThreads, Kernel::kSharedBytes, x.stream, true, p, ClusterK);
  if (err != cudaSuccess) {
    result.status = Status::kCudaError;
    result.cuda = err;
  }
  return result;
}

}  // namespace quantgemm
