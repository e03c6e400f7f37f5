/*! \file
    \brief sm90 mixed-input mainloop: bulk copies of the prepacked weight and its group scales, a
           TMA tensor load of the activation, the weight upconverted in registers and fed to wgmma
           as its register-sourced operand (tiles of 8 tokens: to mma.sync) (the transposed problem
           out^T = W a^T):

             acc[n, m] = sum_k bf16((q[n, k] - zero) * s[k / group, n]) * a[m, k]      (fp32)

    A CTA tile is TileN weight rows (one or two prepacked 128-row blocks; two consumer warpgroups of
    64 rows per block) x TileM activation rows. One stage holds, for TileK (64 or 128) of k, the
    tile's prepacked blocks with the group-scale row of each 64 of k (ScaleRows 2, groups of 32: two
    rows, one for each half of the block's k16 steps; one row for both k-blocks of a 128-deep stage
    inside one group), and a TileM x TileK activation tile (128B-swizzled, K-major: the wgmma B
    operand, shared by every block of the stage).
*/
#pragma once

#include <cuda.h>

#include "cute/arch/copy_sm90_tma.hpp"
#include "cute/arch/mma_sm90.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/numeric_types.h"

#include "quantgemm/arch/mma_sync.hpp"
#include "quantgemm/collective/mma_sync_group_partials.hpp"
#include "quantgemm/kernel/sm90_mixed_input_config.hpp"
#include "quantgemm/layout/prepacked_b.hpp"
#include "quantgemm/numeric/u4.hpp"
#include "quantgemm/numeric/u8.hpp"

