/*! \file
    \brief The prepacked-B layout of the mixed-input family, defined once.

    A weight W[N, K] of 4-bit codes is cut into 128(N) x 64(K) blocks, stored block row by block
    row: block (nb, kb) starts at code ((nb * K/64) + kb) * 8192. Inside a block the codes follow
    the thread-value order of the register-sourced A operand of the wgmma tiled MMA that the
    mainloop runs (two warpgroups stacked along N, 64 rows each, k16 steps):

      code e of a block = ((t * 4 + j) * 8 + p)     t: consumer thread 0..255, j: k16 step 0..3,
                                                    p: nibble of the thread's 32-bit word j

    so consumer thread t fetches its whole slice of a block (4 words, one per k16 step) with one
    128-bit shared-memory load, and nibble p holds the thread's value nibble_value(p) of that step
    (numeric/u4.hpp), the order the LOP3 converter wants. The GPU prepack kernel, the host reference and
    the mainloop all use this struct.
*/
#pragma once

#include <cstdint>

#include "cute/atom/mma_traits_sm90_gmma.hpp"
#include "cute/layout.hpp"

#include "quantgemm/numeric/u4.hpp"

namespace quantgemm {

template <class Weight>
struct PrepackedBLayout {
  static_assert(sizeof(Weight) == 0, "quantgemm: no prepacked layout for this weight type");
};

template <>
struct PrepackedBLayout<u4b8> {
  /// (thread 0..127, value 0..7) -> m + 64 * k inside the 64x16 A tile of one 16-bit wgmma.
  using AtomALayout = cute::SM90::GMMA::ALayout_64x16;

  static constexpr int kBlockN = 128;
  static constexpr int kBlockK = 64;
  static constexpr int kThreads = 256;        // two consumer warpgroups
  static constexpr int kKSteps = kBlockK / 16;
  static constexpr int kBlockCodes = kBlockN * kBlockK;
  static constexpr int kBlockBytes = kBlockCodes / 2;
  static constexpr int kThreadBytes = kBlockBytes / kThreads;  // 16: one 128-bit load
  static_assert(kThreadBytes == 16, "a thread's slice of a block must be one 128-bit load");

  /// Code e of a block -> (n, k) inside the block.
  CUTE_HOST_DEVICE static void block_coord(int e, int& n, int& k) {
    int const p = e % 8;
    int const word = e / 8;
    int const j = word % kKSteps;
    int const t = word / kKSteps;
    int const mk = AtomALayout{}(t % 128, nibble_value(p));
    n = 64 * (t / 128) + mk % 64;
    k = 16 * j + mk / 64;
  }

  /// (n, k) inside the block -> code index e of the block.
  CUTE_HOST_DEVICE static int block_code(int n, int k) {
    auto const inverse = cute::right_inverse(AtomALayout{});  // m + 64 k -> thread + 128 * value
    int const tv = inverse((n % 64) + 64 * (k % 16));
    int const t = (n / 64) * 128 + tv % 128;
    int const v = tv / 128;
    return (t * kKSteps + k / 16) * 8 + value_nibble(v);
  }

  /// Code index of W[n, k] in a prepacked [N, K] weight (N % 128 == 0, K % 64 == 0).
  CUTE_HOST_DEVICE static int64_t code_offset(int n, int k, int K) {
    int64_t const block = int64_t(n / kBlockN) * (K / kBlockK) + k / kBlockK;
    return block * kBlockCodes + block_code(n % kBlockN, k % kBlockK);
  }

  /// 32-bit word w of the prepacked form of codes ([N, K] row-major, one code per byte).
  CUTE_HOST_DEVICE static uint32_t gather_word(uint8_t const* codes, int K, int64_t w) {
    int64_t const block = (w * 8) / kBlockCodes;
    int const in_block = int((w * 8) % kBlockCodes);
    int const nb = int(block / (K / kBlockK));
    int const kb = int(block % (K / kBlockK));
    uint32_t word = 0;
    for (int p = 0; p < 8; ++p) {
      int n, k;
      block_coord(in_block + p, n, k);
      uint32_t const code = codes[int64_t(nb * kBlockN + n) * K + kb * kBlockK + k] & 0xfu;
      word |= code << (4 * p);
    }
    return word;
  }

  /// Byte offset of block (nb, kb).
  CUTE_HOST_DEVICE static int64_t block_offset_bytes(int nb, int kb, int K) {
    return (int64_t(nb) * (K / kBlockK) + kb) * kBlockBytes;
  }
};

/// u4 codes (zero points per group) use the same layout: only the offset the converter subtracts differs.
template <>
struct PrepackedBLayout<u4> : PrepackedBLayout<u4b8> {};

}  // namespace quantgemm
