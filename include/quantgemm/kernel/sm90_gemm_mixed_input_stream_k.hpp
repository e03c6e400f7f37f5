/*! \file
    \brief Persistent warp-specialized sm90 mixed-input GEMM with stream-K:

             out[m, n] = sum_k a[m, k] * ((q[n, k] - zero) * s[k / group, n])     (fp32 accumulate)

    Warpgroup 0 is the producer (one thread issues every copy); warpgroups 1 and 2 run the mainloop
    and the epilogue. The accumulator tile (128 weight rows x TileM activation rows) is written,
    transposed, into shared memory as bf16 and stored with one TMA store; tiles split by stream-K
    are first reduced through the fp32 workspace (stream_k.hpp).
*/
#pragma once

#include <cuda.h>

#include "cute/arch/copy_sm90_desc.hpp"
#include "cute/arch/copy_sm90_tma.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"

#include "quantgemm/kernel/stream_k.hpp"

namespace quantgemm {

template <class Mainloop_>
struct Sm90GemmMixedInputStreamK {
  using Mainloop = Mainloop_;
  using ElementA = cutlass::bfloat16_t;
  static constexpr int TileN = Mainloop::TileN;
  static constexpr int TileM = Mainloop::TileM;
  static constexpr int kThreads = 128 + Mainloop::kConsumerThreads;
  // NOTE: only wide tiles need more than the 168 registers a thread starts with; narrow ones keep
  // them, so that the producer's loop does not spill.
  static constexpr bool kReconfigureRegisters = TileM >= 128;
  static constexpr int kProducerRegisters = 56;
  static constexpr int kConsumerRegisters = 224;
  static constexpr int kTileFloats = TileN * TileM;
  static constexpr uint32_t kEpilogueBarrier = 1;  // named barrier of the consumer threads

  struct Params {
    CUtensorMap tma_act;  ///< a [M, K], box (TileK, TileM), 128B swizzle
    CUtensorMap tma_out;  ///< out [M, N], box (TileN, TileM)
    typename Mainloop::Params mainloop;
    StreamKDecomposition work;
    float* workspace;     ///< work.sk_slots() tiles of fp32 partials
    int* counters;        ///< work.sk_tiles arrival counters, zero at rest
  };

  struct SharedStorage {
    typename Mainloop::SharedStorage mainloop;
    cute::array_aligned<ElementA, TileM * TileN, 128> out;  // (TileM, TileN), n fastest
    int finisher;
  };

  static constexpr int kSharedBytes = int(sizeof(SharedStorage));

  CUTE_DEVICE static void run(Params const& p, char* smem) {
    SharedStorage& s = *reinterpret_cast<SharedStorage*>(smem);
    int const warp_group = threadIdx.x / 128;
    if (threadIdx.x == 0) {
      Mainloop::init_barriers(s.mainloop);
      cute::prefetch_tma_descriptor(&p.tma_act);
      cute::prefetch_tma_descriptor(&p.tma_out);
    }
    __syncthreads();

    int const tiles_n = p.work.tiles_n;
    if (warp_group == 0) {
      if constexpr (kReconfigureRegisters) {
        cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
      }
      if (threadIdx.x == 0) {
        PipelineState pipe;
        SegmentIterator segments(p.work, blockIdx.x);
        for (WorkSegment seg; segments.next(seg);) {
          auto cursor = Mainloop::cursor(p.mainloop, seg.tile % tiles_n, seg.k_begin);
          int const m0 = (seg.tile / tiles_n) * TileM;
          for (int kb = seg.k_begin; kb < seg.k_end; ++kb) {
            Mainloop::load(p.mainloop, &p.tma_act, s.mainloop, pipe, cursor, m0);
          }
        }
      }
    } else {
      if constexpr (kReconfigureRegisters) {
        cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
      }
      int const ct = threadIdx.x - 128;
      PipelineState pipe;
      SegmentIterator segments(p.work, blockIdx.x);
      for (WorkSegment seg; segments.next(seg);) {
        typename Mainloop::Accumulator accum;
        Mainloop::mma(s.mainloop, pipe, seg.k_end - seg.k_begin, accum, ct);
        if (seg.whole(p.work.iters) || reduce_partials(p, s, seg, accum, ct)) {
          store_tile(p, s, accum, seg.tile % tiles_n, seg.tile / tiles_n, ct);
        }
      }
      if (ct == 0) {
        cute::tma_store_wait<0>();
      }
    }
  }