namespace quantgemm {

/// Position in a ring of pipeline stages.
template <int Stages>
struct PipelineState {
  int index = 0;
  uint32_t phase = 0;
  CUTE_DEVICE void advance() {
    if (++index == Stages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

/// Runs stage(Int<0>{}), stage(Int<1>{}), stage(Int<0>{}), ... k_iters times: consecutive stages
/// alternate between two A-register buffers (the wgmmas of one read a buffer while the next is filled).
template <class Stage>
CUTE_DEVICE void alternate_buffers(int k_iters, Stage&& stage) {
  int it = 0;
  for (; it + 1 < k_iters; it += 2) {
    stage(cute::Int<0>{});
    stage(cute::Int<1>{});
  }
  if (it < k_iters) {  // an if, not a loop: buffer 0 must never directly follow buffer 0
    stage(cute::Int<0>{});
  }
}

/// The register-sourced wgmma of the mixed-input tiles: two warpgroups along the weight's rows (64
/// each), TileM tokens, TileK of k (the prepacked layouts follow its A operand).
template <class Element, int TileM, int TileK>
using Sm90RsTiledMma = decltype(cute::make_tiled_mma(
    cute::SM90::GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<TileM>, cute::Int<TileK>>>(),
    cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));

template <class Weight, class ElementA_, int TileN_, int TileM_, int TileK_, int Stages_, int ScaleRows_ = 1>
struct Sm90MmaBulkTmaGmmaRsMixedInput : Sm90MixedInputTile<Weight, ElementA_, TileN_, TileM_, TileK_, ScaleRows_> {
  using ElementA = ElementA_;  // activations, scales, zero points and output
  using ElementOut = ElementA;
  static_assert(cute::is_same_v<ElementA, cutlass::bfloat16_t> || cute::is_same_v<ElementA, cutlass::half_t>,
                "quantgemm: activations must be bf16 or fp16");
  static_assert(Weight::kBits == 4 || Weight::kBits == 8, "quantgemm: the mixed-input mainloop converts 4- or 8-bit codes");

  /// the tile's constants, parameters and shared storage (kernel/sm90_mixed_input_config.hpp)
  using Tile = Sm90MixedInputTile<Weight, ElementA, TileN_, TileM_, TileK_, ScaleRows_>;
  using Tile::TileN, Tile::TileM, Tile::TileK, Tile::ScaleRows, Tile::kKBlocks, Tile::kBlocksN, Tile::kActBytes,
      Tile::kGroupZeros, Tile::kConsumerThreads;
  using Params = typename Tile::Params;
  using SharedStorage = typename Tile::template Storage<Stages_>;

  using BLayout = PrepackedBLayout<Weight>;
  static_assert(BLayout::kBlockN == Tile::kBlockN && BLayout::kBlockK == Tile::kBlockK &&
                BLayout::kBlockBytes == Tile::kBlockBytes && BLayout::kThreads == kConsumerThreads,
                "the tile's blocks are the prepacked layout's");
  static constexpr int kKSteps = TileK / 16;
  static constexpr int Stages = Stages_;
  static_assert(ScaleRows == 1 || (ScaleRows == 2 && kKBlocks == 1 && BLayout::kKSteps % 2 == 0),
                "two scale rows a k-block (groups of 32) are for 64-deep stages");
  static constexpr int kConsumerWarps = kConsumerThreads / 32;
  using Pipeline = PipelineState<Stages>;

  using TiledMma = Sm90RsTiledMma<ElementA, TileM, TileK>;
  static_assert(cute::is_same_v<typename TiledMma::Atom::Traits::ALayout, typename BLayout::AtomALayout>,
                "the prepacked layout must follow this MMA's register-sourced operand");
  static_assert(cute::size(TiledMma{}) == kConsumerThreads);

  // (TileM, TileK, Stages), 128B-swizzled, K-major: SharedStorage::act
  using SmemLayoutAct = decltype(cute::tile_to_shape(
      cute::SM90::GMMA::Layout_K_SW128_Atom<ElementA>{},
      cute::make_shape(cute::Int<TileM>{}, cute::Int<TileK>{}, cute::Int<Stages>{})));

  // the TMA box of each k-block, (64, TileM), lands where the (unswizzled) layout puts it
  static_assert(cute::cosize_v<SmemLayoutAct> == TileM * TileK * Stages);
  static_assert(Stages == 1 || SmemLayoutAct{}.layout_b()(0, 0, 1) == TileM * TileK);
  static_assert(kKBlocks == 1 || SmemLayoutAct{}.layout_b()(0, BLayout::kBlockK, 0) == TileM * BLayout::kBlockK);

  /// Where block row blk's k-block kb of a stage lies in SharedStorage::b (bytes).
  CUTE_HOST_DEVICE static constexpr int block_at(int stage, int kb, int blk) {
    return ((stage * kBlocksN + blk) * kKBlocks + kb) * BLayout::kBlockBytes;
  }

  using Accumulator = decltype(cute::partition_fragment_C(
      TiledMma{}, cute::Shape<cute::Int<TileN>, cute::Int<TileM>>{}));  // (MMA, kBlocksN, 1)

  // Several producer threads fill each stage: one per prepacked block row of the tile (its weight
  // blocks and scales, load) and one for the activation tile (load_act). A single thread issuing
  // all of a stage's copies and their address arithmetic could not keep the stages full.
  static constexpr int kProducers = kBlocksN + 1;

  /// (Storage: this mainloop's SharedStorage, or one with the same barriers: the W4A8 mainloop's)
  template <class Storage>
  CUTE_DEVICE static void init_barriers(Storage& s) {
    for (int i = 0; i < Stages; ++i) {
      cutlass::arch::ClusterTransactionBarrier::init(&s.full[i], kProducers);
      cutlass::arch::ClusterBarrier::init(&s.empty[i], kConsumerWarps);
    }
    cutlass::arch::fence_barrier_init();
  }

  /// Whether both k-blocks of every 128-deep stage lie in one group (groups a multiple of 128, or
  /// one group): the stage then holds one scale (and zero-point) row per block row, its first slot's.
  CUTE_HOST_DEVICE static bool one_scale_row(Params const& p) {
    return kKBlocks == 2 && ScaleRows == 1 && (p.groups == 1 || p.group_k_blocks % 2 == 0);
  }

  /// A weight producer's position in the weight and scale streams of one block row of a tile.
  struct LoadCursor {
    uint8_t const* b;        ///< the next prepacked block of the row
    ElementA const* scales;  ///< the scale row of its group, at the block row's first column
    ElementA const* zeros;   ///< the zero-point row likewise (weights with group zeros)
    int kb;                  ///< the next block's k-block
    int group_left;          ///< blocks left in the current group
    uint32_t scale_bytes;    ///< the row's scale bytes inside N (0: the row lies past N)
    ElementA const* last_scales;  ///< ScaleRows 2: the last scale row (a block past the groups repeats it)
  };

  /// The cursor of block row blk of tile n_tile at k-block kb (in units of 64 of k).
  CUTE_DEVICE static LoadCursor cursor(Params const& p, int n_tile, int blk, int kb) {
    int const nb = n_tile * kBlocksN + blk;
    int const rows = p.N - nb * BLayout::kBlockN;
    int64_t const row = int64_t(kb / p.group_k_blocks) * ScaleRows * p.N + nb * BLayout::kBlockN;
    return LoadCursor{p.b + BLayout::block_offset_bytes(nb, kb, p.k_blocks * BLayout::kBlockK),
                      p.scales + row,
                      kGroupZeros ? p.zeros + row : nullptr,
                      kb,
                      p.group_k_blocks - kb % p.group_k_blocks,
                      rows <= 0 ? 0u : uint32_t((rows < BLayout::kBlockN ? rows : BLayout::kBlockN) * sizeof(ElementA)),
                      ScaleRows == 2 ? p.scales + int64_t(p.groups - 1) * p.N + nb * BLayout::kBlockN : nullptr};
  }

  /// Weight producer of block row blk (one thread): fills the next stage with the row's weight
  /// blocks and scale rows of the cursor's next kKBlocks k-blocks, stepping the cursor. A row past
  /// N is not loaded (only arrived for): the rows it would feed are never stored; of a row that
  /// straddles N only the scales inside N are (the weight rows past N are zero-padded, and never
  /// stored either). A k-block past the weight's blocks (an odd number of them) repeats the last
  /// weight block and scale row against activation columns that the TMA fills with zeros, so it
  /// adds finite values times zero.
  /// (Storage: this mainloop's SharedStorage, or one with the same weight members: the W4A8 mainloop's)
  template <class Storage>
  CUTE_DEVICE static void load(Params const& p, Storage& s, Pipeline& pipe, LoadCursor& c, int blk) {
    int const i = pipe.index;
    cutlass::arch::ClusterBarrier::wait(&s.empty[i], pipe.phase ^ 1u);
    int const rows = one_scale_row(p) ? 1 : kKBlocks;  // scale (and zero-point) rows copied per block row
    uint32_t const bytes =
        c.scale_bytes ? kKBlocks * BLayout::kBlockBytes + rows * (kGroupZeros ? 2 : 1) * ScaleRows * c.scale_bytes : 0;
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&s.full[i], bytes);
    if (c.scale_bytes) {
      // the stage's k-blocks of the row are contiguous in both memories: one copy, but for a
      // repeated last block
      if (kKBlocks == 1 || c.kb + 1 < p.k_blocks) {
        cute::SM90_BULK_COPY_G2S::copy(c.b, &s.full[i], s.b.data() + block_at(i, 0, blk), kKBlocks * BLayout::kBlockBytes);
      } else {
        CUTE_UNROLL
        for (int kb = 0; kb < kKBlocks; ++kb) {
          cute::SM90_BULK_COPY_G2S::copy(c.b, &s.full[i], s.b.data() + block_at(i, kb, blk), BLayout::kBlockBytes);
        }
      }
    }
    CUTE_UNROLL
    for (int kb = 0; kb < kKBlocks; ++kb) {
      int const slot = i * kKBlocks + kb;
      if (c.scale_bytes && kb < rows) {
        CUTE_UNROLL
        for (int h = 0; h < ScaleRows; ++h) {
          // (of a K that ends half-way through its last block, that block's second row repeats its first:
          // its codes and activation columns there are zeros)
          int64_t const next = h == 0 || c.scales + p.N > c.last_scales ? 0 : p.N;
          int const to = (slot * ScaleRows + h) * TileN + blk * BLayout::kBlockN;
          cute::SM90_BULK_COPY_G2S::copy(c.scales + next, &s.full[i], s.scales.data() + to, c.scale_bytes);
          if constexpr (kGroupZeros) {
            cute::SM90_BULK_COPY_G2S::copy(c.zeros + next, &s.full[i], s.zeros.data() + to, c.scale_bytes);
          }
        }
      }
      if (kKBlocks == 1 || ++c.kb < p.k_blocks) {
        c.b += BLayout::kBlockBytes;
        if (--c.group_left == 0) {
          c.group_left = p.group_k_blocks;
          c.scales += ScaleRows * p.N;
          if constexpr (kGroupZeros) {
            c.zeros += ScaleRows * p.N;
          }
        }
      }
    }
    pipe.advance();
  }

  static constexpr bool kConvertsAct = false;  ///< (the W4A8 8-token tiles' activation converter)

  /// Activation producer (one thread): fills the next stage with the activation tile of k from k,
  /// rows [m0, m0 + TileM) (rows past M and columns past K read as zeros).
  CUTE_DEVICE static void load_act(CUtensorMap const* tma_act, SharedStorage& s, Pipeline& pipe, int k, int m0) {
    int const i = pipe.index;
    cutlass::arch::ClusterBarrier::wait(&s.empty[i], pipe.phase ^ 1u);
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&s.full[i], kActBytes);
    CUTE_UNROLL
    for (int kb = 0; kb < kKBlocks; ++kb) {
      int const slot = i * kKBlocks + kb;
      cute::SM90_TMA_LOAD_2D::copy(tma_act, &s.full[i], static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL),
                                   s.act.data() + slot * (TileM * BLayout::kBlockK), k + kb * BLayout::kBlockK, m0);
    }
    pipe.advance();
  }

