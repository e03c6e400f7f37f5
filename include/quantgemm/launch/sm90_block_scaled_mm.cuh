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

namespace quantgemm {

template <class ElementOut, class TileShape, class ClusterShape, class KernelSchedule, class TileScheduler, bool Swap_>
struct Sm90BlockScaledMm {
  static constexpr bool Swap = Swap_;
  using ElementAB = cutlass::float_e4m3_t;
  using ElementD = ElementOut;
  // scale granularity of the kernel's A and B: the tokens one row each, the weight 128 rows
  static constexpr int kTokenRows = 1;
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<Swap ? kBlockScaleSize : kTokenRows, Swap ? kTokenRows : kBlockScaleSize,
                                                kBlockScaleSize, cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using LayoutD = cute::conditional_t<Swap, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignOut = 16 / sizeof(ElementOut);
  static constexpr bool kCooperative =
      cute::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>;
  using EpilogueSchedule = cute::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                               cutlass::epilogue::TmaWarpSpecialized>;
  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementOut, float, void, float>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignOut, ElementOut, LayoutD,
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
  auto const problem = cute::make_shape(Swap ? x.N : x.M, Swap ? x.M : x.N, x.K, 1);  // the kernel's GEMM
  args.mainloop.ptr_SFA = Swap ? x.b_scales : x.a_scales;
  args.mainloop.layout_SFA = Config::ScaleConfig::tile_atom_to_shape_SFA(problem);
  args.mainloop.ptr_SFB = Swap ? x.a_scales : x.b_scales;
  args.mainloop.layout_SFB = Config::ScaleConfig::tile_atom_to_shape_SFB(problem);
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  return run_cutlass_gemm<Gemm>(args, x.workspace, x.workspace_bytes, x.stream);
}

}  // namespace quantgemm
