/*! \file
    \brief What the host needs of one sm90 mixed-input schedule, in plain C++ with no CuTe: the
           tile's constants, its stage count, the kernel's parameters and its shared-memory layout.

    The launcher (launch/sm90_mixed_input_mm.cuh) fills the parameters and launches the kernel from
    this header alone; the kernel body and its CuTe mainloops are parsed by the sm_90a device pass
    only. That halves the compile time of a schedule's translation unit (the host pass parsed all
    of CuTe for a few constants). The mainloops take their constants, parameters and shared storage
    from here and check them against the prepacked layout and their CuTe layouts.
*/
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cuda.h>

#include "cute/config.hpp"
#include "cutlass/numeric_types.h"
#include "quantgemm/kernel/stream_k.hpp"
#include "quantgemm/kernel/timeline.hpp"

namespace quantgemm {

inline constexpr int kSm90SharedMemoryBytes = 232448;  // 227 KB per block

/// The workspace bytes the diagnostic timeline takes (kernel/timeline.hpp), 0 in other builds.
#if defined(QUANTGEMM_TIMELINE)
inline constexpr size_t kTimelineBytes = kTimelineRegionBytes;
#else
inline constexpr size_t kTimelineBytes = 0;
#endif

/// N values of T at an Align-byte boundary (shared memory).
template <class T, int N, int Align>
struct alignas(Align) SmemArray {
  T values[N];
  CUTE_HOST_DEVICE T* data() { return values; }
  CUTE_HOST_DEVICE T const* data() const { return values; }
};

/// The mainloop's parameters (both mainloops).
template <class ElementScale>
struct Sm90MixedInputMainloopParams {
  uint8_t const* b;            ///< prepacked weight, zero-padded to k_blocks x 64 columns and whole blocks of rows
  ElementScale const* scales;  ///< [groups, N]
  ElementScale const* zeros;   ///< [groups, N] zero points (weights with group zeros; else unused)
  int N;
  int k_blocks;                ///< prepacked k-blocks of a block row: ceil(K / 64)
  int group_k_blocks;          ///< k-blocks a group spans (ScaleRows 2: 1, each block two groups)
  int groups;                  ///< scale rows
};

/// The prepacked weight blocks a tile is made of (layout/prepacked_b.hpp, which the mainloops check
/// against): 128 rows x 64 of k, read by two consumer warpgroups.
template <int Bits>
struct Sm90PrepackedBlock {
  static constexpr int kBlockN = 128;
  static constexpr int kBlockK = 64;
  static constexpr int kBlockBytes = kBlockN * kBlockK * Bits / 8;
  static constexpr int kConsumerThreads = 256;
};

/// The 16-bit mainloop's tile (collective/sm90_mma_bulk_tma_gmma_rs_mixed_input.hpp): TileN weight
/// rows x TileM activation rows x TileK of k a stage; a stage holds the tile's prepacked blocks,
/// their group-scale rows (ScaleRows a k-block; zero-point rows beside them for weights with group
/// zeros) and the TileM x TileK activation tile.
template <class Weight, class ElementA, int TileN_, int TileM_, int TileK_, int ScaleRows_>
struct Sm90MixedInputTile : Sm90PrepackedBlock<Weight::kBits> {
  using Block = Sm90PrepackedBlock<Weight::kBits>;
  static constexpr int TileN = TileN_;  // weight rows: the wgmma M
  static constexpr int TileM = TileM_;  // activation rows: the wgmma N
  static constexpr int TileK = TileK_;  // k per stage
  static constexpr int ScaleRows = ScaleRows_;
  static constexpr int kKBlocks = TileK / Block::kBlockK;  // prepacked k-blocks per stage
  static constexpr int kBlocksN = TileN / Block::kBlockN;  // prepacked blocks per stage
  static_assert(kKBlocks * Block::kBlockK == TileK && (kKBlocks == 1 || kKBlocks == 2));
  static_assert(kBlocksN * Block::kBlockN == TileN && (kBlocksN == 1 || kBlocksN == 2));
  static constexpr int kActBoxK = Block::kBlockK;  // k of a TMA box of the activation (128 bytes)
  static constexpr uint32_t kKBlockActBytes = TileM * Block::kBlockK * sizeof(ElementA);
  static constexpr uint32_t kActBytes = kKBlocks * kKBlockActBytes;
  static constexpr uint32_t kBlockScaleBytes = Block::kBlockN * sizeof(ElementA);
  static constexpr bool kGroupZeros = Weight::kGroupZeros;  // a zero-point row beside each scale row
  static constexpr uint32_t kStageBytes =
      kKBlocks * kBlocksN * (Block::kBlockBytes + (kGroupZeros ? 2 : 1) * ScaleRows * kBlockScaleBytes) + kActBytes;
  using Params = Sm90MixedInputMainloopParams<ElementA>;