  // NOTE: each stage is converted whole into one of two A-register buffers and its k16 wgmmas are
  // issued back to back under one fence and one commit, so that converting stage s + 1 overlaps
  // the wgmmas of stage s. Narrow tiles also spread the k16 steps over independent accumulator
  // sets (summed at the end, in a fixed order): a chain of short wgmmas on one accumulator would
  // run at the wgmma's latency rather than its throughput.
  static constexpr int kABuffers = 2;
  // the consumers hold the kABuffers stages their wgmmas read while they wait for the next one
  static_assert(Stages > kABuffers, "a tile needs room for three stages beside its epilogue and partials");
  // a thread's 128-bit loads of each block, and the converter of its codes
  static constexpr int kLoads = BLayout::kLoads;
  using Convert = cute::conditional_t<Weight::kBits == 4, Convert4Bit<ElementA>, Convert8Bit<ElementA>>;
  static constexpr int kAccumulatorsPerKBlock =
      (TileM * kBlocksN) <= 16 ? 8 : ((TileM * kBlocksN) <= 32 ? 4 : ((TileM * kBlocksN) <= 64 ? 2 : 1));
  // (128-deep stages hold twice the A registers: a quarter of the sets)
  static constexpr int kAccumulators =
      kKBlocks == 1 ? kAccumulatorsPerKBlock : (kAccumulatorsPerKBlock >= 4 ? kAccumulatorsPerKBlock / 4 : 1);

