/*! \file
    \brief One sm90 W8A8 schedule: the CUTLASS TMA warp-specialized GEMM (FP8 e4m3 or INT8, K-major
           operands) with a quantgemm epilogue tree, and its launcher. Included by the generated
           translation unit that instantiates it (a __global__ template must be instantiated where it
           is launched).

    A schedule is written in the coordinates of the GEMM the kernel computes: with Swap it computes
    D^T = B A^T, so its M is the weight's N and its N the tokens (a narrow tile for small M). The
    output dtype, bf16 or fp16, is a runtime argument of the epilogue (epilogue/scaled.hpp).
*/
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "quantgemm/epilogue/scaled.hpp"
#include "quantgemm/launch/sm90_cutlass_gemm.cuh"
#include "quantgemm/launch/scaled_mm.hpp"

namespace quantgemm {

template <class ElementAB, template <bool, class> class Epilogue, class TileShape,
          class ClusterShape, class KernelSchedule, class TileScheduler, bool Swap_>
struct Sm90ScaledMm {
  static constexpr bool Swap = Swap_;
  using ElementA = ElementAB;
  using ElementD = epilogue::detail::OutStorage;  // bf16 or fp16 bits
  using ElementAcc = cute::conditional_t<cute::is_same_v<ElementAB, int8_t>, int32_t, float>;
  using Fusion = Epilogue<Swap, TileShape>;
  using LayoutD = cute::conditional_t<Swap, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignOut = 16 / sizeof(ElementD);
  static constexpr bool kCooperative =
      cute::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative> ||
      cute::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum>;
  using EpilogueSchedule = cute::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                               cutlass::epilogue::TmaWarpSpecialized>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD, kAlignOut, ElementD,
      LayoutD, kAlignOut, EpilogueSchedule, typename Fusion::EVT>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, cutlass::layout::RowMajor, kAlignAB, ElementAB,
      cutlass::layout::ColumnMajor, kAlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

template <class Config>
LaunchResult launch_sm90_scaled_mm(ScaledMmArgs const& x) {
  using Gemm = typename Config::Gemm;
  using Kernel = typename Config::Kernel;
  using ElementA = typename Config::ElementA;
  using ElementD = typename Config::ElementD;
  LaunchResult result;
  if (!ready_to_launch(scaled_mm_args_valid(x), x.M, result)) {
    return result;
  }
  typename Gemm::Arguments args;
  set_gemm_operands<Config::Swap, ElementA, ElementD, Kernel>(args, x);
  args.epilogue.thread = Config::Fusion::arguments(x.epilogue);
  return run_cutlass_gemm<Gemm>(args, x.workspace, x.workspace_bytes, x.stream);
}

}  // namespace quantgemm