  template <int Stages>
  struct Storage {
    SmemArray<ElementA, TileM * TileK * Stages, 1024> act;                               // (TileM, TileK, Stages)
    SmemArray<uint8_t, Stages * kKBlocks * kBlocksN * Block::kBlockBytes, 128> b;       // [stage][blk][kb]
    SmemArray<ElementA, Stages * kKBlocks * ScaleRows * TileN, 128> scales;             // [stage][kb][row][n]
    SmemArray<ElementA, kGroupZeros ? Stages * kKBlocks * ScaleRows * TileN : 8, 128> zeros;  // likewise
    uint64_t full[Stages];
    uint64_t empty[Stages];
  };
};

/// Whether a tile of tile_m tokens runs mma.sync m16n8k16 in place of wgmma (both mainloops: the
/// decode tiles, whose group scales go onto fp32 partial sums; mixed_input.exact_weight says the same).
constexpr bool sm90_sync_mma(int tile_m) { return tile_m == 8; }

/// Whether the W4A8 tile tile_n x tile_m rescales its accumulators at each group instead of promoting
/// fp32 partial sums every stage: more than 64 accumulators a consumer thread leave no room for the
/// partial sums (collective/sm90_mma_w4a8.hpp). The codegen's Schedule.w4a8_rescales says the same,
/// checked in each generated W4A8 translation unit.
constexpr bool w4a8_rescales(int tile_n, int tile_m) { return tile_n * tile_m > 128 * 128; }

/// The W4A8 8-token tiles' converted activation (Sm90W4A8Tile::kConvertsAct); nothing elsewhere.
template <int TileM, int TileK, int Stages, bool Converts>
struct Sm90W4A8ConvertedAct {
  SmemArray<uint16_t, TileM * TileK * Stages, 1024> act16;  ///< [stage][kb][token][64 k] fp16
  SmemArray<float, TileM * Stages, 16> act_sums;            ///< [stage][token]
  uint64_t act_full[Stages];                                ///< the e4m3 activation has landed
};
template <int TileM, int TileK, int Stages>
struct Sm90W4A8ConvertedAct<TileM, TileK, Stages, false> {};

/// The W4A8 mainloop's tile (collective/sm90_mma_w4a8.hpp): u4b8 blocks in their e4m3 layout, 128
/// of k a stage (two k-blocks, one group-scale row each, one 128-wide TMA box of e4m3 activation).
template <class ElementOut, int TileN_, int TileM_>
struct Sm90W4A8Tile : Sm90PrepackedBlock<4> {
  using Block = Sm90PrepackedBlock<4>;
  static constexpr int TileN = TileN_;
  static constexpr int TileM = TileM_;
  static constexpr int TileK = 128;
  static constexpr int kKBlocks = TileK / Block::kBlockK;
  static constexpr int kBlocksN = TileN / Block::kBlockN;
  static_assert(kBlocksN * Block::kBlockN == TileN && (kBlocksN == 1 || kBlocksN == 2));
  static constexpr int kActBoxK = TileK;
  static constexpr uint32_t kActBytes = TileM * TileK;
  /// The 8-token tiles (mma.sync on fp16) also hold each stage's activation as fp16 and its sums
  /// per token, made once a stage by the activation producer's warp (collective/sm90_mma_w4a8.hpp).
  static constexpr bool kConvertsAct = sm90_sync_mma(TileM);
  static constexpr uint32_t kStageBytes = kKBlocks * kBlocksN * (Block::kBlockBytes + Block::kBlockN * sizeof(ElementOut)) +
                                          kActBytes * (kConvertsAct ? 3 : 1) + (kConvertsAct ? TileM * 4 : 0);
  using Params = Sm90MixedInputMainloopParams<ElementOut>;