  /// The converter's constants of a thread's two weight rows g and g + 8 (registers {a0a1, a2a3,
  /// a4a5, a6a7} of an A fragment hold rows {g, g + 8, g, g + 8}), from the stage's scale (and
  /// zero-point) rows at element `at` (row g).
  CUTE_DEVICE static void row_constants(SharedStorage const& s, int at, typename Convert::Pair (&scale)[4],
                                        typename Convert::Offset (&offset)[4]) {
    uint16_t const* scales = reinterpret_cast<uint16_t const*>(s.scales.data());
    scale[0] = scale[2] = Convert::splat(scales[at]);
    scale[1] = scale[3] = Convert::splat(scales[at + 8]);
    if constexpr (kGroupZeros) {
      uint16_t const* zeros = reinterpret_cast<uint16_t const*>(s.zeros.data());
      offset[0] = offset[2] = Convert::offset_of(zeros[at]);
      offset[1] = offset[3] = Convert::offset_of(zeros[at + 8]);
    } else {
      CUTE_UNROLL
      for (int r = 0; r < 4; ++r) {
        offset[r] = Convert::fixed_offset();
      }
    }
  }

  /// Consumers (two warpgroups, thread ct in 0..255): accum = the sum over the next k_iters stages.
  CUTE_DEVICE static void mma(Params const& p, SharedStorage& s, Pipeline& pipe, int k_iters, Accumulator& accum,
                              int ct) {
    // the scale rows of a stage's k-block kb are those of its k-block kb & scale_kb
    int const scale_kb = one_scale_row(p) ? 0 : kKBlocks - 1;
    if constexpr (kSyncMma) {
      // (a loop of its own for each: a run-time choice inside the loop costs the predicated-off
      // flush of the first k-block every stage)
      if (scale_kb == 0) {
        mma_sync<0>(s, pipe, k_iters, accum, ct);
      } else {
        mma_sync<kKBlocks - 1>(s, pipe, k_iters, accum, ct);
      }
    } else {
      mma_wgmma(s, pipe, k_iters, accum, ct, scale_kb);
    }
  }

