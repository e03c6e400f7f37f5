/*! \file
    \brief The prepacked-B layout of the sm80 mixed-input kernel (kernel/sm80_mixed_input.hpp),
           defined once.

    The sm80 kernel computes the transposed problem out^T = W a^T with mma.sync m16n8k16: the
    weight is the A operand (16 weight rows a tile), the activation the B operand (8 tokens a tile).
    A weight W[N, K] of 4- or 8-bit codes is cut into 64(N) x 64(K) blocks, stored block row by
    block row: block (nb, kb) starts at code (nb * K/64 + kb) * 4096. A block is four 64 x 16
    sub-blocks (k16 steps), each the A fragments of one warp's four m16 tiles at one k16 step:
    lane l (g = l / 4, r = l % 4) holds, of tile t, rows 16 t + g (+ 8) and columns 2r, 2r + 1
    (+ 8), the mma's registers a0..a3.

    4-bit codes: lane l's 16 bytes of a sub-block (one 128-bit load) are four words; words 2p and
    2p + 1 hold tiles 2p and 2p + 1 (registers a0, a1 and a2, a3). Nibble i of a word holds tile
    2p + (i & 1), register a[(i >> 1) & 1] (+ 2 in the odd word), column + (i >> 2): so that
    (w & 0x000f000f) and ((w >> 8) & 0x000f000f) are the even tile's two registers with a code in
    each half, and (w & 0x00f000f0), ((w >> 8) & 0x00f000f0) the odd tile's with the code times
    16. One LOP3 each puts them under the mantissa of a magic number, exactly (numeric/u4.hpp).

      code e of a block = ((s * 32 + l) * 4 + w) * 8 + i         s: k16 step, w: word, i: nibble

    8-bit codes: lane l's 32 bytes are eight words, two 16-byte halves (tiles 0-1, 2-3), all lanes'
    first halves first (conflict-free 128-bit loads); word 2t + h of tile t holds its registers
    a[2h], a[2h + 1], byte b register a[2h + b / 2], column + b % 2.

      code e of a block = s * 1024 + ((w / 4) * 32 + l) * 16 + (w % 4) * 4 + b

    The GPU prepack kernel, the host reference and the kernel all use this struct.
*/
#pragma once

#include <cstdint>

#include "cute/config.hpp"

#include "quantgemm/layout/blocked_codes.hpp"

namespace quantgemm {

template <int Bits>
struct Sm80PrepackedBLayoutOfBits : BlockedCodes<Sm80PrepackedBLayoutOfBits<Bits>> {
  static_assert(Bits == 4 || Bits == 8, "quantgemm: 4- or 8-bit codes");
  static constexpr int kBits = Bits;
  static constexpr int kBlockN = 64;
  static constexpr int kBlockK = 64;
  static constexpr int kKSteps = kBlockK / 16;
  static constexpr int kBlockCodes = kBlockN * kBlockK;
  static constexpr int kBlockBytes = kBlockCodes * kBits / 8;
  static constexpr int kStepBytes = kBlockBytes / kKSteps;  ///< one k16 sub-block: 512 or 1024 bytes
  static constexpr int kCodesPerWord = 32 / kBits;
  static constexpr uint32_t kCodeMask = (1u << kBits) - 1;

  /// Byte offset in a sub-block of lane l's 16-byte load h (h = 0; 8-bit codes also h = 1).
  CUTE_HOST_DEVICE static constexpr int load_offset(int l, int h) { return (h * 32 + l) * 16; }

  /// Code e of a block -> (n, k) inside the block.
  CUTE_HOST_DEVICE static constexpr void block_coord(int e, int& n, int& k) {
    int const s = e / (kBlockCodes / kKSteps);
    int const rest = e % (kBlockCodes / kKSteps);
    int l = 0, tile = 0, reg = 0, col = 0;
    if (kBits == 4) {
      int const i = rest % 8;
      int const w = (rest / 8) % 4;
      l = rest / 32;
      tile = 2 * (w / 2) + (i & 1);
      reg = ((i >> 1) & 1) + 2 * (w % 2);
      col = i >> 2;
    } else {
      int const b = rest % 4;
      int const w = ((rest / 16) / 32) * 4 + (rest % 16) / 4;
      l = (rest / 16) % 32;
      tile = w / 2;
      reg = 2 * (w % 2) + b / 2;
      col = b % 2;
    }
    // mma.sync A fragment: a0 (g, 2r), a1 (g + 8, 2r), a2 (g, 2r + 8), a3 (g + 8, 2r + 8)
    n = 16 * tile + l / 4 + 8 * (reg % 2);
    k = 16 * s + 2 * (l % 4) + col + 8 * (reg / 2);
  }

  /// (n, k) inside the block -> code index e of the block.
  CUTE_HOST_DEVICE static constexpr int block_code(int n, int k) {
    int const s = k / 16, tile = n / 16, l = (n % 8) * 4 + (k % 8) / 2;
    int const reg = (n % 16) / 8 + 2 * ((k % 16) / 8), col = k % 2;
    if (kBits == 4) {
      int const w = 2 * (tile / 2) + reg / 2;
      int const i = (tile & 1) | ((reg % 2) << 1) | (col << 2);
      return ((s * 32 + l) * 4 + w) * 8 + i;
    }
    int const w = 2 * tile + reg / 2;
    int const b = 2 * (reg % 2) + col;
    return s * (kBlockCodes / kKSteps) + ((w / 4) * 32 + l) * 16 + (w % 4) * 4 + b;
  }
};

}  // namespace quantgemm