  template <int Stages>
  struct Storage : Sm90W4A8ConvertedAct<TileM, TileK, Stages, kConvertsAct> {
    SmemArray<cutlass::float_e4m3_t, TileM * TileK * Stages, 1024> act;
    SmemArray<uint8_t, Stages * kKBlocks * kBlocksN * Block::kBlockBytes, 128> b;  // [stage][blk][kb]
    SmemArray<ElementOut, Stages * kKBlocks * TileN, 128> scales;                  // [stage][kb][n]
    uint64_t full[Stages];
    uint64_t empty[Stages];
  };
};

/// Rank 0's landing place for the other ranks' partials (split-K over a cluster); nothing without.
template <int Floats>
struct ClusterPartials {
  SmemArray<float, Floats, 16> parts;  ///< [rank - 1][chunk][thread] float4
  uint64_t parts_full;                 ///< every other rank's partial has landed
};
template <>
struct ClusterPartials<0> {};

/// One schedule of the kernel (kernel/sm90_gemm_mixed_input_stream_k.hpp): Weight codes against
/// Activation (Element: bf16 or fp16; e4m3: the W4A8 mainloop, Element the scales' and output's
/// type), TileN x TileM x TileK, ScaleRows scale rows a k-block (2: groups of 32), split-K over
/// clusters of ClusterK CTAs (1: stream-K).
template <class Weight_, class Element_, int TileN_, int TileM_, int TileK_, int ScaleRows_, class Activation_,
          int ClusterK_>
struct Sm90MixedInputConfig {
  using Weight = Weight_;
  using Element = Element_;  ///< scales, zero points and output (and 16-bit activations)
  using Activation = Activation_;
  static constexpr bool kE4m3 = std::is_same_v<Activation, cutlass::float_e4m3_t>;
  static constexpr int TileN = TileN_;
  static constexpr int TileM = TileM_;
  static constexpr int ScaleRows = ScaleRows_;
  static constexpr int ClusterK = ClusterK_;
  using Tile = std::conditional_t<kE4m3, Sm90W4A8Tile<Element, TileN, TileM>,
                                  Sm90MixedInputTile<Weight, Element, TileN, TileM, TileK_, ScaleRows>>;
  static constexpr int kThreads = 128 + Tile::kConsumerThreads;  // a producer warpgroup, two consumers
  static constexpr int kTileFloats = TileN * TileM;
  /// the out tile's TMA boxes: (TileM, kOutBoxCols), a row of 128 bytes (the 128-byte swizzle's span)
  static constexpr int kOutBoxCols = 64;
  /// ClusterK > 1: the partials of ranks 1 .. ClusterK - 1, as each consumer thread holds them
  static constexpr int kPartFloats = ClusterK > 1 ? (ClusterK - 1) * kTileFloats : 0;
  /// As many stages as fit beside the epilogue tile (and the other ranks' partials), at most 32.
  static constexpr int kStages = [] {
    constexpr int kFixed = TileM * TileN * 2 + 2048 + kPartFloats * 4;
    constexpr int kFit = (kSm90SharedMemoryBytes - kFixed) / int(Tile::kStageBytes + 16);
    return kFit < 32 ? kFit : 32;
  }();

  struct Params {
    CUtensorMap tma_act;  ///< a [M, K], box (kActBoxK, TileM), 128B swizzle
    CUtensorMap tma_out;  ///< out [M, N], box (kOutBoxCols, TileM), 128B swizzle
    typename Tile::Params mainloop;
    StreamKDecomposition work;
    float* workspace;             ///< work.sk_slots() tiles of fp32 partials
    int* counters;                ///< work.sk_tiles arrival counters, zero at rest
    float const* channel_scales;  ///< [N] fp32 or nullptr: out[m, n] *= channel_scales[n]
    float const* token_scales;    ///< [M] fp32 or nullptr: out[m, n] *= token_scales[m]
    int M;
#if defined(QUANTGEMM_TIMELINE)
    uint64_t* timeline;  ///< the last kTimelineBytes of the workspace
#endif
  };

  struct SharedStorage : ClusterPartials<kPartFloats> {
    typename Tile::template Storage<kStages> mainloop;
    SmemArray<Element, TileM * TileN, 1024> out;  // TileN / kOutBoxCols boxes of (TileM, kOutBoxCols), 128B swizzle
    int sk_last;  ///< stream-K: the CTA of the last piece of the tile whose first piece this CTA adds up
  };

  static constexpr int kSharedBytes = int(sizeof(SharedStorage));
  static_assert(kSharedBytes <= kSm90SharedMemoryBytes, "shared storage too large");
};

}  // namespace quantgemm
