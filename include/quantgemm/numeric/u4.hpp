/*! \file
    \brief 4-bit unsigned weight codes and their register converter to bf16.

             u4b8: value = q - 8 (GPTQ's symmetric 4-bit weights, zero point 8)
             u4:   value = q - z[k / group, n] (asymmetric: a zero point per group and column, as
                   AWQ and GPTQ without sym store them)

             8 x 4-bit codes in one 32-bit word  ->  4 x bf16x2 holding (q - zero) * s

           The word's nibbles are interleaved: nibble p holds value nibble_value(p), so that
           (word >> 4i) & 0x000f000f selects values 2i and 2i+1, already in the two 16-bit halves
           of a bf16x2 register. One LOP3 per pair ORs them into the mantissa of 128.0 (bf16 0x4300),
           giving the exact bf16 128 + q; one packed FMA adds the offset -(128 + zero) (exact: both
           are small integers), one packed multiply applies the group scale (rounded once, as the
           reference's bf16((q - zero) * s)).
*/
#pragma once

#include <cstdint>
#include <cuda_bf16.h>

#include "cute/config.hpp"

namespace quantgemm {

/// 4-bit weight code with zero point 8.
struct u4b8 {
  static constexpr int kBits = 4;
  static constexpr int kZeroPoint = 8;
  static constexpr bool kGroupZeros = false;
};

/// 4-bit weight code with a zero point per group and column (given to the kernel as bf16 values).
struct u4 {
  static constexpr int kBits = 4;
  static constexpr bool kGroupZeros = true;
};

/// Nibble p of a packed 32-bit word holds value nibble_value(p) of the thread's eight values:
/// the interleave [0, 2, 4, 6, 1, 3, 5, 7].
CUTE_HOST_DEVICE constexpr int nibble_value(int p) { return p < 4 ? 2 * p : 2 * (p - 4) + 1; }
/// Inverse of nibble_value: value v sits in nibble value_nibble(v).
CUTE_HOST_DEVICE constexpr int value_nibble(int v) { return (v % 2) * 4 + v / 2; }

/// (a & b) | c in one instruction.
CUTE_DEVICE uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

/// Converts one interleaved word of eight 4-bit codes into four bf16x2 registers:
/// out[i] = bf16({(v[2i] + 128 + offset[i].x) * scale[i].x, (v[2i+1] + 128 + offset[i].y) * scale[i].y}),
/// offset = -(128 + zero point); the sum is exact, the product rounded once.
struct Convert4BitToBf16x2 {
  static constexpr uint32_t kMask = 0x000f000fu;
  static constexpr uint32_t kMagic = 0x43004300u;  // bf16x2 {128, 128}

  CUTE_DEVICE static void convert(uint32_t word, __nv_bfloat162 const (&offset)[4], __nv_bfloat162 const (&scale)[4],
                                  uint32_t (&out)[4]) {
    uint32_t const one_bits = 0x3F803F80u;  // bf16x2 {1, 1}
    __nv_bfloat162 const one = reinterpret_cast<__nv_bfloat162 const&>(one_bits);
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) {
      uint32_t magic = lop3_and_or(word >> (4 * i), kMask, kMagic);                            // 128 + q, exact
      __nv_bfloat162 v = __hfma2(reinterpret_cast<__nv_bfloat162&>(magic), one, offset[i]);  // q - zero, exact
      v = __hmul2(v, scale[i]);
      out[i] = reinterpret_cast<uint32_t&>(v);
    }
  }

  /// bf16x2 {-(128 + z), -(128 + z)} for a zero point z given as a bf16 bit pattern (low half).
  CUTE_DEVICE static __nv_bfloat162 offset_of(uint32_t zero_bits) {
    uint32_t const pair = zero_bits | (zero_bits << 16);
    uint32_t const minus_one_bits = 0xBF80BF80u;   // bf16x2 {-1, -1}
    uint32_t const minus_128_bits = 0xC300C300u;   // bf16x2 {-128, -128}
    return __hfma2(reinterpret_cast<__nv_bfloat162 const&>(pair), reinterpret_cast<__nv_bfloat162 const&>(minus_one_bits),
                   reinterpret_cast<__nv_bfloat162 const&>(minus_128_bits));
  }

  /// The constant offset of u4b8: -(128 + 8).
  CUTE_DEVICE static __nv_bfloat162 u4b8_offset() {
    uint32_t const bits = 0xC308C308u;  // bf16x2 {-136, -136}
    return reinterpret_cast<__nv_bfloat162 const&>(bits);
  }
};

}  // namespace quantgemm
