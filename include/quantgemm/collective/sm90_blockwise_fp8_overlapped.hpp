/*! \file
    \brief The consumer side of CUTLASS's sm90 blockwise-scaled FP8 mainloop, reordered so that the
           tensor core never waits for the promotion.

    CUTLASS's blockwise mainloop issues a k-tile's wgmmas into a temporary accumulator, waits for
    them (warpgroup_wait<0>), then promotes the temporary into the fp32 accumulators times the
    tile's scales, and only then issues the next k-tile: the tensor core idles for every promotion,
    in both warpgroups of a cooperative tile at once. Here the temporary is double-buffered: the
    wgmmas of k-tile t run into one buffer while the warpgroup promotes k-tile t - 1 from the other
    (warpgroup_wait<1>), so the promotion hides behind the tensor core. The producer side (TMA loads
    of the operands, cp.async of the scales), the shared memory and the pipeline are the base
    collective's; like the base, mma() releases every stage but the last, which mma_tail() releases.

      accum[m, n] = sum over k-tiles t of sa[m, t] * sb[n, t] * (sum over k in t of a[m, k] * b[n, k])

    Costs one more accumulator-sized register set (three in all), so it is used where the
    accumulators are at most 64 x 128 per warpgroup.
*/
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace quantgemm {

template <class Base>
struct Sm90BlockwiseFp8Overlapped : Base {
  using typename Base::ElementBlockScale;
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutSFA;
  using typename Base::SmemLayoutSFB;
  using typename Base::TensorStorage;
  using typename Base::TileShape;
  using typename Base::TiledMma;
  static constexpr int ScaleMsPerTile = Base::ScaleMsPerTile;
  static constexpr int ScaleNsPerTile = Base::ScaleNsPerTile;
  static_assert(Base::ScalePromotionInterval * cute::size<2>(typename TiledMma::AtomShape_MNK{}) ==
                    cute::size<2>(TileShape{}),
                "one scale block per k-tile: every k-tile is promoted");

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
    // the scales seen as (BLK_M, BLK_N, (1, PIPE)) tensors broadcast along the other operand's side
    Tensor sSFA = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFA.data()),
        make_layout(make_shape(get<0>(shape(SmemLayoutSFA{})), get<1>(TileShape{}),
                               make_shape(get<1>(shape(SmemLayoutSFA{})), get<2>(shape(SmemLayoutSFA{})))),
                    make_stride(get<0>(stride(SmemLayoutSFA{})), _0{},
                                make_stride(get<1>(stride(SmemLayoutSFA{})), get<2>(stride(SmemLayoutSFA{}))))));
    Tensor sSFB = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFB.data()),
        make_layout(make_shape(get<0>(TileShape{}), get<0>(shape(SmemLayoutSFB{})),
                               make_shape(get<1>(shape(SmemLayoutSFB{})), get<2>(shape(SmemLayoutSFB{})))),
                    make_stride(_0{}, get<0>(stride(SmemLayoutSFB{})),
                                make_stride(get<1>(stride(SmemLayoutSFB{})), get<2>(stride(SmemLayoutSFB{}))))));

    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_layout = make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    int const warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_layout(warp_group));
    Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);  // (MMA,MMA_M,MMA_N,(1,PIPE))
    Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA,MMA_N,MMA_K,PIPE)

    // two k-tiles in flight: each with its temporary accumulators and its scales
    Tensor partial0 = make_fragment_like(accum);
    Tensor partial1 = make_fragment_like(accum);
    Tensor sfa0 = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor sfa1 = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor sfb0 = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));
    Tensor sfb1 = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));
    PipelineState smem_pipe_release = smem_pipe_read;

    // waits for the k-tile at smem_pipe_read, reads its scales (the one that varies along the tile
    // times the other) and issues its wgmmas into `partial`
    auto issue = [&](auto& partial, auto& sfa, auto& sfb) {
      pipeline.consumer_wait(smem_pipe_read, pipeline.consumer_try_wait(smem_pipe_read));
      int const stage = smem_pipe_read.index();
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), sfa);
      copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), sfb);
      warpgroup_fence_operand(partial);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB(_, _, k_block, stage), partial);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(partial);
      if constexpr (ScaleMsPerTile > 1 && ScaleNsPerTile == 1) {
        ElementBlockScale const b = sfb(_0{});
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(filter_zeros(sfa)); ++i) {
          filter_zeros(sfa)(i) = filter_zeros(sfa)(i) * b;
        }
      } else if constexpr (ScaleMsPerTile == 1 && ScaleNsPerTile > 1) {
        ElementBlockScale const a = sfa(_0{});
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(filter_zeros(sfb)); ++i) {
          filter_zeros(sfb)(i) = filter_zeros(sfb)(i) * a;
        }
      } else if constexpr (ScaleMsPerTile == 1 && ScaleNsPerTile == 1) {
        sfa(_0{}) = sfa(_0{}) * sfb(_0{});
      }
      ++smem_pipe_read;
    };
    // accum (+)= partial * its scales, once the partial's wgmmas have retired
    auto promote = [&](auto& partial, auto const& sfa, auto const& sfb) {
      warpgroup_fence_operand(partial);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) {
        ElementBlockScale s;
        if constexpr (ScaleMsPerTile > 1 && ScaleNsPerTile == 1) {
          s = sfa(i);
        } else if constexpr (ScaleMsPerTile == 1 && ScaleNsPerTile > 1) {
          s = sfb(i);
        } else if constexpr (ScaleMsPerTile == 1 && ScaleNsPerTile == 1) {
          s = sfa(_0{});
        } else {
          s = sfa(i) * sfb(i);
        }
        accum(i) = fmaf(partial(i), s, accum(i));
      }
    };

    clear(accum);
    warpgroup_fence_operand(accum);
    issue(partial0, sfa0, sfb0);
    // two k-tiles a trip, so that each buffer keeps its registers (no runtime indexing)
    for (int t = 1; t < k_tile_count; t += 2) {
      issue(partial1, sfa1, sfb1);
      warpgroup_wait<1>();  // k-tile t - 1 has retired; k-tile t runs while it is promoted
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
      promote(partial0, sfa0, sfb0);
      if (t + 1 < k_tile_count) {
        issue(partial0, sfa0, sfb0);
        warpgroup_wait<1>();
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
        promote(partial1, sfa1, sfb1);
      } else {
        warpgroup_wait<0>();
        promote(partial1, sfa1, sfb1);
        warpgroup_fence_operand(accum);
        return;
      }
    }
    warpgroup_wait<0>();
    promote(partial0, sfa0, sfb0);
    warpgroup_fence_operand(accum);
  }
};

}  // namespace quantgemm
