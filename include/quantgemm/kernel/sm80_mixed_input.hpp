/*! \file
    \brief The sm80 mixed-input GEMM (Ampere, Ada; it also runs on Hopper): mma.sync m16n8k16 on
           the transposed problem, a cp.async multistage pipeline, stream-K.

             out[m, n] = cs[n] * ts[m] * sum_g s[g, n] * sum_{k in g} (q[n, k] - zero) * a[m, k]
             (fp32; cs, ts optional fp32 channel and token scales, else 1)

    out^T = W a^T: the weight is the mma's A operand (four m16 tiles a warp, 64 rows), the
    activation its B operand (TileM / 8 n8 tiles of tokens). 8 warps: WarpsN along the weight's
    rows (TileN = 64 WarpsN) times WarpsK along each 64-deep stage's four k16 steps, whose
    partial sums meet in shared memory at the end of a tile.

    Codes stay biased, b + q, one LOP3 (4-bit) or PRMT (8-bit under fp16) a pair: bf16 128 + q,
    fp16 64 + q (4-bit codes 4 bits up under 64.0) or 1024 + q (8-bit); one more mma a k16 step
    sums the activation's columns, of which (b + z) times come off when the group ends
    (Codes::kColumnSums). 8-bit codes under bf16 go through fp32 (2^23 + q) and lose 2^23 + z there,
    exactly (f = 1). The mma sums them into fp32 partials per group; when a group ends,
    acc += (s / f) * partial: one FMA per accumulator and group in place of a packed multiply per
    pair of codes, and the weight is s (q - z) unrounded
    (reference.mm_quantized(..., exact_weight=True)).

    Pipeline: Stages buffers of (the weight's 64-deep block per block row, the activation tile, one
    or two group-scale and zero-point rows), filled by cp.async from every thread Stages - 1 ahead
    of the mma, one __syncthreads per stage. Work: stream-K over the CTAs that fit on the device
    (kernel/stream_k.hpp); a split tile's later pieces store fp32 partials in the workspace and
    count themselves in, its first piece adds them in CTA order.
*/
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "cute/config.hpp"
#include "cutlass/numeric_types.h"

#include "quantgemm/arch/grid_dependency.hpp"
#include "quantgemm/arch/mma_sync.hpp"
#include "quantgemm/collective/mma_sync_group_partials.hpp"
#include "quantgemm/kernel/stream_k.hpp"
#include "quantgemm/layout/prepacked_b_sm80.hpp"
#include "quantgemm/numeric/u4.hpp"
#include "quantgemm/numeric/u8.hpp"