  // NOTE: tiles of 8 tokens (decode) run mma.sync m16n8k16 instead of wgmma. A warp's 16 rows of
  // the wgmma A fragments are the m16n8k16 A fragment, register for register (the same prepacked
  // layout), and its accumulators are laid out alike (the same epilogue); the activation's B
  // fragments come from the swizzled TMA tile by ldmatrix. Measured on the H200: a wgmma m64n8k16
  // occupies the SM's tensor pipe for 13 cycles (as long as an m64n16k16) where the four mma.sync
  // that do the same work take 6, and a warp converts and multiplies each k16 step in its own
  // time, with no warpgroup batch to wait for and no second A-register buffer.
  // The group scales then go onto fp32 partial sums, once per scale row
  // (collective/mma_sync_group_partials.hpp): the codes need no packed multiply, and 4-bit codes
  // stay biased (bf16 128 + q, fp16 64 + q), and so do 8-bit codes under fp16 (1024 + q: the
  // converters' kSum constants), with the activation's column sums taking the bias and zero point
  // off (one LOP3 or PRMT a pair of codes in all). The weight is s (q - z) unrounded, as in the
  // sm80 kernels.
  static constexpr bool kSyncMma = sm90_sync_mma(TileM);
  static constexpr int kSyncSets = 2;  // partial sums per block row, for alternate k16 steps
  static constexpr bool kColumnSums = Convert::kColumnSums;
  using SyncOffset = cute::conditional_t<kColumnSums, float, typename Convert::Offset>;
  using Partials = GroupPartials<kBlocksN, 1, kColumnSums, SyncOffset, kSyncSets>;

