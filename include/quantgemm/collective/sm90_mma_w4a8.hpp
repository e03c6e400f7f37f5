/*! \file
    \brief sm90 W4A8 mainloop: 4-bit weights (u4b8) against e4m3 activations on the fp8 tensor core,
           the transposed problem out^T = W a^T as in the 16-bit mixed-input mainloop:

             acc[n, m] = sum_g s[g, n] * (sum_{k in stage g} (q[n, k] - 8) * a[m, k])       (fp32)

    The weight side is the 16-bit mainloop's: the same bulk copies of 128 x 64 prepacked blocks (in
    their own layout, PrepackedBLayoutE4m3: the 8-bit wgmma's register order) and of each block's
    group-scale row, by the same producer threads. A stage is 128 of k: two k-blocks and one 128-wide
    TMA box of the e4m3 activation (128 bytes a row, 128B swizzle).

    Each consumer thread converts its codes to e4m3 with PRMT lookups (numeric/u4_e4m3.hpp: exact,
    q - 8 is a small integer) and issues the stage's four k32 wgmmas into a fresh set of fp32
    partial sums; the group scale (one row per stage: groups are multiples of 128 or all of K) is
    applied when that partial is added into the accumulators, in fp32. This is also where the
    tensor core's fp8 accumulation is promoted into full fp32: every 128 of k. A stage's codes are
    converted while the previous stage's wgmmas run; those are then waited for and added (narrow
    tiles spread a stage's k32 steps over up to four sets of partial sums: a chain of short wgmmas
    on one set runs at their latency).

    The 128 x 256 tile has no room for partial sums beside its 128 accumulators a thread. Its
    wgmmas accumulate into the accumulators themselves, kept in units of the current group's scale:

             acc <- acc * (s[g - 1, n] / s[g, n]) + sum_{k in stage g} (q[n, k] - 8) * a[m, k]

    and times the last group's scale at the end. The tensor core then accumulates over all of k, as
    FP8 GEMMs with fast accumulation do (docs/math.md has the error this costs).
*/
#pragma once

#include <cuda.h>

#include "cute/arch/copy_sm90_tma.hpp"
#include "cute/arch/mma_sm90.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/numeric_types.h"

#include "quantgemm/collective/sm90_mma_bulk_tma_gmma_rs_mixed_input.hpp"
#include "quantgemm/layout/prepacked_b.hpp"
#include "quantgemm/numeric/u4_e4m3.hpp"

namespace quantgemm {

template <class ElementOut_, int TileN_, int TileM_, int Stages_>
struct Sm90MmaW4A8 : Sm90W4A8Tile<ElementOut_, TileN_, TileM_> {
  using ElementA = cutlass::float_e4m3_t;  // activations
  using ElementOut = ElementOut_;          // group scales and output
  using Weight = u4b8;
  /// the tile's constants, parameters and shared storage (kernel/sm90_mixed_input_config.hpp)
  using Tile = Sm90W4A8Tile<ElementOut, TileN_, TileM_>;
  using Tile::TileN, Tile::TileM, Tile::TileK, Tile::kKBlocks, Tile::kBlocksN, Tile::kActBytes, Tile::kConsumerThreads;
  using SharedStorage = typename Tile::template Storage<Stages_>;
  using BLayout = PrepackedBLayoutE4m3;
  static_assert(BLayout::kBlockN == Tile::kBlockN && BLayout::kBlockK == Tile::kBlockK &&
                BLayout::kBlockBytes == Tile::kBlockBytes && BLayout::kThreads == kConsumerThreads,
                "the tile's blocks are the prepacked layout's");
  static constexpr int Stages = Stages_;
  static constexpr int kKSteps = TileK / 32;

  /// The weight producers: the 16-bit mainloop's, whose blocks, scale rows and barriers are the same.
  using WeightStream = Sm90MmaBulkTmaGmmaRsMixedInput<Weight, ElementOut, TileN, TileM, TileK, Stages, 1>;
  static_assert(WeightStream::BLayout::kBlockBytes == BLayout::kBlockBytes);
  using Pipeline = typename WeightStream::Pipeline;
  using Params = typename WeightStream::Params;
  static_assert(cute::is_same_v<Params, typename Tile::Params>);
  using LoadCursor = typename WeightStream::LoadCursor;