namespace quantgemm {
namespace sm80 {

/// 16 bytes global -> shared, bypassing L1; zeros when !valid (src is then not read).
CUTE_DEVICE void cp_async_16(uint32_t dst, void const* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
CUTE_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
CUTE_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

/// The codes of one lane's k16 step (layout/prepacked_b_sm80.hpp) -> the A fragments of its four
/// m16 tiles: (kColumnSums) kSumBias + q, or (8-bit codes under bf16) exact integers q - z.
template <class Weight, class Element>
struct Codes {
  static constexpr bool kFp16 = std::is_same_v<Element, cutlass::half_t>;
  static constexpr int kBits = Weight::kBits;
  static constexpr int kWords = kBits == 4 ? 4 : 8;
  /// 8-bit codes into bf16 go through fp32 (2^23 + q): bf16's mantissa holds no biased 8-bit code
  static constexpr bool kThroughFloat = kBits == 8 && !kFp16;
  /// The other codes stay biased, kSumBias + q, as the sm90 converters' (bf16 128 + q; fp16
  /// 64 + q for 4-bit codes, 1024 + q for 8-bit ones): the mma sums them times a, and the kernel
  /// subtracts (kSumBias + z) times the activation's column sums (one more mma a k16 step) when it
  /// applies the group scale, in place of a packed add per pair of codes. The partial sums are then
  /// about 17 (bf16), 9 or 18 (fp16) times the result's terms ((kSumBias + z) / |q - z|), well inside fp32 for a 16-bit output; 4-bit codes as fp16's 1024 + q
  /// would make them 130 times.
  static constexpr bool kColumnSums = !kThroughFloat;
  struct ThroughFloat {  ///< 2^23 + q, minus 2^23 + z, in fp32
    static constexpr float kSumBias = 8388608.f;
  };
  using Biased = std::conditional_t<kThroughFloat, ThroughFloat,
                                    std::conditional_t<kBits == 4, Convert4Bit<Element>, Convert8Bit<Element>>>;
  static constexpr float kSumBias = Biased::kSumBias;
  using Offset = float;  ///< column_sum_offset: -(kSumBias + z)

  CUTE_DEVICE static Offset offset(float zero) { return column_sum_offset<Codes>(zero); }

  /// off[t][h]: the offset of tile t's rows g (h = 0) and g + 8 (h = 1)
  CUTE_DEVICE static void convert(uint32_t const (&w)[kWords], Offset const (&off)[4][2], uint32_t (&a)[4][4]) {
    if constexpr (kBits == 4) {
      CUTE_UNROLL
      for (int i = 0; i < 4; ++i) {  // word i: tiles 2 (i / 2) and 2 (i / 2) + 1, registers 2 (i % 2) + {0, 1}
        int const t = 2 * (i / 2), h = 2 * (i % 2);
        uint32_t const x = w[i];
        if constexpr (kFp16) {  // 64 + q: each code at bits 4-7 under 64.0 (0x5400)
          constexpr uint32_t kMask = 0x00f000f0u, kMagic = Bits16<Element>::kSumMagic;
          a[t][h] = lop3_and_or(x << 4, kMask, kMagic);
          a[t][h + 1] = lop3_and_or(x >> 4, kMask, kMagic);
          a[t + 1][h] = lop3_and_or(x, kMask, kMagic);
          a[t + 1][h + 1] = lop3_and_or(x >> 8, kMask, kMagic);
        } else {  // 128 + q: each code at bits 0-3 under 128 (0x4300)
          constexpr uint32_t kMask = 0x000f000fu, kMagic = 0x43004300u;
          a[t][h] = lop3_and_or(x, kMask, kMagic);
          a[t][h + 1] = lop3_and_or(x >> 8, kMask, kMagic);
          a[t + 1][h] = lop3_and_or(x >> 4, kMask, kMagic);
          a[t + 1][h + 1] = lop3_and_or(x >> 12, kMask, kMagic);
        }
      }
    } else {
      CUTE_UNROLL
      for (int i = 0; i < 8; ++i) {  // word i: tile i / 2, registers 2 (i % 2) + {0, 1}
        int const t = i / 2, h = 2 * (i % 2);
        if constexpr (kFp16) {  // bytes {0, 1} and {2, 3} under 0x64: 1024 + q
          a[t][h] = prmt(w[i], 0x64646464u, 0x7170u);
          a[t][h + 1] = prmt(w[i], 0x64646464u, 0x7372u);
        } else {  // 2^23 + q in fp32, minus 2^23 + z, two packed into bf16x2 (exact: |q - z| < 256)
          CUTE_UNROLL
          for (int p = 0; p < 2; ++p) {
            float const lo = __uint_as_float(prmt(w[i], 0x4B000000u, 0x7440u + 2 * p)) + off[t][p];
            float const hi = __uint_as_float(prmt(w[i], 0x4B000000u, 0x7441u + 2 * p)) + off[t][p];
            __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
            a[t][h + p] = reinterpret_cast<uint32_t&>(v);
          }
        }
      }
    }
  }
};

template <class Weight_, class Element_, int TileN_, int TileM_, int Stages_>
struct MixedInputKernel {
  using Weight = Weight_;
  using Element = Element_;  ///< activations, scales, zero points, output
  using Layout = Sm80PrepackedBLayoutOfBits<Weight::kBits>;
  using Cvt = Codes<Weight, Element>;
  static constexpr int TileN = TileN_;
  static constexpr int TileM = TileM_;
  static constexpr int TileK = Layout::kBlockK;
  static constexpr int Stages = Stages_;
  static constexpr int kThreads = 256;
  static constexpr int WarpsN = TileN / 64;
  static constexpr int WarpsK = 8 / WarpsN;
  static constexpr int kStepsPerWarp = Layout::kKSteps / WarpsK;  ///< k16 steps of a stage per warp
  static constexpr int kNT = TileM / 8;                            ///< n8 token tiles
  static constexpr int kAcc = 4 * kNT * 4;                         ///< fp32 accumulators per lane
  static constexpr bool kGroupZeros = Weight::kGroupZeros;
  static_assert(WarpsN * WarpsK == 8 && (WarpsK == 1 || WarpsK == 2 || WarpsK == 4), "TileN: 128, 256 or 512");
  static_assert(TileM == 8 || TileM == 16 || TileM == 32, "TileM: 8, 16 or 32");

  // one stage: the weight blocks, the activation tile (rows of 64 k, 16-byte chunks swizzled by
  // row), two scale rows (and two zero-point rows)
  static constexpr int kWeightBytes = WarpsN * Layout::kBlockBytes;
  static constexpr int kActBytes = TileM * TileK * 2;
  static constexpr int kScaleRows = 2;
  static constexpr int kScaleBytes = kScaleRows * TileN * 2;
  static constexpr int kStageBytes = kWeightBytes + kActBytes + kScaleBytes * (kGroupZeros ? 2 : 1);
  /// the K-split partials of warps WarpsK > 0, met in shared memory at a tile's end
  static constexpr int kReduceBytes = (WarpsK - 1) * WarpsN * kAcc * 32 * 4;
  static constexpr int kSharedBytes = Stages * kStageBytes + kReduceBytes;
  static_assert(kStageBytes % 128 == 0 && kWeightBytes % 128 == 0, "stages and activation tiles 128-byte aligned");
  static constexpr int kTileFloats = TileN * TileM;
  /// CTAs an SM should hold (the register cap follows): two up to 16 tokens (three spill at 80 registers)
  static constexpr int kMinBlocks = TileM <= 16 ? 2 : 1;

  struct Params {
    Element const* a;
    int64_t lda;
    uint8_t const* b;          ///< prepacked, k_iters x 64 columns, rows padded to a multiple of 64
    Element const* scales;     ///< [groups, N]
    Element const* zeros;      ///< [groups, N] (weights with group zeros)
    float const* channel_scales;
    float const* token_scales;
    Element* out;
    int64_t ldo;
    int M, N, K;
    int n_blocks;              ///< prepacked block rows (N padded / 64)
    int group_size;            ///< k per scale row (K rounded up to 64 for one group)
    int groups;
    StreamKDecomposition work;
    float* workspace;
    int* counters;
  };

  /// One thread's share of the stage loads, walking the CTA's (tile, k-iteration) units in the
  /// order the mma visits them. Per tile it computes its source pointers once; per stage it steps
  /// them on and issues its cp.asyncs. Thread t loads of block row t / kRowThreads the chunks
  /// t % kRowThreads + i kRowThreads: a warp reads 512 contiguous bytes, and one pointer serves all.
  struct Loader {
    static constexpr int kRowThreads = kThreads / WarpsN;                   ///< threads a block row
    static constexpr int kChunks = Layout::kBlockBytes / 16 / kRowThreads;  ///< weight chunks per thread
    static_assert(Layout::kBlockBytes / 16 % kRowThreads == 0, "whole chunks per thread");
    static constexpr int kRowChunks = TileN / 8;  ///< 16-byte chunks of a scale row
    static_assert(2 * 2 * kRowChunks <= kThreads, "a thread for each chunk of two scale and two zero-point rows");
    /// the activation chunks go to the last threads, the scale rows to the first: other warps
    static constexpr int kActThread0 = kThreads - TileM * 8;

    SegmentIterator segments;
    WorkSegment seg{0, 0, 0, -1};
    int kb = 0;
    uint8_t const* weight = nullptr;  ///< chunk 0 at k-iteration kb (the first block row if this one is padding)
    bool weight_ok = false;           ///< whether the block row exists
    Element const* act = nullptr;     ///< this thread's activation chunk at k = 0 (rows past M: none)
    Element const* group_row = nullptr;  ///< this thread's scale or zero-point chunk, column n
    uint32_t group_dst = 0;           ///< its place in a stage
    int group_k = 0;                  ///< its k in the stage: 0, or 32 for the second row
    int group = 0;                    ///< the scale row of this thread's k (kb * 64 + group_k)
    int group_next_k = 0;             ///< where that group ends
    bool group_loads = false;         ///< whether this thread loads a scale or zero-point chunk

    CUTE_DEVICE explicit Loader(StreamKDecomposition const& d) : segments(d, blockIdx.x) {}

    CUTE_DEVICE void start_tile(Params const& p) {
      int const tiles_n = p.work.tiles_n;
      int const nb0 = (seg.tile % tiles_n) * WarpsN;
      int const m0 = (seg.tile / tiles_n) * TileM;
      int const t = threadIdx.x;
      int const nb = nb0 + t / kRowThreads;
      weight_ok = nb < p.n_blocks;
      weight = p.b + (int64_t(weight_ok ? nb : 0) * p.work.iters + kb) * Layout::kBlockBytes + (t % kRowThreads) * 16;
      int const ta = t - kActThread0;
      int const m = m0 + ta / 8;
      act = ta >= 0 && m < p.M ? p.a + m * p.lda + (ta % 8) * 8 : nullptr;
      // chunk t: [scales | zeros][row][column chunk], rows 1 or 2 (groups that may end half-way
      // through a stage)
      bool const two_rows = p.group_size % TileK != 0;
      int const row = two_rows ? (t / kRowChunks) % 2 : 0;
      int const which = two_rows ? t / (2 * kRowChunks) : t / kRowChunks;  // 0 scales, 1 zeros
      group_loads = which < (kGroupZeros ? 2 : 1);
      group_row = nullptr;
      if (group_loads) {
        int const n = nb0 * 64 + (t % kRowChunks) * 8;
        if (n < p.N) {
          group_row = (which ? p.zeros : p.scales) + n;
        }
        group_dst = kWeightBytes + kActBytes + which * kScaleBytes + (row * TileN + (t % kRowChunks) * 8) * 2;
        group_k = row * 32;
        group = (seg.k_begin * TileK + group_k) / p.group_size;
        group_next_k = (group + 1) * p.group_size;
      }
    }

    /// Issues the next unit's loads into `stage` (nothing past the CTA's last unit), then commits.
    CUTE_DEVICE void issue(Params const& p, uint32_t stage) {
      if (kb >= seg.k_end) {
        if (!segments.next(seg)) {
          cp_async_commit();
          return;
        }
        kb = seg.k_begin;
        start_tile(p);
      }
      int const t = threadIdx.x;
      uint32_t const dst = stage + (t / kRowThreads) * Layout::kBlockBytes + (t % kRowThreads) * 16;
      CUTE_UNROLL
      for (int i = 0; i < kChunks; ++i) {
        cp_async_16(dst + i * kRowThreads * 16, weight + i * kRowThreads * 16, weight_ok);
      }
      weight += Layout::kBlockBytes;
      if (t >= kActThread0) {  // activation row r, chunk c (8 k) at chunk c ^ (r % 8); zeros past M and K
        int const r = (t - kActThread0) / 8, c = t % 8;
        bool const ok = act != nullptr && kb * TileK + c * 8 < p.K;
        cp_async_16(stage + kWeightBytes + r * 128 + ((c ^ (r % 8)) * 16), ok ? act + kb * TileK : p.a, ok);
      }
      if (group_loads) {
        int const k = kb * TileK + group_k;
        while (k >= group_next_k) {  // (at most twice: groups of 32)
          ++group;
          group_next_k += p.group_size;
        }
        int const g = group < p.groups ? group : p.groups - 1;  // a K that ends half-way: the last row
        cp_async_16(stage + group_dst, group_row != nullptr ? group_row + int64_t(g) * p.N : p.scales,
                    group_row != nullptr);
      }
      ++kb;
      cp_async_commit();
    }
  };

  struct Accumulators : GroupPartials<4, kNT, Cvt::kColumnSums, typename Cvt::Offset> {
    /// The scale and offset of group row `row` of the stage at `scales` (the zero points follow).
    CUTE_DEVICE void load_group(uint32_t scales, int row, int n_local) {
      CUTE_UNROLL
      for (int t = 0; t < 4; ++t) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          uint32_t const at = scales + (row * TileN + n_local + 16 * t + 8 * h) * 2;
          this->scale[t][h] = to_float<Element>(lds16(at));
          if constexpr (kGroupZeros) {
            this->offset[t][h] = Cvt::offset(to_float<Element>(lds16(at + kScaleBytes)));
          }
        }
      }
    }
  };

