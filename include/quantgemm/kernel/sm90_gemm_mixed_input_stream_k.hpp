/*! \file
    \brief Persistent warp-specialized sm90 mixed-input GEMM with stream-K:

             out[m, n] = cs[n] * ts[m] * sum_k a[m, k] * ((q[n, k] - zero) * s[k / group, n])
             (fp32 accumulate; cs, ts optional fp32 channel and token scales, else 1)

    Warpgroup 0 holds the producers (in warps 0 and 3, one thread per 128-row block row issues its
    weight and scale copies; in warp 2, one thread the activation loads) and the stream-K
    signalling warp (warp 1); warpgroups 1 and 2 run the mainloop and the epilogue. The accumulator
    tile (TileN weight rows x TileM activation rows) is written, transposed, into shared memory as
    bf16 and stored with one TMA store; tiles split by stream-K are first reduced through the fp32
    workspace (stream_k.hpp).

    ClusterK > 1: split-K over thread-block clusters instead of stream-K. Each tile is computed by
    the ClusterK CTAs of one cluster, rank r taking the r-th of ClusterK equal k-ranges; the ranks
    above 0 store their fp32 partials straight into rank 0's shared memory (st.async, counted by a
    transaction barrier there), and rank 0 adds them in rank order (deterministic) and stores the
    tile. No global scratch, no release/acquire round trips: for layers with fewer tiles than SMs.

    Programmatic dependent launch: a launch that allows it may start while the kernel before it in
    the stream is still finishing (on the SMs that kernel has left). Every CTA lets the next kernel
    start as soon as it runs; the weight producers start at once (the weight and scales are data
    that kernels before it in the stream do not write), every other thread waits for the previous
    kernel before its first global access (activation, counters, workspace, output).
*/
#pragma once

#include <cuda.h>

#include "cute/arch/cluster_sm90.hpp"
#include "cute/arch/copy_sm90_desc.hpp"
#include "cute/arch/copy_sm90_tma.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/numeric_conversion.h"

#include "quantgemm/arch/grid_dependency.hpp"
#include "quantgemm/arch/mma_sync.hpp"
#include "quantgemm/collective/sm90_mma_bulk_tma_gmma_rs_mixed_input.hpp"
#include "quantgemm/collective/sm90_mma_w4a8.hpp"
#include "quantgemm/kernel/sm90_mixed_input_config.hpp"
#include "quantgemm/kernel/stream_k.hpp"

// QUANTGEMM_TIMELINE: a diagnostic build in which every CTA records when it started, got its first
// stage, finished its first and last mainloop segment, its last fixup, and exited (%globaltimer,
// ns), with its segment count and clock64 lifetime, in the workspace's timeline region
// (kernel/timeline.hpp; quantgemm.bench.timeline reads it). Plain stores, so that
// calls replayed back to back in a CUDA graph keep their timing (a printf per CTA costs about
// 250 us a call there).
#if defined(QUANTGEMM_TIMELINE)
#define QG_TIMELINE(...) __VA_ARGS__
#else
#define QG_TIMELINE(...)
#endif