  using TiledMma = Sm90RsTiledMma<ElementA, TileM, TileK>;
  static_assert(cute::is_same_v<typename TiledMma::Atom::Traits::ALayout, typename BLayout::AtomALayout>,
                "the prepacked layout must follow this MMA's register-sourced operand");

  // (TileM, TileK, Stages), 128B-swizzled, K-major: one 128-byte row per token and stage (SharedStorage::act)
  using SmemLayoutAct = decltype(cute::tile_to_shape(
      cute::SM90::GMMA::Layout_K_SW128_Atom<ElementA>{},
      cute::make_shape(cute::Int<TileM>{}, cute::Int<TileK>{}, cute::Int<Stages>{})));
  static_assert(cute::cosize_v<SmemLayoutAct> == TileM * TileK * Stages);
  static_assert(Stages == 1 || SmemLayoutAct{}.layout_b()(0, 0, 1) == TileM * TileK);

  using Accumulator = decltype(cute::partition_fragment_C(
      TiledMma{}, cute::Shape<cute::Int<TileN>, cute::Int<TileM>>{}));  // (MMA, kBlocksN, 1)

  /// The 8-token tiles: the activation producer's warp converts each stage's e4m3 tile into fp16
  /// (convert_act) and arrives on the stage's full barrier in the producer's place; the tile's TMA
  /// counts on act_full.
  static constexpr bool kConvertsAct = Tile::kConvertsAct;
  /// stages the conversion trails the activation loads by (their latency from the L2: the warp
  /// converts a stage each time a consumer frees one, so each load has that many stages' time to land)
  static constexpr int kConvertLag = Stages - 2 < 6 ? Stages - 2 : 6;
  static_assert(!kConvertsAct || kConvertLag >= 2);

  CUTE_DEVICE static void init_barriers(SharedStorage& s) {
    if constexpr (kConvertsAct) {
      for (int i = 0; i < Stages; ++i) {
        cutlass::arch::ClusterTransactionBarrier::init(&s.act_full[i], 1);
      }
    }
    WeightStream::init_barriers(s);  // (and the fence)
  }

  CUTE_DEVICE static LoadCursor cursor(Params const& p, int n_tile, int blk, int kb) {
    return WeightStream::cursor(p, n_tile, blk, kb);
  }

  CUTE_DEVICE static void load(Params const& p, SharedStorage& s, Pipeline& pipe, LoadCursor& c, int blk) {
    WeightStream::load(p, s, pipe, c, blk);
  }

  /// Activation producer (thread `issue`; every lane of its warp waits): the e4m3 tile of k from k,
  /// rows [m0, m0 + TileM), one TMA box (rows past M and columns past K read as zeros).
  CUTE_DEVICE static void load_act(CUtensorMap const* tma_act, SharedStorage& s, Pipeline& pipe, int k, int m0,
                                   bool issue = true) {
    int const i = pipe.index;
    cutlass::arch::ClusterBarrier::wait(&s.empty[i], pipe.phase ^ 1u);
    if (issue) {
      uint64_t* landed = &s.full[i];
      if constexpr (kConvertsAct) {
        landed = &s.act_full[i];
      }
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(landed, kActBytes);
      cute::SM90_TMA_LOAD_2D::copy(tma_act, landed, static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL),
                                   s.act.data() + i * (TileM * TileK), k, m0);
    }
    pipe.advance();
  }

