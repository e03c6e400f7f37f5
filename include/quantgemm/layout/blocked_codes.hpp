/*! \file
    \brief What every prepacked layout derives from its blocks: a weight cut into kBlockN x kBlockK
           blocks stored block row by block row, each placed by the layout's block_coord /
           block_code. Layouts derive from BlockedCodes<Layout> (layout/prepacked_b.hpp,
           layout/prepacked_b_sm80.hpp).
*/
#pragma once

#include <cstdint>

#include "cute/config.hpp"

namespace quantgemm {

template <class Layout>
struct BlockedCodes {
  /// Code index of W[n, k] in a prepacked [N, K] weight (N, K whole blocks).
  CUTE_HOST_DEVICE static int64_t code_offset(int n, int k, int K) {
    int64_t const block = int64_t(n / Layout::kBlockN) * (K / Layout::kBlockK) + k / Layout::kBlockK;
    return block * Layout::kBlockCodes + Layout::block_code(n % Layout::kBlockN, k % Layout::kBlockK);
  }

  /// 32-bit word w of the prepacked form of codes ([N, K] row-major, one code per byte): code p of
  /// the word in its bits [p * kBits, (p + 1) * kBits).
  CUTE_HOST_DEVICE static uint32_t gather_word(uint8_t const* codes, int K, int64_t w) {
    int64_t const block = (w * Layout::kCodesPerWord) / Layout::kBlockCodes;
    int const in_block = int((w * Layout::kCodesPerWord) % Layout::kBlockCodes);
    int const nb = int(block / (K / Layout::kBlockK));
    int const kb = int(block % (K / Layout::kBlockK));
    uint32_t word = 0;
    for (int p = 0; p < Layout::kCodesPerWord; ++p) {
      int n = 0, k = 0;
      Layout::block_coord(in_block + p, n, k);
      uint32_t const code = codes[int64_t(nb * Layout::kBlockN + n) * K + kb * Layout::kBlockK + k] & Layout::kCodeMask;
      word |= code << (Layout::kBits * p);
    }
    return word;
  }

  /// Byte offset of block (nb, kb).
  CUTE_HOST_DEVICE static int64_t block_offset_bytes(int nb, int kb, int K) {
    return (int64_t(nb) * (K / Layout::kBlockK) + kb) * Layout::kBlockBytes;
  }
};

}  // namespace quantgemm