  /// One k16 step of a warp: its codes from `weights`, the activation's n8 tiles from `act`.
  CUTE_DEVICE static void step(Accumulators& r, uint32_t weights, uint32_t act) {
    uint32_t w[Cvt::kWords];
    {
      uint4 const v = lds128(weights);
      w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
      if constexpr (Cvt::kWords == 8) {
        uint4 const u = lds128(weights + Layout::load_offset(0, 1));
        w[4] = u.x, w[5] = u.y, w[6] = u.z, w[7] = u.w;
      }
    }
    uint32_t b[kNT][2];
    CUTE_UNROLL
    for (int j = 0; j < kNT; ++j) {
      ldmatrix_x2(b[j], act + j * 8 * 128);
    }
    uint32_t a[4][4];
    Cvt::convert(w, r.offset, a);
    CUTE_UNROLL
    for (int j = 0; j < kNT; ++j) {
      CUTE_UNROLL
      for (int t = 0; t < 4; ++t) {
        mma_16816<Element>(r.part[0][t][j], a[t], b[j]);
      }
      if constexpr (Cvt::kColumnSums) {
        r.template add_column_sums<Element>(j, b[j]);
      }
    }
  }

  CUTE_DEVICE static void run(Params const& p, char* smem) {
    int const warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int const wn = warp % WarpsN, wk = warp / WarpsN;
    int const tiles_n = p.work.tiles_n;

    uint32_t const smem_base = smem_address(smem);
    Loader loads(p.work);
    CUTE_UNROLL
    for (int s = 0; s < Stages - 1; ++s) {
      loads.issue(p, smem_base + s * kStageBytes);
    }

    // A stage at st: lane offsets of this warp's first k16 step s0 (step s0 + q adds q * kStepBytes
    // to the weights' address and xors q << 5 into the activation's: its rows are 128 bytes, chunks
    // swizzled by row, and st 128-byte aligned). ldmatrix: lane l (0..15) points at token row l % 8
    // of an n8 tile, chunk 2 s + l / 8.
    int const s0 = wk * kStepsPerWarp;
    int const lm_row = lane % 8, lm_chunk = (lane / 8) % 2;
    uint32_t const w_lane = (wn * Layout::kKSteps + s0) * Layout::kStepBytes + Layout::load_offset(lane, 0);
    uint32_t const a_lane = kWeightBytes + lm_row * 128 + ((((2 * s0) | lm_chunk) ^ lm_row) << 4);
    int const n_local = wn * 64 + lane / 4;
    bool const two_rows = p.group_size % TileK != 0;  // groups of 32 (or odd multiples): two scale rows a stage

    uint32_t const smem_end = smem_base + Stages * kStageBytes;
    uint32_t st = smem_base;
    SegmentIterator segments(p.work, blockIdx.x);
    Accumulators r;
    if constexpr (!kGroupZeros) {  // a fixed zero point: the offsets are constants
      CUTE_UNROLL
      for (int t = 0; t < 4; ++t) {
        r.offset[t][0] = r.offset[t][1] = Cvt::offset(float(Weight::kZeroPoint));
      }
    }
    for (WorkSegment seg; segments.next(seg);) {
      zero(r.acc);
      r.clear_group();
      // this warp's current group ends at k = group_end (no group yet: the first step loads one)
      bool in_group = false;
      int group_end = 0;
      for (int kb = seg.k_begin; kb < seg.k_end; ++kb) {
        cp_async_wait<Stages - 2>();
        __syncthreads();
        loads.issue(p, (st == smem_base ? smem_end : st) - kStageBytes);
        uint32_t const weights = st + w_lane, act = st + a_lane, scales = st + kWeightBytes + kActBytes;
        int const k_warp = kb * TileK + s0 * 16;
        // groups are multiples of 32: one can start only at an even step, and with groups of 64 or
        // more only at a stage's first (so the stage's steps are one block of code for the scheduler)
        auto steps = [&](auto two_groups) {
          CUTE_UNROLL
          for (int q = 0; q < kStepsPerWarp; ++q) {
            if (q == 0 || (decltype(two_groups)::value && q % 2 == 0)) {
              int const k = k_warp + q * 16;
              if (!in_group || k >= group_end) {
                if (in_group) {
                  r.flush();
                }
                // the stage holds the scale rows of its first k and of k + 32; steps 2 and 3 take the second
                r.load_group(scales, two_rows && s0 + q >= 2 ? 1 : 0, n_local);
                group_end = in_group && group_end + p.group_size > k ? group_end + p.group_size
                                                                     : (k / p.group_size + 1) * p.group_size;
                in_group = true;
              }
            }
            step(r, weights + q * Layout::kStepBytes, act ^ (q << 5));
          }
        };
        if (two_rows) {
          steps(std::true_type{});
        } else {
          steps(std::false_type{});
        }
        st = st + kStageBytes == smem_end ? smem_base : st + kStageBytes;
      }
      if (in_group) {
        r.flush();
      }
      finish_segment(p, smem, seg, r, wn, wk, lane, tiles_n);
    }
    cp_async_wait<0>();
  }

