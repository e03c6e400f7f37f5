/*! \file
    \brief 4-bit weight codes to e4m3 in registers, for the W4A8 kernels (fp8 wgmma).

             u4b8: value = q - 8, exactly representable in e4m3 (-8 .. 7)

             one 32-bit word of eight codes (nibble p holds value p)  ->  2 x 32-bit registers of
             four e4m3 bytes each (value p in byte p % 4 of register p / 4)

    Two lookups and a select per four codes, all PRMTs. A PRMT selector nibble picks one of eight
    bytes with its low three bits, so the sixteen values come from two tables of eight, indexed by
    q & 7: q >= 8 gives 0..7, q < 8 gives -8..-1. A third PRMT picks, byte by byte, the first
    table's result where q's bit 3 is set and the second's where it is clear; its selector nibble
    is byte index i + 4 * (1 - bit 3), one shift and one LOP3 for the whole word. Per word: 6 PRMT,
    2 LOP3, 3 shifts. The group scale is not folded into the e4m3 value (three mantissa bits would
    round it); the mainloop applies it to fp32 partial sums (collective/sm90_mma_w4a8.hpp).

    The 8-token tiles take the same codes as fp16 values 64 + q instead (to_f16_biased), for
    mma.sync on the 16-bit tensor core.
*/
#pragma once

#include <cstdint>

#include "cute/config.hpp"
#include "quantgemm/numeric/u8.hpp"

namespace quantgemm {

struct Convert4BitE4m3 {
  // e4m3 (bias 7): 1 = 0x38, 2 = 0x40, 3 = 0x44, 4 = 0x48, 5 = 0x4A, 6 = 0x4C, 7 = 0x4E, 8 = 0x50; sign 0x80
  static constexpr uint32_t kNonNegative0 = 0x44403800u;  // q = 8 .. 11: 0, 1, 2, 3
  static constexpr uint32_t kNonNegative1 = 0x4E4C4A48u;  // q = 12 .. 15: 4, 5, 6, 7
  static constexpr uint32_t kNegative0 = 0xCACCCED0u;     // q = 0 .. 3: -8, -7, -6, -5
  static constexpr uint32_t kNegative1 = 0xB8C0C4C8u;     // q = 4 .. 7: -4, -3, -2, -1

  /// lo, hi: the e4m3 values q - 8 of the word's nibbles 0-3 and 4-7.
  CUTE_DEVICE static void convert(uint32_t word, uint32_t& lo, uint32_t& hi) {
    uint32_t const index = word & 0x77777777u;
    uint32_t select;  // nibble i: i + 4 where bit 3 of code i is clear (take the negative table)
    asm("lop3.b32 %0, %1, %2, %3, 0xAE;\n" : "=r"(select) : "r"(word >> 1), "r"(0x44444444u), "r"(0x32103210u));
    lo = prmt(prmt(kNonNegative0, kNonNegative1, index), prmt(kNegative0, kNegative1, index), select);
    uint32_t const index_hi = index >> 16;
    hi = prmt(prmt(kNonNegative0, kNonNegative1, index_hi), prmt(kNegative0, kNegative1, index_hi), select >> 16);
  }

  /// The same word as fp16 values of an m16n8k16 A fragment (the 8-token tiles' mma.sync on the
  /// 16-bit tensor core): a = {nibbles 0-1, 4-5, 2-3, 6-7} (rows g, g + 8, g, g + 8 at k 4 q,
  /// 4 q + 1 | 4 q + 2, 4 q + 3 of the word's k16 step), each value 64 + q exactly: fp16's 64.0
  /// (exponent 6, mantissa steps of 1/16) with the code in mantissa bits 4-7. Per pair a PRMT puts,
  /// as the high nibble of a byte, nibble 2 p in the low half (from the word shifted up by 4) and
  /// nibble 2 p + 1 in the high half, and a LOP3 keeps those nibbles under 64.0's bits: per word 1
  /// shift, 4 PRMT, 4 LOP3. The mainloop takes the bias off with the activation's column sums, after
  /// the mma, in fp32. (1 + q / 64 under 1.0 is the same sum times 1 / 64, which the group scale
  /// would then take back with a multiply a scale.)
  static constexpr float kSumBias = 64.f;  ///< value = kSumBias + q, as the 16-bit converters' kSumBias
  static constexpr uint32_t kF16Bias = 0x54005400u;  ///< fp16 64.0 in both halves
  CUTE_DEVICE static void to_f16_biased(uint32_t word, uint32_t (&a)[4]) {
    constexpr uint32_t kSelect[4] = {0x0004u, 0x0206u, 0x0105u, 0x0307u};
    uint32_t const shifted = word << 4;
    CUTE_UNROLL
    for (int r = 0; r < 4; ++r) {
      uint32_t const x = prmt(word, shifted, kSelect[r]);
      asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(a[r]) : "r"(x), "r"(0x00F000F0u), "r"(kF16Bias));  // (x & b) | c
    }
  }
};

/// Two e4m3 values (the low byte first) as fp16x2, exactly: every e4m3 value is an fp16 value.
CUTE_DEVICE uint32_t e4m3x2_to_f16x2(uint32_t pair) {
  uint32_t d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(d) : "h"(static_cast<uint16_t>(pair)));
  return d;
}

}  // namespace quantgemm