  /// The scales (and the converter's offsets) of a thread's rows g and g + 8 of each block row, from
  /// the stage's scale (and zero-point) rows at element `at` (block row 0, row g).
  CUTE_DEVICE static void load_group(SharedStorage const& s, int at, Partials& r) {
    uint16_t const* scales = reinterpret_cast<uint16_t const*>(s.scales.data());
    uint16_t const* zeros = reinterpret_cast<uint16_t const*>(s.zeros.data());
    CUTE_UNROLL
    for (int blk = 0; blk < kBlocksN; ++blk) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        int const x = at + blk * BLayout::kBlockN + 8 * h;
        r.scale[blk][h] = to_float<ElementA>(scales[x]);
        if constexpr (kColumnSums) {
          if constexpr (kGroupZeros) {
            r.offset[blk][h] = column_sum_offset<Convert>(to_float<ElementA>(zeros[x]));
          } else {
            constexpr float kOffset = column_sum_offset<Convert>(Weight::kZeroPoint);
            r.offset[blk][h] = kOffset;
          }
        } else if constexpr (kGroupZeros) {
          r.offset[blk][h] = Convert::offset_of(zeros[x]);
        } else {
          r.offset[blk][h] = Convert::fixed_offset();
        }
      }
    }
  }

  /// ScaleKb: the scale rows of a stage's k-block kb are those of its k-block kb & ScaleKb (0: one
  /// row for the stage, loaded and flushed once).
  template <int ScaleKb>
  CUTE_DEVICE static void mma_sync(SharedStorage& s, Pipeline& pipe, int k_iters, Accumulator& accum, int ct) {
    constexpr int kRowSteps = BLayout::kKSteps / ScaleRows;  // k16 steps of a k-block under one scale row
    Partials r;
    zero(r.acc);
    r.clear_group();
    int const lane = ct % 32;
    int const row = (ct / 32) * 16 + lane / 4;  // the A fragment rows g and g + 8 of the warp's 16
    // ldmatrix.x4 of two k16 steps: lane l addresses token l % 8 in matrix l / 8 (a 16-byte chunk
    // of 8 k); a k-block of 8 tokens is one 128B swizzle atom, its row r's chunk c stored at c ^ r
    uint32_t const act = smem_address(s.act.data()) + (lane % 8) * 128;
    int const chunk = lane / 8;
    int const swizzle = lane % 8;
    static_assert(TileM * BLayout::kBlockK * sizeof(ElementA) == 1024);
    for (int it = 0; it < k_iters; ++it) {
      int const i = pipe.index;
      cutlass::arch::ClusterTransactionBarrier::wait(&s.full[i], pipe.phase);
      CUTE_UNROLL
      for (int kb = 0; kb < kKBlocks; ++kb) {
        int const slot = i * kKBlocks + kb;
        uint32_t b[2][4];  // k16 steps 2p and 2p + 1: b[p][0..1] and b[p][2..3]
        CUTE_UNROLL
        for (int p = 0; p < 2; ++p) {
          ldmatrix_x4(b[p], act + slot * 1024 + (((4 * p + chunk) ^ swizzle) << 4));
        }
        uint32_t words[kBlocksN][4 * kLoads];
        CUTE_UNROLL
        for (int blk = 0; blk < kBlocksN; ++blk) {
          CUTE_UNROLL
          for (int l = 0; l < kLoads; ++l) {
            uint4 const w = *reinterpret_cast<uint4 const*>(
                s.b.data() + block_at(i, kb, blk) + BLayout::load_offset(ct, l));
            words[blk][4 * l] = w.x;
            words[blk][4 * l + 1] = w.y;
            words[blk][4 * l + 2] = w.z;
            words[blk][4 * l + 3] = w.w;
          }
        }
        CUTE_UNROLL
        for (int h = 0; h < ScaleRows; ++h) {
          if (kb == 0 || ScaleKb != 0) {
            load_group(s, ((i * kKBlocks + (kb & ScaleKb)) * ScaleRows + h) * TileN + row, r);
          }
          CUTE_UNROLL
          for (int j = h * kRowSteps; j < (h + 1) * kRowSteps; ++j) {
            uint32_t const bj[2] = {b[j / 2][2 * (j % 2)], b[j / 2][2 * (j % 2) + 1]};
            if constexpr (kColumnSums) {
              r.template add_column_sums<ElementA>(0, bj);
            }
            CUTE_UNROLL
            for (int blk = 0; blk < kBlocksN; ++blk) {
              SyncOffset const offset[4] = {r.offset[blk][0], r.offset[blk][1], r.offset[blk][0], r.offset[blk][1]};
              uint32_t a[4];
              if constexpr (kColumnSums && Weight::kBits == 4) {
                Convert::biased(words[blk][j], a);
              } else if constexpr (kColumnSums) {
                Convert::biased(words[blk][2 * j], words[blk][2 * j + 1], a);
              } else if constexpr (Weight::kBits == 4) {
                Convert::exact(words[blk][j], offset, a);
              } else {
                Convert::exact(words[blk][2 * j], words[blk][2 * j + 1], offset, a);
              }
              mma_16816<ElementA>(r.part[j % kSyncSets][blk][0], a, bj);
            }
          }
          // the scale row ends here, but at the first k-block of a 128-deep stage inside one group
          if (h + 1 < ScaleRows || kb + 1 == kKBlocks || ScaleKb != 0) {
            r.flush();
          }
        }
      }
      __syncwarp();
      release(s, i, ct);
      pipe.advance();
    }
    r.copy_to(accum);
  }

  CUTE_DEVICE static void mma_wgmma(SharedStorage& s, Pipeline& pipe, int k_iters, Accumulator& accum, int ct,
                                    int scale_kb) {
    using namespace cute;
    TiledMma tiled_mma;
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
    Tensor sAct = make_tensor(make_smem_ptr(s.act.data()), SmemLayoutAct{});       // (TileM,TileK,PIPE)
    auto wg_slice = tiled_mma.get_slice((ct / 128) * 128);
    Tensor tCrB = wg_slice.make_fragment_B(wg_slice.partition_B(sAct));             // (MMA,1,kKSteps,PIPE)
    using FragmentA = decltype(make_tensor<ElementA>(partition_shape_A(tiled_mma, Shape<Int<TileN>, Int<TileK>>{})));
    FragmentA tCrA[kABuffers];                                                        // (MMA,kBlocksN,kKSteps) each
    static_assert(size<1>(FragmentA{}) == kBlocksN && size<2>(FragmentA{}) == kKSteps);
    Accumulator sets[kAccumulators];
    CUTE_UNROLL
    for (int a = 0; a < kAccumulators; ++a) {
      clear(sets[a]);
    }

    // this thread's weight rows in each block: the wgmma A fragment rows g and g + 8 of its warp
    int const row = (ct / 32) * 16 + (ct % 32) / 4;
    int pending = 0;  // stages before the current one still read by wgmmas in flight

    auto stage = [&](auto buffer) {
      constexpr int P = decltype(buffer)::value;
      int const i = pipe.index;
      cutlass::arch::ClusterTransactionBarrier::wait(&s.full[i], pipe.phase);
      uint4 packed[kKBlocks][kBlocksN][kLoads];
      typename Convert::Pair scale[kKBlocks][kBlocksN][ScaleRows][4];
      typename Convert::Offset offset[kKBlocks][kBlocksN][ScaleRows][4];  // -(magic + zero point)
      CUTE_UNROLL
      for (int kb = 0; kb < kKBlocks; ++kb) {
        CUTE_UNROLL
        for (int blk = 0; blk < kBlocksN; ++blk) {
          CUTE_UNROLL
          for (int l = 0; l < kLoads; ++l) {
            packed[kb][blk][l] = *reinterpret_cast<uint4 const*>(
                s.b.data() + block_at(i, kb, blk) + BLayout::load_offset(ct, l));
          }
          CUTE_UNROLL
          for (int h = 0; h < ScaleRows; ++h) {
            row_constants(s, ((i * kKBlocks + (kb & scale_kb)) * ScaleRows + h) * TileN + blk * BLayout::kBlockN + row,
                          scale[kb][blk][h], offset[kb][blk][h]);
          }
        }
      }
      // the wgmmas that read buffer P, kABuffers stages ago, have retired; so has the stage before
      warpgroup_wait<kABuffers - 1>();
      if (pending == kABuffers) {
        release(s, i >= pending ? i - pending : i + Stages - pending, ct);
        --pending;
      }
      CUTE_UNROLL
      for (int kb = 0; kb < kKBlocks; ++kb) {
        CUTE_UNROLL
        for (int blk = 0; blk < kBlocksN; ++blk) {
          uint32_t words[4 * kLoads];
          CUTE_UNROLL
          for (int l = 0; l < kLoads; ++l) {
            uint4 const w = packed[kb][blk][l];
            words[4 * l] = w.x;
            words[4 * l + 1] = w.y;
            words[4 * l + 2] = w.z;
            words[4 * l + 3] = w.w;
          }
          CUTE_UNROLL
          for (int j = 0; j < BLayout::kKSteps; ++j) {
            Tensor a = recast<uint32_t>(tCrA[P](_, blk, kb * BLayout::kKSteps + j));
            uint32_t converted[4];
            int const g = j * ScaleRows / BLayout::kKSteps;  // the scale row of this k16 step
            if constexpr (Weight::kBits == 4) {
              Convert::convert(words[j], offset[kb][blk][g], scale[kb][blk][g], converted);
            } else {
              Convert::convert(words[2 * j], words[2 * j + 1], offset[kb][blk][g], scale[kb][blk][g], converted);
            }
            CUTE_UNROLL
            for (int r = 0; r < 4; ++r) {
              a(r) = converted[r];
            }
          }
        }
      }
      CUTE_UNROLL
      for (int a = 0; a < kAccumulators; ++a) {
        warpgroup_fence_operand(sets[a]);
      }
      warpgroup_arrive();
      CUTE_UNROLL
      for (int j = 0; j < kKSteps; ++j) {
        gemm(tiled_mma, tCrA[P](_, _, j), tCrB(_, _, j, i), sets[(P * kKSteps + j) % kAccumulators]);
      }
      warpgroup_commit_batch();
      CUTE_UNROLL
      for (int a = 0; a < kAccumulators; ++a) {
        warpgroup_fence_operand(sets[a]);
      }
      ++pending;
      pipe.advance();
    };

    static_assert(kABuffers == 2);
    alternate_buffers(k_iters, stage);
    warpgroup_wait<0>();
    for (; pending > 0; --pending) {
      release(s, pipe.index >= pending ? pipe.index - pending : pipe.index + Stages - pending, ct);
    }
    CUTE_UNROLL
    for (int v = 0; v < size(accum); ++v) {
      float sum = sets[0](v);
      CUTE_UNROLL
      for (int a = 1; a < kAccumulators; ++a) {
        sum += sets[a](v);
      }
      accum(v) = sum;
    }
  }

  template <class Storage>
  CUTE_DEVICE static void release(Storage& s, int stage, int ct) {
    if (ct % 32 == 0) {
      cutlass::arch::ClusterBarrier::arrive(&s.empty[stage]);
    }
  }
};

}  // namespace quantgemm
