/*! \file
    \brief u4b8: a 4-bit unsigned code q with an implicit zero point of 8, value = q - 8 (GPTQ's
           symmetric 4-bit weights), and the register converter

             8 x u4b8 in one 32-bit word  ->  4 x bf16x2 holding (q - 8) * s

           The word's nibbles are interleaved: nibble p holds value nibble_value(p), so that
           (word >> 4i) & 0x000f000f selects values 2i and 2i+1, already in the two 16-bit halves
           of a bf16x2 register. One LOP3 per pair ORs them into the mantissa of 128.0 (bf16 0x4300),
           giving the exact bf16 128 + q; one packed FMA subtracts 128 + 8 (magic and zero point
           together, exact), one packed multiply applies the group scale (rounded once, as the
           reference's bf16((q - 8) * s)).
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

/// Converts one interleaved word of eight u4b8 codes into four bf16x2 registers:
/// out[i] = {(v[2i] - 8) * scale[i].x, (v[2i+1] - 8) * scale[i].y}.
template <class Weight>
struct ConvertToBf16x2 {
  static_assert(sizeof(Weight) == 0, "quantgemm: no bf16 register converter for this weight type");
};

template <>
struct ConvertToBf16x2<u4b8> {
  static constexpr uint32_t kMask = 0x000f000fu;
  static constexpr uint32_t kMagic = 0x43004300u;  // bf16x2 {128, 128}

  CUTE_DEVICE static void convert(uint32_t word, __nv_bfloat162 const (&scale)[4], uint32_t (&out)[4]) {
    uint32_t const one_bits = 0x3F803F80u;   // bf16x2 {1, 1}
    uint32_t const bias_bits = 0xC308C308u;  // bf16x2 {-136, -136}: -(128 + zero point)
    __nv_bfloat162 const one = reinterpret_cast<__nv_bfloat162 const&>(one_bits);
    __nv_bfloat162 const bias = reinterpret_cast<__nv_bfloat162 const&>(bias_bits);
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) {
      uint32_t magic = lop3_and_or(word >> (4 * i), kMask, kMagic);           // 128 + q, exact
      __nv_bfloat162 v = __hfma2(reinterpret_cast<__nv_bfloat162&>(magic), one, bias);  // q - 8, exact
      v = __hmul2(v, scale[i]);
      out[i] = reinterpret_cast<uint32_t&>(v);
    }
  }
};

}  // namespace quantgemm