  /// Writes this piece's partial and counts it in; the last piece of the tile to arrive adds up
  /// all pieces in CTA order into accum and returns true.
  CUTE_DEVICE static bool reduce_partials(Params const& p, SharedStorage& s, WorkSegment const& seg,
                                          typename Mainloop::Accumulator& accum, int ct) {
    StreamKDecomposition const& d = p.work;
    int const me = blockIdx.x;
    constexpr int kChunks = TileM / 8;  // float4 chunks per thread
    float4* const workspace = reinterpret_cast<float4*>(p.workspace);
    float4* const mine = workspace + int64_t(d.sk_slot(me, seg.sk_tile)) * (kTileFloats / 4);
    CUTE_UNROLL
    for (int i = 0; i < kChunks; ++i) {
      mine[i * Mainloop::kConsumerThreads + ct] =
          make_float4(accum(4 * i), accum(4 * i + 1), accum(4 * i + 2), accum(4 * i + 3));
    }
    __threadfence();
    cutlass::arch::NamedBarrier::sync(Mainloop::kConsumerThreads, kEpilogueBarrier);
    uint32_t const u0 = uint32_t(seg.sk_tile) * uint32_t(d.iters);
    int const c_lo = d.sk_owner(u0);
    int const c_hi = d.sk_owner(u0 + d.iters - 1);
    if (ct == 0) {
      int const arrived = atomicAdd(&p.counters[seg.sk_tile], 1) + 1;
      int const last = arrived == c_hi - c_lo + 1;
      if (last) {
        p.counters[seg.sk_tile] = 0;  // at rest again for the next launch
      }
      s.finisher = last;
    }
    cutlass::arch::NamedBarrier::sync(Mainloop::kConsumerThreads, kEpilogueBarrier);
    if (!s.finisher) {
      return false;
    }
    __threadfence();
    // every piece, this CTA's own included, is read back from the workspace in CTA order
    for (int c = c_lo; c <= c_hi; ++c) {
      float4 const* piece = workspace + int64_t(d.sk_slot(c, seg.sk_tile)) * (kTileFloats / 4) + ct;
      CUTE_UNROLL
      for (int i = 0; i < kChunks; ++i) {
        float4 const x = __ldcg(piece + i * Mainloop::kConsumerThreads);
        bool const first = c == c_lo;
        accum(4 * i) = first ? x.x : accum(4 * i) + x.x;
        accum(4 * i + 1) = first ? x.y : accum(4 * i + 1) + x.y;
        accum(4 * i + 2) = first ? x.z : accum(4 * i + 2) + x.z;
        accum(4 * i + 3) = first ? x.w : accum(4 * i + 3) + x.w;
      }
    }
    return true;
  }

  /// accum (rows: weight n, columns: activation m) -> bf16 out tile via shared memory and a TMA store.
  CUTE_DEVICE static void store_tile(Params const& p, SharedStorage& s, typename Mainloop::Accumulator const& accum,
                                     int n_tile, int m_tile, int ct) {
    if (ct == 0) {
      cute::tma_store_wait<0>();  // the previous tile's store has read s.out
    }
    cutlass::arch::NamedBarrier::sync(Mainloop::kConsumerThreads, kEpilogueBarrier);
    // wgmma accumulator value v: row g + 8 * (v / 2 % 2) of the warp's 16, column 2q + v % 2 + 8 * (v / 4)
    int const row = (ct / 32) * 16 + (ct % 32) / 4;
    int const col = 2 * (ct % 4);
    ElementA* out = s.out.data();
    CUTE_UNROLL
    for (int v = 0; v < TileM / 2; ++v) {
      int const n = row + 8 * ((v / 2) % 2);
      int const m = col + v % 2 + 8 * (v / 4);
      out[m * TileN + n] = ElementA(accum(v));
    }
    cute::tma_store_fence();
    cutlass::arch::NamedBarrier::sync(Mainloop::kConsumerThreads, kEpilogueBarrier);
    if (ct == 0) {
      cute::SM90_TMA_STORE_2D::copy(&p.tma_out, out, n_tile * TileN, m_tile * TileM);
      cute::tma_store_arrive();
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    sm90_gemm_mixed_input_stream_k(__grid_constant__ typename Kernel::Params const params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) char smem[];  // dynamic shared memory starts 1024-aligned
  Kernel::run(params, smem);
#endif
}

}  // namespace quantgemm