  /// The K-split warps' sums meet in shared memory; then stream-K's fixup; then the store.
  CUTE_DEVICE static void finish_segment(Params const& p, char* smem, WorkSegment const& seg, Accumulators& r, int wn,
                                         int wk, int lane, int tiles_n) {
    constexpr int kChunks = kAcc / 4;
    auto chunk = [&](int i) -> float* { return &r.acc[0][0][0] + 4 * i; };
    if constexpr (WarpsK > 1) {
      float4* red = reinterpret_cast<float4*>(smem + Stages * kStageBytes);
      if (wk > 0) {
        CUTE_UNROLL
        for (int i = 0; i < kChunks; ++i) {
          float const* c = chunk(i);
          red[(((wk - 1) * WarpsN + wn) * kChunks + i) * 32 + lane] = make_float4(c[0], c[1], c[2], c[3]);
        }
      }
      __syncthreads();
      if (wk == 0) {
        CUTE_UNROLL
        for (int o = 1; o < WarpsK; ++o) {
          CUTE_UNROLL
          for (int i = 0; i < kChunks; ++i) {
            float4 const x = red[(((o - 1) * WarpsN + wn) * kChunks + i) * 32 + lane];
            float* c = chunk(i);
            c[0] += x.x, c[1] += x.y, c[2] += x.z, c[3] += x.w;
          }
        }
      }
      __syncthreads();  // the buffer is free for the next tile
    }
    StreamKDecomposition const& d = p.work;
    bool const whole = seg.whole(d.iters);
    float4* const workspace = reinterpret_cast<float4*>(p.workspace);
    auto piece = [&](int c) {
      return workspace + int64_t(d.sk_slot(c, seg.sk_tile)) * (kTileFloats / 4) + (wn * kChunks) * 32 + lane;
    };
    int* const counter = whole ? nullptr : &p.counters[seg.sk_tile];
    if (!whole && seg.k_begin != 0) {  // a later piece: publish the partial, go on
      if (wk == 0) {
        float4* const mine = piece(blockIdx.x);
        CUTE_UNROLL
        for (int i = 0; i < kChunks; ++i) {
          float const* c = chunk(i);
          __stcg(mine + i * 32, make_float4(c[0], c[1], c[2], c[3]));
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        publish_piece(counter);
      }
      return;
    }
    if (!whole) {  // the first piece: wait for the later ones, add them in CTA order
      uint32_t const u0 = uint32_t(seg.sk_tile) * uint32_t(d.iters);
      int const c_lo = int(blockIdx.x);  // the first piece's CTA
      int const c_hi = d.sk_owner(u0 + d.iters - 1, c_lo);
      if (threadIdx.x == 0) {
        wait_for_pieces(counter, c_hi - c_lo);
      }
      __syncthreads();
      if (wk == 0) {
        add_later_pieces<(kChunks >= 8 ? 1 : 8 / kChunks), kChunks>(c_lo, c_hi, 32, piece, [&](int i, float4 x) {
          float* v = chunk(i);
          v[0] += x.x, v[1] += x.y, v[2] += x.z, v[3] += x.w;
        });
      }
    }
    if (wk == 0) {
      store(p, r, seg.tile % tiles_n, seg.tile / tiles_n, wn, lane);
    }
  }

  /// Accumulator (t, j, i): weight row 16 t + g + 8 (i / 2) of the warp's 64, token 8 j + 2 r + i % 2.
  CUTE_DEVICE static void store(Params const& p, Accumulators const& r, int n_tile, int m_tile, int wn, int lane) {
    int const g = lane / 4, q = lane % 4;
    CUTE_UNROLL
    for (int t = 0; t < 4; ++t) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        int const n = n_tile * TileN + wn * 64 + 16 * t + g + 8 * h;
        if (n >= p.N) {
          continue;
        }
        float const cs = p.channel_scales != nullptr ? p.channel_scales[n] : 1.f;
        CUTE_UNROLL
        for (int j = 0; j < kNT; ++j) {
          CUTE_UNROLL
          for (int e = 0; e < 2; ++e) {
            int const m = m_tile * TileM + 8 * j + 2 * q + e;
            if (m < p.M) {
              float const ts = p.token_scales != nullptr ? p.token_scales[m] : 1.f;
              p.out[int64_t(m) * p.ldo + n] = Element(r.acc[t][j][2 * h + e] * (cs * ts));
            }
          }
        }
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, Kernel::kMinBlocks)
    sm80_mixed_input_stream_k(typename Kernel::Params const params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // programmatic dependent launch (Hopper): the next kernel may start launching now; this one waits
  // for the previous kernel to complete before it reads anything
  allow_next_kernel();
  wait_for_previous_kernel();
  extern __shared__ __align__(128) char smem[];
  Kernel::run(params, smem);
#endif
}

}  // namespace sm80
}  // namespace quantgemm