namespace quantgemm {

CUTE_DEVICE uint64_t qg_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Stores 16 bytes into the shared memory of CTA `rank` of the cluster at `address` (an address in
/// this CTA's shared memory window), completing that many transaction bytes on its barrier at
/// `barrier` (likewise).
CUTE_DEVICE void store_remote_v4(uint32_t address, float4 v, uint32_t barrier, uint32_t rank) {
  uint32_t const to = cute::set_block_rank(address, rank);
  uint32_t const bar = cute::set_block_rank(barrier, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n"
               ::"r"(to), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
               : "memory");
}

/// The mainloop of a schedule: e4m3 activations take the W4A8 one, any other the 16-bit one.
template <class Config>
using Sm90MixedInputMainloop = cute::conditional_t<
    Config::kE4m3, Sm90MmaW4A8<typename Config::Element, Config::TileN, Config::TileM, Config::kStages>,
    Sm90MmaBulkTmaGmmaRsMixedInput<typename Config::Weight, typename Config::Element, Config::TileN, Config::TileM,
                                   Config::Tile::TileK, Config::kStages, Config::ScaleRows>>;

/// The device side of one schedule (kernel/sm90_mixed_input_config.hpp: what the host sees of it).
template <class Config>
struct Sm90GemmMixedInputStreamK {
  using Mainloop = Sm90MixedInputMainloop<Config>;
  static_assert(cute::is_same_v<typename Mainloop::SharedStorage,
                                typename Config::Tile::template Storage<Config::kStages>>);
  static constexpr int ClusterK = Config::ClusterK;  ///< > 1: split-K over clusters of ClusterK CTAs
  using Segments = cute::conditional_t<(ClusterK > 1), SplitSegment<ClusterK>, SegmentIterator>;
  using ElementOut = typename Mainloop::ElementOut;
  static constexpr int TileN = Mainloop::TileN;
  static constexpr int TileM = Mainloop::TileM;
  static constexpr int kThreads = Config::kThreads;
  // NOTE: tiles with 16 or more accumulator columns per block row need more than the 168 registers
  // a thread starts with and take them from the producer warpgroup; the narrowest keep them all,
  // so that nothing spills.
  static constexpr bool kReconfigureRegisters = TileM * Mainloop::kBlocksN >= 16;
  static constexpr int kProducerRegisters = 56;
  static constexpr int kConsumerRegisters = 224;
  // NOTE: setmaxnreg moves registers within the CTA's own launch allocation (kThreads x the
  // launch cap, in steps of 8), not the SM's 64K: a split that does not fit makes the consumers'
  // allocation wait forever.
  static constexpr int kLaunchRegisters = (65536 / kThreads) / 8 * 8;
  static_assert(!kReconfigureRegisters ||
                128 * kProducerRegisters + Mainloop::kConsumerThreads * kConsumerRegisters <= kThreads * kLaunchRegisters,
                "register split exceeds the CTA's allocation");
  // (named barriers 4 and 5: the W4A8 mainloop's issue turns)
  static constexpr uint32_t kEpilogueBarrier = 1;  // named barrier of the consumer threads
  // named barriers of the consumers and the stream-K signalling warp (warp 1)
  static constexpr uint32_t kPublishBarrier = 2;   // a later piece's partial is stored
  static constexpr uint32_t kReadyBarrier = 3;     // every later piece of the tile is published
  static constexpr int kSignalThreads = Mainloop::kConsumerThreads + 32;
  /// whether the activation producer's warp converts each stage's activation (the W4A8 8-token tiles)
  static constexpr bool kConvertsAct = Mainloop::kConvertsAct;

  using Params = typename Config::Params;
  using SharedStorage = typename Config::SharedStorage;
  static constexpr int kTileFloats = Config::kTileFloats;
  static constexpr int kPartFloats = Config::kPartFloats;
  static constexpr int kOutBoxCols = Config::kOutBoxCols;
  static_assert(kOutBoxCols * sizeof(ElementOut) == 128, "the out boxes' rows are the 128-byte swizzle's span");

  CUTE_DEVICE static void run(Params const& p, char* smem) {
    QG_TIMELINE(uint64_t tl[6] = {qg_globaltimer()}; long long c0 = clock64();)
    SharedStorage& s = *reinterpret_cast<SharedStorage*>(smem);
    int const warp_group = threadIdx.x / 128;
    if (threadIdx.x == 0) {
      if constexpr (ClusterK > 1) {  // (fenced for the cluster by init_barriers)
        cutlass::arch::ClusterTransactionBarrier::init(&s.parts_full, 1);
      }
      Mainloop::init_barriers(s.mainloop);
      if constexpr (ClusterK > 1) {
        if (cute::block_rank_in_cluster() == 0) {
          cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&s.parts_full, kPartFloats * sizeof(float));
        }
      }
      cute::prefetch_tma_descriptor(&p.tma_act);
      cute::prefetch_tma_descriptor(&p.tma_out);
      allow_next_kernel();
    }
    __syncthreads();
    if constexpr (ClusterK > 1) {
      cute::cluster_arrive_relaxed();  // the other ranks wait for it before they store into rank 0
    }

    int const tiles_n = p.work.tiles_n;
    if (warp_group == 0) {
      if constexpr (kReconfigureRegisters) {
        cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
      }
      int const weight_producer = threadIdx.x == 0 ? 0 : (threadIdx.x == 96 ? 1 : -1);
      if (weight_producer >= 0 && weight_producer < Mainloop::kBlocksN) {  // block row weight_producer
        typename Mainloop::Pipeline pipe;
        Segments segments(p.work, blockIdx.x);
        for (WorkSegment seg; segments.next(seg);) {
          auto cursor = Mainloop::cursor(p.mainloop, seg.tile % tiles_n, weight_producer,
                                         seg.k_begin * Mainloop::kKBlocks);
          for (int kb = seg.k_begin; kb < seg.k_end; ++kb) {
            Mainloop::load(p.mainloop, s.mainloop, pipe, cursor, weight_producer);
          }
        }
      } else if (threadIdx.x == 64 || (threadIdx.x / 32 == 2 && kConvertsAct)) {
        // the activation producer (thread 64) and, where the mainloop takes a converted copy, its
        // warp converting each stage kConvertLag stages behind the loads
        wait_for_previous_kernel();
        [[maybe_unused]] int const lane = threadIdx.x % 32;
        typename Mainloop::Pipeline pipe;
        [[maybe_unused]] typename Mainloop::Pipeline converted;
        [[maybe_unused]] int behind = 0;  // stages loaded, not yet converted
        Segments segments(p.work, blockIdx.x);
        for (WorkSegment seg; segments.next(seg);) {
          int const m0 = (seg.tile / tiles_n) * TileM;
          for (int kb = seg.k_begin; kb < seg.k_end; ++kb) {
            if constexpr (kConvertsAct) {
              Mainloop::load_act(&p.tma_act, s.mainloop, pipe, kb * Mainloop::TileK, m0, lane == 0);
              if (behind == Mainloop::kConvertLag) {
                Mainloop::convert_act(s.mainloop, converted, lane);
              } else {
                ++behind;
              }
            } else {
              Mainloop::load_act(&p.tma_act, s.mainloop, pipe, kb * Mainloop::TileK, m0);
            }
          }
        }
        if constexpr (kConvertsAct) {
          for (; behind > 0; --behind) {
            Mainloop::convert_act(s.mainloop, converted, lane);
          }
        }
      } else if (threadIdx.x / 32 == 1 && ClusterK == 1) {
        wait_for_previous_kernel();
        signal_partials(p, s, threadIdx.x % 32);
      }
    } else {
      if constexpr (kReconfigureRegisters) {
        cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
      }
      int const ct = threadIdx.x - 128;
      wait_for_previous_kernel();
      typename Mainloop::Pipeline pipe;
      Segments segments(p.work, blockIdx.x);
      QG_TIMELINE(int nseg = 0; if (ct == 0) { cutlass::arch::ClusterTransactionBarrier::wait(&s.mainloop.full[0], 0); }
                  tl[1] = qg_globaltimer();)
      for (WorkSegment seg; segments.next(seg);) {
        typename Mainloop::Accumulator accum;
        Mainloop::mma(p.mainloop, s.mainloop, pipe, seg.k_end - seg.k_begin, accum, ct);
        QG_TIMELINE(tl[2 + (nseg > 0)] = qg_globaltimer();)
        bool finished;
        if constexpr (ClusterK > 1) {
          finished = reduce_in_cluster(s, accum, ct);
        } else {
          finished = seg.whole(p.work.iters) || reduce_partials(p, s, seg, accum, ct);
        }
        if (finished) {
          store_tile(p, s, accum, seg.tile % tiles_n, seg.tile / tiles_n, ct);
        }
        QG_TIMELINE(tl[4] = qg_globaltimer(); ++nseg;)
      }
      if (ct == 0) {
        cute::tma_store_wait<0>();
      }
      QG_TIMELINE(if (ct == 0 && blockIdx.x < kTimelineCtas) {
        tl[5] = qg_globaltimer();
        if (nseg < 2) {
          tl[3] = tl[2];
        }
        uint32_t const n = atomicAdd(reinterpret_cast<uint32_t*>(p.timeline) + blockIdx.x, 1u) % kTimelineRecords;
        uint64_t* const r =
            p.timeline + kTimelineCtas / 2 + (uint64_t(blockIdx.x) * kTimelineRecords + n) * kTimelineRecordWords;
        for (int e = 0; e < 6; ++e) {
          r[e] = tl[e];
        }
        r[6] = uint64_t(nseg);
        r[7] = uint64_t(clock64() - c0);
      })
    }
  }

  /// Stream-K fixup, the signalling warp's side, segment by segment in the consumers' order. A
  /// tile's later pieces are published once the consumers have stored them (a release increment:
  /// the consumers go on at once); for the tile's first piece, whose CTA adds up the others, the
  /// warp waits for all of them while the consumers still run that piece's mainloop, then lets
  /// the consumers in, with the last piece's CTA in shared memory (s.sk_last). The counter is left
  /// at zero for the next launch.
  CUTE_DEVICE static void signal_partials(Params const& p, SharedStorage& s, int lane) {
    StreamKDecomposition const& d = p.work;
    SegmentIterator segments(d, blockIdx.x);
    for (WorkSegment seg; segments.next(seg);) {
      if (seg.whole(d.iters)) {
        continue;
      }
      int* const counter = &p.counters[seg.sk_tile];
      if (seg.k_begin != 0) {
        cutlass::arch::NamedBarrier::sync(kSignalThreads, kPublishBarrier);
        if (lane == 0) {
          publish_piece(counter);
        }
      } else {
        if (lane == 0) {
          uint32_t const u0 = uint32_t(seg.sk_tile) * uint32_t(d.iters);
          int const last = d.sk_owner(u0 + d.iters - 1, blockIdx.x);  // (this CTA owns u0)
          s.sk_last = last;
          wait_for_pieces(counter, last - int(blockIdx.x));
        }
        __syncwarp();
        cutlass::arch::NamedBarrier::arrive(kSignalThreads, kReadyBarrier);
      }
    }
  }

  /// Stream-K fixup, the consumers' side. A later piece of a split tile stores its partial in its
  /// CTA's workspace slot, hands it to the signalling warp and returns false. The tile's first
  /// piece waits until every later piece is published, adds them to its own in CTA order
  /// (deterministic) and returns true. (A CTA's range holds at most one later piece, first.)
  CUTE_DEVICE static bool reduce_partials(Params const& p, SharedStorage const& s, WorkSegment const& seg,
                                          typename Mainloop::Accumulator& accum, int ct) {
    StreamKDecomposition const& d = p.work;
    constexpr int kChunks = TileM * Mainloop::kBlocksN / 8;  // float4 chunks per thread
    // pieces loaded at once: 8 float4 in flight; 24 on 128 x 64 tiles, whose fixups gather the most
    // pieces (more spills the other tiles)
    constexpr int kBatch = kChunks > 8 ? 1 : (kChunks == 8 && Mainloop::kBlocksN == 1 ? 3 : 8 / kChunks);
    float4* const workspace = reinterpret_cast<float4*>(p.workspace);
    auto piece = [&](int c) {
      return workspace + int64_t(d.sk_slot(c, seg.sk_tile)) * (kTileFloats / 4) + ct;
    };
    if (seg.k_begin != 0) {
      float4* const mine = piece(blockIdx.x);
      CUTE_UNROLL
      for (int i = 0; i < kChunks; ++i) {
        __stcg(mine + i * Mainloop::kConsumerThreads,
               make_float4(accum(4 * i), accum(4 * i + 1), accum(4 * i + 2), accum(4 * i + 3)));
      }
      cutlass::arch::NamedBarrier::arrive(kSignalThreads, kPublishBarrier);
      return false;
    }
    int const c_lo = int(blockIdx.x);  // the first piece's CTA
    cutlass::arch::NamedBarrier::sync(kSignalThreads, kReadyBarrier);
    int const c_hi = s.sk_last;  // found by the signalling warp while the mainloop ran
    add_later_pieces<kBatch, kChunks>(c_lo, c_hi, Mainloop::kConsumerThreads, piece, [&](int i, float4 x) {
      accum(4 * i) += x.x;
      accum(4 * i + 1) += x.y;
      accum(4 * i + 2) += x.z;
      accum(4 * i + 3) += x.w;
    });
    return true;
  }

  /// Split-K over the cluster (ClusterK > 1): the ranks above 0 store their partials into rank 0's
  /// shared memory and return false; rank 0 waits for all of them, adds them in rank order and
  /// returns true.
  CUTE_DEVICE static bool reduce_in_cluster(SharedStorage& s, typename Mainloop::Accumulator& accum, int ct) {
    constexpr int kChunks = TileM * Mainloop::kBlocksN / 8;  // float4 chunks per thread
    constexpr int kThreadsC = Mainloop::kConsumerThreads;
    uint32_t const rank = cute::block_rank_in_cluster();
    if (rank != 0) {
      cute::cluster_wait();  // rank 0's barrier is initialized and armed
      uint32_t const parts = smem_address(s.parts.data() + (rank - 1) * kTileFloats);
      uint32_t const barrier = smem_address(&s.parts_full);
      CUTE_UNROLL
      for (int i = 0; i < kChunks; ++i) {
        store_remote_v4(parts + (i * kThreadsC + ct) * 16,
                        make_float4(accum(4 * i), accum(4 * i + 1), accum(4 * i + 2), accum(4 * i + 3)), barrier, 0);
      }
      return false;
    }
    cutlass::arch::ClusterTransactionBarrier::wait(&s.parts_full, 0);
    float4 const* parts = reinterpret_cast<float4 const*>(s.parts.data());
    CUTE_UNROLL
    for (int r = 0; r < ClusterK - 1; ++r) {
      CUTE_UNROLL
      for (int i = 0; i < kChunks; ++i) {
        float4 const x = parts[r * (kTileFloats / 4) + i * kThreadsC + ct];
        accum(4 * i) += x.x;
        accum(4 * i + 1) += x.y;
        accum(4 * i + 2) += x.z;
        accum(4 * i + 3) += x.w;
      }
    }
    return true;
  }

  /// accum (rows: weight n, columns: activation m) -> the out tile via shared memory and TMA stores.
  /// s.out holds TileN / kOutBoxCols boxes of (TileM, kOutBoxCols), each row of 128 bytes with the TMA's 128-byte
  /// swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)). A thread holds, of each 8 x 8 block
  /// of its warp's accumulator, row n at tokens m and m + 1, packed in one word; one shuffle with its
  /// neighbour row's lane (lane ^ 4) and a byte permute give each a word of rows n, n + 1 at one
  /// token, and the swizzle spreads a warp's 32 words over the 32 banks (scalar stores of the
  /// transposed tile, unswizzled, went 4-way).
  CUTE_DEVICE static void store_tile(Params const& p, SharedStorage& s, typename Mainloop::Accumulator const& accum,
                                     int n_tile, int m_tile, int ct) {
    if (ct == 0) {
      cute::tma_store_wait<0>();  // the previous tile's store has read s.out
    }
    cutlass::arch::NamedBarrier::sync(Mainloop::kConsumerThreads, kEpilogueBarrier);
    // wgmma accumulator value v of block blk: row 128 blk + g + 8 (v / 2 % 2) of the warp's 16,
    // column 2q + v % 2 + 8 (v / 4)
    int const warp = ct / 32;
    int const g = (ct % 32) / 4;
    int const q = ct % 4;
    int const row = warp * 16 + g;
    // After the shuffle this thread stores rows n, n + 1 (n = 128 blk + 16 warp + 8 h + g - g % 2)
    // at token 8 j + r0: box 2 blk + warp / 4, chunk 2 (warp % 4) + h swizzled by r0, so each
    // store is base[h] plus a constant.
    int const r0 = 2 * q + g % 2;
    // of its pair (row n at tokens m, m + 1) and the neighbour's (row n ^ 1), the even row's lane
    // keeps token m of both rows, the odd row's token m + 1
    uint32_t const select = g % 2 ? 0x3276u : 0x5410u;
    uint32_t base[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      base[h] = smem_address(s.out.data()) + (warp / 4) * (TileM * 128) + r0 * 128 +
                (((2 * (warp % 4) + h) ^ r0) * 16) + (g - g % 2) * 2;
    }
    // optional fp32 scales per output channel and per token, applied to the fp32 sum before its one
    // rounding (rows and tokens past the problem read 1: the TMA store drops them)
    float channel[Mainloop::kBlocksN][2];
    CUTE_UNROLL
    for (int blk = 0; blk < Mainloop::kBlocksN; ++blk) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        int const n = n_tile * TileN + blk * 128 + row + 8 * h;
        channel[blk][h] = p.channel_scales != nullptr && n < p.mainloop.N ? p.channel_scales[n] : 1.f;
      }
    }
    auto token = [&](int m) {
      int const m_global = m_tile * TileM + m;
      return p.token_scales != nullptr && m_global < p.M ? p.token_scales[m_global] : 1.f;
    };
    CUTE_UNROLL
    for (int j = 0; j < TileM / 8; ++j) {
      float const t0 = token(8 * j + 2 * q), t1 = token(8 * j + 2 * q + 1);  // this thread's tokens
      CUTE_UNROLL
      for (int blk = 0; blk < Mainloop::kBlocksN; ++blk) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          int const v = blk * (TileM / 2) + 4 * j + 2 * h;
          auto const pair = cutlass::NumericArrayConverter<ElementOut, float, 2>::convert(
              {accum(v) * (channel[blk][h] * t0), accum(v + 1) * (channel[blk][h] * t1)});
          uint32_t const mine = reinterpret_cast<uint32_t const&>(pair);
          uint32_t const theirs = __shfl_xor_sync(0xffffffff, mine, 4);
          sts32(base[h] + blk * (2 * TileM * 128) + j * 1024, __byte_perm(mine, theirs, select));
        }
      }
    }
    cute::tma_store_fence();
    cutlass::arch::NamedBarrier::sync(Mainloop::kConsumerThreads, kEpilogueBarrier);
    if (ct == 0) {
      CUTE_UNROLL
      for (int box = 0; box < TileN / kOutBoxCols; ++box) {
        int const n0 = n_tile * TileN + box * kOutBoxCols;
        if (n0 < p.mainloop.N) {
          cute::SM90_TMA_STORE_2D::copy(&p.tma_out, s.out.data() + box * (TileM * kOutBoxCols), n0, m_tile * TileM);
        }
      }
      cute::tma_store_arrive();
    }
  }
};

}  // namespace quantgemm
