/*! \file
    \brief sm90 mixed-input mainloop: bulk copies of the prepacked weight and its group scales, a
           TMA tensor load of the activation, the weight upconverted in registers and fed to wgmma
           as its register-sourced operand (the transposed problem out^T = W a^T):

             acc[n, m] = sum_k bf16((q[n, k] - zero) * s[k / group, n]) * a[m, k]      (fp32)

    One CTA tile is 128 weight rows (two consumer warpgroups, 64 rows each) x TileM activation rows;
    one stage is one 128x64 prepacked block, the group-scale row of its 64 k, and a TileM x 64
    activation tile (128B-swizzled, K-major: the wgmma B operand).
*/
#pragma once

#include <cuda.h>

#include "cute/arch/copy_sm90_tma.hpp"
#include "cute/arch/mma_sm90.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/numeric_types.h"

#include "quantgemm/layout/prepacked_b.hpp"
#include "quantgemm/numeric/u4b8.hpp"

namespace quantgemm {

/// Position in a ring of pipeline stages.
struct PipelineState {
  int index = 0;
  uint32_t phase = 0;
  template <int Stages>
  CUTE_DEVICE void advance() {
    if (++index == Stages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

template <class Weight, class ElementA, int TileM_, int Stages_>
struct Sm90MmaBulkTmaGmmaRsMixedInput {
  static_assert(cute::is_same_v<ElementA, cutlass::bfloat16_t>, "quantgemm: activations must be bf16 here");

  using BLayout = PrepackedBLayout<Weight>;
  static constexpr int TileN = BLayout::kBlockN;  // weight rows: the wgmma M
  static constexpr int TileK = BLayout::kBlockK;
  static constexpr int TileM = TileM_;            // activation rows: the wgmma N
  static constexpr int Stages = Stages_;
  static constexpr int kConsumerThreads = BLayout::kThreads;
  static constexpr int kConsumerWarps = kConsumerThreads / 32;

  using TiledMma = decltype(cute::make_tiled_mma(
      cute::SM90::GMMA::rs_op_selector<ElementA, ElementA, float,
                                       cute::Shape<cute::_64, cute::Int<TileM>, cute::Int<TileK>>>(),
      cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));
  static_assert(cute::is_same_v<typename TiledMma::Atom::Traits::ALayout, typename BLayout::AtomALayout>,
                "the prepacked layout must follow this MMA's register-sourced operand");
  static_assert(cute::size(TiledMma{}) == kConsumerThreads);

  // (TileM, TileK, Stages), 128B-swizzled, K-major
  using SmemLayoutAct = decltype(cute::tile_to_shape(
      cute::SM90::GMMA::Layout_K_SW128_Atom<ElementA>{},
      cute::make_shape(cute::Int<TileM>{}, cute::Int<TileK>{}, cute::Int<Stages>{})));

  static constexpr uint32_t kActBytes = TileM * TileK * sizeof(ElementA);
  static constexpr uint32_t kScaleBytes = TileN * sizeof(ElementA);
  static constexpr uint32_t kStageBytes = BLayout::kBlockBytes + kScaleBytes + kActBytes;

  struct SharedStorage {
    cute::array_aligned<ElementA, cute::cosize_v<SmemLayoutAct>, 1024> act;
    cute::array_aligned<uint8_t, Stages * BLayout::kBlockBytes, 128> b;
    cute::array_aligned<ElementA, Stages * TileN, 128> scales;
    uint64_t full[Stages];
    uint64_t empty[Stages];
  };

  struct Params {
    uint8_t const* b;          ///< prepacked weight
    ElementA const* scales;    ///< [K / group, N]
    int N;
    int K;
    int group_k_blocks;        ///< group size / TileK
  };

  using Accumulator = decltype(cute::partition_fragment_C(
      TiledMma{}, cute::Shape<cute::Int<TileN>, cute::Int<TileM>>{}));

  CUTE_DEVICE static void init_barriers(SharedStorage& s) {
    for (int i = 0; i < Stages; ++i) {
      cutlass::arch::ClusterTransactionBarrier::init(&s.full[i], 1);
      cutlass::arch::ClusterBarrier::init(&s.empty[i], kConsumerWarps);
    }
    cutlass::arch::fence_barrier_init();
  }

  /// Producer (one thread): fills the next stage with k-block kb of tile (n_tile, m_tile).
  CUTE_DEVICE static void load(Params const& p, CUtensorMap const* tma_act, SharedStorage& s,
                               PipelineState& pipe, int n_tile, int m_tile, int kb) {
    int const i = pipe.index;
    cutlass::arch::ClusterBarrier::wait(&s.empty[i], pipe.phase ^ 1u);
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&s.full[i], kStageBytes);
    cute::SM90_BULK_COPY_G2S::copy(p.b + BLayout::block_offset_bytes(n_tile, kb, p.K), &s.full[i],
                                   s.b.data() + i * BLayout::kBlockBytes, BLayout::kBlockBytes);
    cute::SM90_BULK_COPY_G2S::copy(p.scales + int64_t(kb / p.group_k_blocks) * p.N + n_tile * TileN,
                                   &s.full[i], s.scales.data() + i * TileN, kScaleBytes);
    cute::SM90_TMA_LOAD_2D::copy(tma_act, &s.full[i],
                                 static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL),
                                 s.act.data() + i * (TileM * TileK), kb * TileK, m_tile * TileM);
    pipe.advance<Stages>();
  }

  /// Consumers (two warpgroups, thread ct in 0..255): accum = the sum over the next k_iters stages.
  CUTE_DEVICE static void mma(SharedStorage& s, PipelineState& pipe, int k_iters, Accumulator& accum, int ct) {
    using namespace cute;
    TiledMma tiled_mma;
    Tensor sAct = make_tensor(make_smem_ptr(s.act.data()), SmemLayoutAct{});       // (TileM,TileK,PIPE)
    auto wg_slice = tiled_mma.get_slice((ct / 128) * 128);
    Tensor tCrB = wg_slice.make_fragment_B(wg_slice.partition_B(sAct));             // (MMA,1,4,PIPE)
    Tensor tCrA = make_tensor<ElementA>(partition_shape_A(tiled_mma, Shape<Int<TileN>, Int<TileK>>{}));  // (MMA,1,4)
    static_assert(size<2>(tCrA) == BLayout::kKSteps);

    // this thread's two weight rows: the wgmma A fragment rows g and g + 8 of its warp
    int const row = (ct / 32) * 16 + (ct % 32) / 4;
    uint16_t const* scales = reinterpret_cast<uint16_t const*>(s.scales.data());

    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);
    int previous = -1;
    for (int it = 0; it < k_iters; ++it) {
      int const i = pipe.index;
      cutlass::arch::ClusterTransactionBarrier::wait(&s.full[i], pipe.phase);
      uint4 const packed = *reinterpret_cast<uint4 const*>(s.b.data() + i * BLayout::kBlockBytes + ct * 16);
      uint32_t const words[4] = {packed.x, packed.y, packed.z, packed.w};
      uint32_t const lo = scales[i * TileN + row];
      uint32_t const hi = scales[i * TileN + row + 8];
      uint32_t const lo2 = lo | (lo << 16);
      uint32_t const hi2 = hi | (hi << 16);
      // registers {a0a1, a2a3, a4a5, a6a7} hold rows {g, g+8, g, g+8}
      __nv_bfloat162 const scale[4] = {reinterpret_cast<__nv_bfloat162 const&>(lo2),
                                       reinterpret_cast<__nv_bfloat162 const&>(hi2),
                                       reinterpret_cast<__nv_bfloat162 const&>(lo2),
                                       reinterpret_cast<__nv_bfloat162 const&>(hi2)};
      CUTE_UNROLL
      for (int j = 0; j < BLayout::kKSteps; ++j) {
        // at most 3 wgmmas in flight: the one that last read these registers has retired
        warpgroup_wait<BLayout::kKSteps - 1>();
        if (j == BLayout::kKSteps - 1 && previous >= 0) {
          release(s, previous, ct);  // every wgmma of the previous stage has retired
        }
        Tensor a = recast<uint32_t>(tCrA(_, 0, j));
        uint32_t converted[4];
        ConvertToBf16x2<Weight>::convert(words[j], scale, converted);
        CUTE_UNROLL
        for (int r = 0; r < 4; ++r) {
          a(r) = converted[r];
        }
        warpgroup_fence_operand(accum);
        warpgroup_arrive();
        gemm(tiled_mma, tCrA(_, _, j), tCrB(_, _, j, i), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        warpgroup_commit_batch();
      }
      previous = i;
      pipe.advance<Stages>();
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(accum);
    if (previous >= 0) {
      release(s, previous, ct);
    }
  }

  CUTE_DEVICE static void release(SharedStorage& s, int stage, int ct) {
    if (ct % 32 == 0) {
      cutlass::arch::ClusterBarrier::arrive(&s.empty[stage]);
    }
  }
};

}  // namespace quantgemm
