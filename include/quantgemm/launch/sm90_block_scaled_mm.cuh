/*! \file
    \brief One sm90 block-scaled FP8 schedule: CUTLASS's TMA warp-specialized GEMM with the blockwise
           scaling mainloop (each 128-wide k block of wgmmas accumulates in the tensor core, then is
           promoted into the fp32 accumulators times its activation and weight scales), a plain
           bf16 epilogue, and its launcher. Included by the generated translation unit that
           instantiates it.

    As for the W8A8 schedules, a schedule is written in the coordinates of the GEMM the kernel
    computes: with Swap it computes D^T = B A^T (the weight's rows are its M, with the 128-row scale
    granularity; the tokens its N, one scale per token). Both scale tensors are K-major, so the
    mainloop's producer warp reads them with cp.async (no alignment asked of M or N).

    A split-K schedule (SplitK) serves layers of few output tiles, whose CTAs would each stream
    many k blocks in sequence while most SMs idle: K is cut into equal slices of whole 128-wide
    blocks (block_scaled_splits), run as the batch dimension of one launch (the operands and the
    scales stepped by a slice's K, each slice's fp32 output a plane of the workspace), and a second
    kernel sums the planes in slice order into the bf16 output (split_k_reduce.hpp).
*/
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "quantgemm/collective/sm90_blockwise_fp8_overlapped.hpp"
#include "quantgemm/launch/block_scaled_mm.hpp"
#include "quantgemm/launch/sm90_cutlass_gemm.cuh"
#include "quantgemm/launch/split_k_reduce.hpp"

namespace quantgemm {

template <class ElementOut, class TileShape, class ClusterShape, class KernelSchedule, class TileScheduler, bool Swap_,
          bool SplitK_ = false>
struct Sm90BlockScaledMm {
  static constexpr bool Swap = Swap_;
  static constexpr bool SplitK = SplitK_;
  using ElementAB = cutlass::float_e4m3_t;
  using ElementD = cute::conditional_t<SplitK, float, ElementOut>;  // what the GEMM writes: partials when split
  // scale granularity of the kernel's A and B: the tokens one row each, the weight 128 rows
  static constexpr int kTokenRows = 1;
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<Swap ? kBlockScaleSize : kTokenRows, Swap ? kTokenRows : kBlockScaleSize,
                                                kBlockScaleSize, cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using LayoutD = cute::conditional_t<Swap, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignOut = 16 / sizeof(ElementD);
  static constexpr bool kCooperative =
      cute::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>;
  using EpilogueSchedule = cute::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                               cutlass::epilogue::TmaWarpSpecialized>;
  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignOut, ElementD, LayoutD,
      kAlignOut, EpilogueSchedule, Fusion>::CollectiveOp;

  using CutlassMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, cute::tuple<cutlass::layout::RowMajor, LayoutSFA>,
      kAlignAB, ElementAB, cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, kAlignAB, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using CollectiveMainloop = Sm90BlockwiseFp8Overlapped<CutlassMainloop>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

/// The scale layout `base` (CUTLASS's, for the kernel's problem) with its strides set for the
/// scales of the whole K: `row` floats between rows of scales (the whole K's scale blocks), `slice`
/// between split-K slices.
template <class Layout>
Layout split_k_scale_layout(Layout const& base, int row, int slice) {
  using namespace cute;
  auto const s = base.stride();
  return Layout(base.shape(), make_stride(make_stride(get<0, 0>(s), row), get<1>(s), slice));
}

template <class Config>
LaunchResult launch_sm90_block_scaled_mm(BlockScaledMmArgs const& x) {
  using Gemm = typename Config::Gemm;
  using Kernel = typename Config::Kernel;
  using ElementAB = typename Config::ElementAB;
  using ElementD = typename Config::ElementD;
  constexpr bool Swap = Config::Swap;
  LaunchResult result;
  if (!ready_to_launch(block_scaled_mm_args_valid(x), x.M, result)) {
    return result;
  }
  typename Gemm::Arguments args;
  set_gemm_operands<Swap, ElementAB, ElementD, Kernel>(args, x);
  int const rows = Swap ? x.N : x.M, columns = Swap ? x.M : x.N;  // the kernel's GEMM
  int splits = 1;
  size_t partial_bytes = 0;
  if constexpr (Config::SplitK) {
    using TileShape = typename Kernel::TileShape;
    int const tiles = ((rows + cute::size<0>(TileShape{}) - 1) / cute::size<0>(TileShape{})) *
                      ((columns + cute::size<1>(TileShape{}) - 1) / cute::size<1>(TileShape{}));
    splits = block_scaled_splits(tiles, x.K, multiprocessor_count());
    partial_bytes = (size_t(splits) * x.M * x.N * sizeof(float) + 255) / 256 * 256;
  }
  int const slice_k = x.K / splits;
  auto const problem = cute::make_shape(rows, columns, slice_k, splits);
  args.problem_shape = problem;
  args.mainloop.ptr_SFA = Swap ? x.b_scales : x.a_scales;
  args.mainloop.layout_SFA = Config::ScaleConfig::tile_atom_to_shape_SFA(problem);
  args.mainloop.ptr_SFB = Swap ? x.a_scales : x.b_scales;
  args.mainloop.layout_SFB = Config::ScaleConfig::tile_atom_to_shape_SFB(problem);
  if constexpr (Config::SplitK) {
    // slice l is the GEMM over k in [l * slice_k, (l + 1) * slice_k): the operands step by slice_k
    // elements, the scales by its blocks, the output by a plane of [M, N] fp32
    int const blocks = (x.K + kBlockScaleSize - 1) / kBlockScaleSize;
    cute::get<2>(args.mainloop.dA) = slice_k;
    cute::get<2>(args.mainloop.dB) = slice_k;
    args.mainloop.layout_SFA = split_k_scale_layout(args.mainloop.layout_SFA, blocks, slice_k / kBlockScaleSize);
    args.mainloop.layout_SFB = split_k_scale_layout(args.mainloop.layout_SFB, blocks, slice_k / kBlockScaleSize);
    typename Kernel::StrideD stride_d;
    if constexpr (Swap) {
      stride_d = cute::make_stride(cute::Int<1>{}, int64_t(x.N), int64_t(x.M) * x.N);
    } else {
      stride_d = cute::make_stride(int64_t(x.N), cute::Int<1>{}, int64_t(x.M) * x.N);
    }
    args.epilogue.ptr_D = static_cast<float*>(x.workspace);
    args.epilogue.dC = stride_d;
    args.epilogue.dD = stride_d;
  }
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  result = run_cutlass_gemm<Gemm>(args, x.workspace, x.workspace_bytes, x.stream, partial_bytes);
  if constexpr (Config::SplitK) {
    if (result.status == Status::kSuccess) {
      cudaError_t const err = split_k_reduce(static_cast<float const*>(x.workspace), splits, x.M, x.N,
                                             static_cast<__nv_bfloat16*>(x.out), x.ldo, x.stream);
      if (err != cudaSuccess) {
        result.status = Status::kCudaError;
        result.cuda = err;
      }
    }
  }
  return result;
}

}  // namespace quantgemm