  /// The 8-token tiles' activation converter (the activation producer's warp, lane `lane`): stage
  /// `pipe`'s e4m3 tile, once landed, into fp16 (exact) in the order of the consumers' mma.sync B
  /// fragments, then the warp's arrival on the stage's full barrier. Token g's 128 e4m3 of the stage
  /// are eight 16-byte chunks, k16 step j at chunk j ^ g (128B swizzle); lane 4 g + r converts its
  /// steps 2 r and 2 r + 1. Word q of step j (k 16 j + 4 q ... 4 q + 3) is the B fragment pair of
  /// mma k 2 q, 2 q + 1 (its first two values) and 2 q + 8, 2 q + 9 (its last two) of the weight's
  /// k order (mma_sync): the fp16 tile holds, per k-block (1 KB) and token (128 bytes), step j's
  /// first fp16 values as chunk 2 (j % 4) and its last as chunk 2 (j % 4) + 1, chunk c at c ^ g, the
  /// 16-bit mainloop's 8-token tile for ldmatrix. Then the stage's sum of each token's activation
  /// (act_sums), which the consumers' column-sum path takes (mma_sync): from that tile, with one
  /// mma a k16 step and an A operand of ones, as the 16-bit 8-token tiles' consumers take them.
  CUTE_DEVICE static void convert_act(SharedStorage& s, Pipeline& pipe, int lane) {
    int const i = pipe.index;
    cutlass::arch::ClusterTransactionBarrier::wait(&s.act_full[i], pipe.phase);
    int const g = lane / 4;
    uint32_t const from = smem_address(s.act.data() + i * (TileM * TileK)) + g * 128;
    uint32_t const to = smem_address(s.act16.data() + i * (TileM * TileK)) + g * 128;
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      int const j = 2 * (lane % 4) + h;
      uint4 const x = lds128(from + ((j ^ g) << 4));
      uint4 const first = {e4m3x2_to_f16x2(x.x), e4m3x2_to_f16x2(x.y), e4m3x2_to_f16x2(x.z), e4m3x2_to_f16x2(x.w)};
      uint4 const last = {e4m3x2_to_f16x2(x.x >> 16), e4m3x2_to_f16x2(x.y >> 16), e4m3x2_to_f16x2(x.z >> 16),
                          e4m3x2_to_f16x2(x.w >> 16)};
      int const c = 2 * (j % 4);
      uint32_t const slot = to + (j / 4) * 1024;
      sts128(slot + ((c ^ g) << 4), first);
      sts128(slot + (((c + 1) ^ g) << 4), last);
    }
    __syncwarp();
    float sums[4][4] = {};  // (rows alike) tokens 2 (lane % 4) and 2 (lane % 4) + 1, four chains
    constexpr uint32_t kOnes = 0x3C003C00u;
    uint32_t const tile = to - g * 128 + (lane % 8) * 128;
    CUTE_UNROLL
    for (int kb = 0; kb < kKBlocks; ++kb) {
      CUTE_UNROLL
      for (int p = 0; p < 2; ++p) {
        uint32_t b[4];
        ldmatrix_x4(b, tile + kb * 1024 + (((4 * p + lane / 8) ^ (lane % 8)) << 4));
        mma_16816<cutlass::half_t>(sums[2 * p], {kOnes, kOnes, kOnes, kOnes}, {b[0], b[1]});
        mma_16816<cutlass::half_t>(sums[2 * p + 1], {kOnes, kOnes, kOnes, kOnes}, {b[2], b[3]});
      }
    }
    if (lane < 4) {
      *reinterpret_cast<float2*>(s.act_sums.data() + i * TileM + 2 * lane) =
          make_float2((sums[0][0] + sums[1][0]) + (sums[2][0] + sums[3][0]),
                      (sums[0][1] + sums[1][1]) + (sums[2][1] + sums[3][1]));
    }
    __syncwarp();
    if (lane == 0) {
      cutlass::arch::ClusterBarrier::arrive(&s.full[i]);
    }
    pipe.advance();
  }

  // a stage's k32 steps spread over up to four partial-sum sets (a chain of short wgmmas on one set
  // would run at their latency)
  static constexpr int kColumns = TileM * kBlocksN;
  static constexpr int kSets = kColumns <= 16 ? 4 : (kColumns <= 32 ? 2 : 1);
  /// Tiles whose partial sums would not fit beside the accumulators (more than 64 fp32 a thread)
  /// rescale instead: the wgmmas accumulate into the accumulators themselves, which hold the sum in
  /// units of the current group's scale; at a group change they are multiplied by s_prev / s_next,
  /// at the end by the last scale. One register set, the tensor core's accumulation over all of k.
  static constexpr bool kRescale = w4a8_rescales(TileN, TileM);
  static_assert(!kRescale || kBlocksN == 1, "the rescaling tiles are one block row (128 weight rows)");
  /// the smallest scale magnitude the rescaling divides by (a group of zero scale contributes
  /// nothing either way; the floor keeps the ratios finite)
  static constexpr float kScaleFloor = 0x1p-60f;

  /// Wide tiles (128 tokens and more): the two consumer warpgroups issue their stages' wgmmas in
  /// turns, warpgroup 0 first (named barrier kTurnBarrier + w: warpgroup w may issue). Issued at
  /// once, the two batches can interleave on the tensor core and end together; both warpgroups then
  /// wait for them and work on their sums (the rescaling, the promotion) while it idles. In turns,
  /// each warpgroup's batch runs after the other's, so that its wait and its work on the sums fall
  /// within the other's batch (and so does the conversion of its next stage, which the compiler
  /// places right before the wgmmas).
  static constexpr bool kTurns = TileM >= 128;
  static constexpr uint32_t kTurnBarrier = 4;  // and 5 (the kernel's named barriers are 1 to 3)
  struct Turns {
    int warp_group;
    /// before issuing stage `it` of the segment
    CUTE_DEVICE void take(int it) const {
      if (kTurns && (warp_group == 1 || it > 0)) {
        cutlass::arch::NamedBarrier::sync(kConsumerThreads, kTurnBarrier + warp_group);
      }
    }
    /// after issuing stage `it` of k_iters
    CUTE_DEVICE void pass(int it, int k_iters) const {
      if (kTurns && (warp_group == 0 || it + 1 < k_iters)) {
        cutlass::arch::NamedBarrier::arrive(kConsumerThreads, kTurnBarrier + 1 - warp_group);
      }
    }
  };

  /// frees the stage before stage i (its wgmmas have retired)
  CUTE_DEVICE static void release_previous(SharedStorage& s, int i, int ct) {
    WeightStream::release(s, i >= 1 ? i - 1 : i + Stages - 1, ct);
  }

  /// The group scales of stage i for a thread's rows `row` and row + 8 of each block row (a stage
  /// lies inside one group: its first k-block's scale row serves both).
  CUTE_DEVICE static void stage_scales(SharedStorage const& s, int i, int row, float (&now)[kBlocksN][2]) {
    CUTE_UNROLL
    for (int blk = 0; blk < kBlocksN; ++blk) {
      int const at = i * kKBlocks * TileN + blk * BLayout::kBlockN + row;
      now[blk][0] = float(s.scales.data()[at]);
      now[blk][1] = float(s.scales.data()[at + 8]);
    }
  }

  /// A consumer thread's share of a stage: its codes loaded from shared memory and converted into
  /// the stage's A fragments (the previous stage's wgmmas read the other buffer meanwhile), and its
  /// rows' group scales (rows g and g + 8 of each block row; a stage lies inside one group).
  template <class FragmentA>
  CUTE_DEVICE static void convert_stage(SharedStorage const& s, int i, int ct, FragmentA& frag, float (&now)[kBlocksN][2]) {
    using namespace cute;
    uint4 packed[kKBlocks][kBlocksN];
    CUTE_UNROLL
    for (int kb = 0; kb < kKBlocks; ++kb) {
      CUTE_UNROLL
      for (int blk = 0; blk < kBlocksN; ++blk) {
        packed[kb][blk] = *reinterpret_cast<uint4 const*>(
            s.b.data() + WeightStream::block_at(i, kb, blk) + BLayout::load_offset(ct, 0));
      }
    }
    stage_scales(s, i, (ct / 32) * 16 + (ct % 32) / 4, now);
    CUTE_UNROLL
    for (int kb = 0; kb < kKBlocks; ++kb) {
      CUTE_UNROLL
      for (int blk = 0; blk < kBlocksN; ++blk) {
        uint32_t const words[4] = {packed[kb][blk].x, packed[kb][blk].y, packed[kb][blk].z, packed[kb][blk].w};
        CUTE_UNROLL
        for (int j = 0; j < BLayout::kKSteps; ++j) {
          Tensor a = recast<uint32_t>(frag(_, blk, kb * BLayout::kKSteps + j));
          uint32_t r0, r1, r2, r3;
          Convert4BitE4m3::convert(words[2 * j], r0, r1);
          Convert4BitE4m3::convert(words[2 * j + 1], r2, r3);
          a(0) = r0;
          a(1) = r1;
          a(2) = r2;
          a(3) = r3;
        }
      }
    }
  }

  /// Consumers (two warpgroups, thread ct in 0..255): accum = the sum over the next k_iters stages.
  CUTE_DEVICE static void mma(Params const&, SharedStorage& s, Pipeline& pipe, int k_iters, Accumulator& accum, int ct) {
    if constexpr (kSyncMma) {
      mma_sync(s, pipe, k_iters, accum, ct);
    } else {
      mma_wgmma(s, pipe, k_iters, accum, ct);
    }
  }

  // NOTE: tiles of 8 tokens (decode) run mma.sync m16n8k16 on fp16 instead of wgmma, as the 16-bit
  // mainloop's do: a warp's 16 rows of the fp8 wgmma A fragments hold, per k16 step, the rows and k
  // of one m16n8k16 A fragment (the k in another order: its k 2q, 2q + 1 | 2q + 8, 2q + 9 are the
  // step's 4q ... 4q + 3), converted to the fp16 values 64 + q (Convert4BitE4m3::to_f16_biased,
  // exact); the activation producer's warp has converted the stage's e4m3 tile to fp16 in the same
  // order (convert_act: once a CTA, where each consumer warp converting its own B fragments cost 5
  // of its instructions a k16 step), read by ldmatrix, and the stage's sums of each token's
  // activation (an mma a k16 step with an A operand of ones, there, where the 16-bit tiles' consumer
  // warps each issue it); when the stage's fp32 partial sums are added in, (64 + 8) times those
  // sums come off before the group scale: the 16-bit mainloop's column sums
  // (collective/mma_sync_group_partials.hpp), with the code 4 bits up under fp16's 64.0 where bf16
  // puts it under 128, so that the partial sums are about 9 times the result's terms
  // ((64 + 8) / |q - 8|), not the 130 times that 1024 + q would give. (mma.sync on e4m3 is itself an
  // unpack to fp16 and two HMMA on sm_90: SASS.)
  static constexpr bool kSyncMma = sm90_sync_mma(TileM);
  using SyncPartials = GroupPartials<kBlocksN, 1, true, float, 2>;  // partial sums for alternate k16 steps

  CUTE_DEVICE static void mma_sync(SharedStorage& s, Pipeline& pipe, int k_iters, Accumulator& accum, int ct) {
    using Convert = Convert4BitE4m3;
    constexpr float kOffset = column_sum_offset<Convert>(Weight::kZeroPoint);  // -(64 + 8)
    SyncPartials r;
    zero(r.acc);
    r.clear_group();
    CUTE_UNROLL
    for (int blk = 0; blk < kBlocksN; ++blk) {
      r.offset[blk][0] = r.offset[blk][1] = kOffset;
    }
    int const lane = ct % 32;
    int const row = (ct / 32) * 16 + lane / 4;  // the A fragment rows g and g + 8 of the warp's 16 in each block row
    // the fp16 activation (convert_act), a k-block's ldmatrix.x4 of two k16 steps: lane l addresses
    // token l % 8 in matrix l / 8 (chunk 4 p + l / 8 of the token's 128 bytes, stored at that ^ token)
    static_assert(TileM * TileK == 1024 && kKBlocks * BLayout::kKSteps * 2 == 8 && kConvertsAct);
    uint32_t const act = smem_address(s.act16.data()) + (lane % 8) * 128;
    int const chunk = lane / 8;
    int const swizzle = lane % 8;
    for (int it = 0; it < k_iters; ++it) {
      int const i = pipe.index;
      cutlass::arch::ClusterTransactionBarrier::wait(&s.full[i], pipe.phase);
      stage_scales(s, i, row, r.scale);
      CUTE_UNROLL
      for (int kb = 0; kb < kKBlocks; ++kb) {
        uint32_t b[2][4];  // k16 steps 2p and 2p + 1: b[p][0..1] and b[p][2..3]
        CUTE_UNROLL
        for (int p = 0; p < 2; ++p) {
          ldmatrix_x4(b[p], act + (i * kKBlocks + kb) * 1024 + (((4 * p + chunk) ^ swizzle) << 4));
        }
        uint32_t words[kBlocksN][4];  // word j: the k16 step j of the k-block (k32 step j / 2, half j % 2)
        CUTE_UNROLL
        for (int blk = 0; blk < kBlocksN; ++blk) {
          uint4 const w = *reinterpret_cast<uint4 const*>(s.b.data() + WeightStream::block_at(i, kb, blk) +
                                                          BLayout::load_offset(ct, 0));
          words[blk][0] = w.x;
          words[blk][1] = w.y;
          words[blk][2] = w.z;
          words[blk][3] = w.w;
        }
        CUTE_UNROLL
        for (int j = 0; j < 4; ++j) {
          uint32_t const bj[2] = {b[j / 2][2 * (j % 2)], b[j / 2][2 * (j % 2) + 1]};
          CUTE_UNROLL
          for (int blk = 0; blk < kBlocksN; ++blk) {
            uint32_t a[4];
            Convert::to_f16_biased(words[blk][j], a);
            mma_16816<cutlass::half_t>(r.part[j % 2][blk][0], a, bj);
          }
        }
      }
      float2 const sums = *reinterpret_cast<float2 const*>(s.act_sums.data() + i * TileM + 2 * (lane % 4));
      r.sums[0][0] = sums.x;  // (convert_act: tokens 2 (lane % 4), 2 (lane % 4) + 1)
      r.sums[0][1] = sums.y;
      r.flush();
      __syncwarp();
      WeightStream::release(s, i, ct);
      pipe.advance();
    }
    r.copy_to(accum);
  }

  CUTE_DEVICE static void mma_wgmma(SharedStorage& s, Pipeline& pipe, int k_iters, Accumulator& accum, int ct) {
    using namespace cute;
    TiledMma tiled_mma;
    Tensor sAct = make_tensor(make_smem_ptr(s.act.data()), SmemLayoutAct{});  // (TileM,TileK,PIPE)
    auto wg_slice = tiled_mma.get_slice((ct / 128) * 128);
    Tensor tCrB = wg_slice.make_fragment_B(wg_slice.partition_B(sAct));        // (MMA,1,kKSteps,PIPE)
    using FragmentA = decltype(make_tensor<ElementA>(partition_shape_A(tiled_mma, Shape<Int<TileN>, Int<TileK>>{})));
    FragmentA tCrA[2];                                                           // (MMA,kBlocksN,kKSteps) each
    static_assert(decltype(size<1>(FragmentA{}))::value == kBlocksN &&
                  decltype(size<2>(FragmentA{}))::value == kKSteps);
    clear(accum);
    if constexpr (kRescale) {
      mma_rescaled(s, pipe, k_iters, accum, ct, tiled_mma, tCrB, tCrA);
    } else {
      mma_promoted(s, pipe, k_iters, accum, ct, tiled_mma, tCrB, tCrA);
    }
  }

  /// The wide tiles: accum holds the sum in units of the last stage's group scale.
  template <class TensorB, class FragmentA>
  CUTE_DEVICE static void mma_rescaled(SharedStorage& s, Pipeline& pipe, int k_iters, Accumulator& accum, int ct,
                                       TiledMma& tiled_mma, TensorB const& tCrB, FragmentA (&tCrA)[2]) {
    using namespace cute;
    float scale[2] = {1.f, 1.f};  // the group scales accum is in units of, rows g and g + 8
    bool held = false;  // the previous stage's shared memory is still held
    Turns const turns{ct / 128};
    int it = 0;

    // accum *= factor[row half]
    auto multiply = [&](float const (&factor)[2]) {
      CUTE_UNROLL
      for (int v = 0; v < size(accum); ++v) {
        accum(v) *= factor[(v / 2) % 2];
      }
    };

    auto stage = [&](auto buffer) {
      constexpr int P = decltype(buffer)::value;  // A-register buffer
      int const i = pipe.index;
      cutlass::arch::ClusterTransactionBarrier::wait(&s.full[i], pipe.phase);
      float now[1][2];
      convert_stage(s, i, ct, tCrA[P], now);
      float ratio[2];
      bool same = true;  // the stage is in the previous one's group (groups above 128, one per channel)
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        now[0][h] = fabsf(now[0][h]) < kScaleFloor ? kScaleFloor : now[0][h];
        ratio[h] = __fdividef(scale[h], now[0][h]);
        same = same && now[0][h] == scale[h];
      }
      // the previous stage's wgmmas have retired: free its shared memory, change units (unless no
      // row of the warp changes group)
      warpgroup_wait<0>();
      warpgroup_fence_operand(accum);
      if (held) {
        release_previous(s, i, ct);
        if (!__all_sync(0xffffffffu, same)) {
          multiply(ratio);
        }
      }
      warpgroup_fence_operand(accum);
      turns.take(it);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      CUTE_UNROLL
      for (int j = 0; j < kKSteps; ++j) {
        gemm(tiled_mma, tCrA[P](_, _, j), tCrB(_, _, j, i), accum);
      }
      warpgroup_commit_batch();
      turns.pass(it++, k_iters);
      warpgroup_fence_operand(accum);
      scale[0] = now[0][0];
      scale[1] = now[0][1];
      held = true;
      pipe.advance();
    };

    alternate_buffers(k_iters, stage);
    warpgroup_wait<0>();
    warpgroup_fence_operand(accum);
    if (held) {
      release_previous(s, pipe.index, ct);
      multiply(scale);
    }
  }

  /// The other tiles: each stage's sums promoted into fp32 times its group scale.
  template <class TensorB, class FragmentA>
  CUTE_DEVICE static void mma_promoted(SharedStorage& s, Pipeline& pipe, int k_iters, Accumulator& accum, int ct,
                                       TiledMma& tiled_mma, TensorB const& tCrB, FragmentA (&tCrA)[2]) {
    using namespace cute;
    Accumulator partial[kSets];
    float scale[kBlocksN][2];  // the group scales of the stage in the partial sums, rows g and g + 8
    bool held = false;  // the previous stage's shared memory is still held (and its sums not added)
    Turns const turns{ct / 128};
    int it = 0;

    // accum += scale * (the partial sums), in a fixed order
    auto add = [&]() {
      CUTE_UNROLL
      for (int a = 0; a < kSets; ++a) {
        warpgroup_fence_operand(partial[a]);
      }
      CUTE_UNROLL
      for (int blk = 0; blk < kBlocksN; ++blk) {
        CUTE_UNROLL
        for (int v = 0; v < TileM / 2; ++v) {
          int const at = v + blk * (TileM / 2);
          float sum = partial[0](at);
          CUTE_UNROLL
          for (int a = 1; a < kSets; ++a) {
            sum += partial[a](at);
          }
          accum(at) = fmaf(scale[blk][(v / 2) % 2], sum, accum(at));
        }
      }
    };

    auto stage = [&](auto buffer) {
      constexpr int P = decltype(buffer)::value;  // A-register buffer
      int const i = pipe.index;
      cutlass::arch::ClusterTransactionBarrier::wait(&s.full[i], pipe.phase);
      float now[kBlocksN][2];
      convert_stage(s, i, ct, tCrA[P], now);
      // the previous stage's wgmmas have retired: add its sums, free its shared memory
      warpgroup_wait<0>();
      if (held) {
        release_previous(s, i, ct);
        add();
      }
      CUTE_UNROLL
      for (int a = 0; a < kSets; ++a) {
        warpgroup_fence_operand(partial[a]);
      }
      turns.take(it);
      warpgroup_arrive();
      CUTE_UNROLL
      for (int j = 0; j < kKSteps; ++j) {
        tiled_mma.accumulate_ = j < kSets ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
        gemm(tiled_mma, tCrA[P](_, _, j), tCrB(_, _, j, i), partial[j % kSets]);
      }
      warpgroup_commit_batch();
      turns.pass(it++, k_iters);
      CUTE_UNROLL
      for (int a = 0; a < kSets; ++a) {
        warpgroup_fence_operand(partial[a]);
      }
      CUTE_UNROLL
      for (int blk = 0; blk < kBlocksN; ++blk) {
        scale[blk][0] = now[blk][0];
        scale[blk][1] = now[blk][1];
      }
      held = true;
      pipe.advance();
    };

    alternate_buffers(k_iters, stage);
    warpgroup_wait<0>();
    if (held) {
      release_previous(s, pipe.index, ct);
      add();
    }
  }
};

}  // namespace quantgemm
