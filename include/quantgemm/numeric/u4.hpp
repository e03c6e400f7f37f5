/*! \file
    \brief 4-bit unsigned weight codes and their register converter to bf16.

             u4b8: value = q - 8 (GPTQ's symmetric 4-bit weights, zero point 8)
             u4:   value = q - z[k / group, n] (asymmetric: a zero point per group and column, as
                   AWQ and GPTQ without sym store them)

             8 x 4-bit codes in one 32-bit word  ->  4 x bf16x2 (or fp16x2) holding (q - zero) * s

           The word's nibbles are interleaved: nibble p holds value nibble_value(p), so that
           (word >> 4i) & 0x000f000f selects values 2i and 2i+1, already in the two 16-bit halves
           of a packed register. One LOP3 per pair ORs them into the mantissa of a magic number M
           (bf16 128.0 = 0x4300, fp16 1024.0 = 0x6400), giving exactly M + q; one packed FMA adds
           the offset -(M + zero) (exact: small integers), one packed multiply applies the group
           scale (rounded once, as the reference's ((q - zero) * s) rounded to the type).
*/
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "cute/config.hpp"
#include "cutlass/numeric_types.h"

namespace quantgemm {

/// A weight code of Bits bits with the fixed zero point ZeroPoint (GPTQ's symmetric formats).
template <int Bits, int ZeroPoint>
struct FixedZeroPointCode {
  static constexpr int kBits = Bits;
  static constexpr int kZeroPoint = ZeroPoint;
  static constexpr bool kGroupZeros = false;
};

/// A weight code of Bits bits with a zero point per group and column (given to the kernel in the
/// activation type).
template <int Bits>
struct GroupZeroPointCode {
  static constexpr int kBits = Bits;
  static constexpr bool kGroupZeros = true;
};

/// 4-bit weight code with zero point 8.
using u4b8 = FixedZeroPointCode<4, 8>;
/// 4-bit weight code with a zero point per group and column.
using u4 = GroupZeroPointCode<4>;

/// Nibble p of a packed 32-bit word holds value nibble_value(p) of the thread's eight values:
/// the interleave [0, 2, 4, 6, 1, 3, 5, 7].
CUTE_HOST_DEVICE constexpr int nibble_value(int p) { return p < 4 ? 2 * p : 2 * (p - 4) + 1; }
/// Inverse of nibble_value: value v sits in nibble value_nibble(v).
CUTE_HOST_DEVICE constexpr int value_nibble(int v) { return (v % 2) * 4 + v / 2; }

/// The value of a bf16 or fp16 bit pattern, in fp32 (exact).
template <class Element>
CUTE_DEVICE float to_float(uint16_t bits) {
  if constexpr (std::is_same_v<Element, cutlass::half_t>) {
    return __half2float(__ushort_as_half(bits));
  } else {
    return __uint_as_float(uint32_t(bits) << 16);
  }
}

/// (a & b) | c in one instruction.
CUTE_DEVICE uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

/// The bit patterns the converter needs for one 16-bit type: a magic number M whose mantissa has
/// room for a 4-bit code in its low bits (M | q is exactly M + q), and the packed FMA / multiply.
template <class Element>
struct Bits16 {
  static_assert(sizeof(Element) == 0, "quantgemm: no 4-bit converter for this element type");
};

template <>
struct Bits16<cutlass::bfloat16_t> {
  using Pair = __nv_bfloat162;
  static constexpr uint32_t kMagic = 0x43004300u;     // {128, 128}: 7 mantissa bits, step 1
  static constexpr uint32_t kOne = 0x3F803F80u;       // {1, 1}
  static constexpr uint32_t kMinusOne = 0xBF80BF80u;  // {-1, -1}
  static constexpr uint32_t kMinusMagic = 0xC300C300u;
  static constexpr uint32_t kU4b8Offset = 0xC308C308u;  // {-136, -136}: -(128 + 8)
  // the column-sum path's codes: kSumBias + q, the code kSumShift bits up under kSumMagic
  static constexpr uint32_t kSumMagic = kMagic;
  static constexpr int kSumShift = 0;
  static constexpr float kSumBias = 128.f;
  CUTE_DEVICE static Pair fma(Pair a, Pair b, Pair c) { return __hfma2(a, b, c); }
  CUTE_DEVICE static Pair mul(Pair a, Pair b) { return __hmul2(a, b); }
};

template <>
struct Bits16<cutlass::half_t> {
  using Pair = __half2;
  static constexpr uint32_t kMagic = 0x64006400u;     // {1024, 1024}: 10 mantissa bits, step 1
  static constexpr uint32_t kOne = 0x3C003C00u;
  static constexpr uint32_t kMinusOne = 0xBC00BC00u;
  static constexpr uint32_t kMinusMagic = 0xE400E400u;
  static constexpr uint32_t kU4b8Offset = 0xE408E408u;  // {-1032, -1032}: -(1024 + 8)
  // the column-sum path's codes: 64 + q, the code 4 bits up under 64.0 (exponent 6, mantissa steps
  // of 1/16), so that the partial sums are about (64 + z) / |q - z|, 9 times the result's terms,
  // where 1024 + q would make them 130 times
  static constexpr uint32_t kSumMagic = 0x54005400u;  // {64, 64}
  static constexpr int kSumShift = 4;
  static constexpr float kSumBias = 64.f;
  CUTE_DEVICE static Pair fma(Pair a, Pair b, Pair c) { return __hfma2(a, b, c); }
  CUTE_DEVICE static Pair mul(Pair a, Pair b) { return __hmul2(a, b); }
};

/// Converts one interleaved word of eight 4-bit codes into four packed pairs of Element:
/// out[i] = Element({(v[2i] + M + offset[i].x) * scale[i].x, (v[2i+1] + M + offset[i].y) * scale[i].y}),
/// offset = -(M + zero point) for the magic number M of the type; the sum is exact, the product
/// rounded once.
template <class Element>
struct Convert4Bit {
  using B = Bits16<Element>;
  using Pair = typename B::Pair;
  using Offset = Pair;  ///< {-(M + zero), -(M + zero)}
  static constexpr uint32_t kMask = 0x000f000fu;
  /// the mma.sync tiles' column-sum path: biased() gives kSumBias + q
  static constexpr bool kColumnSums = true;
  static constexpr float kSumBias = B::kSumBias;

  template <class T>
  CUTE_DEVICE static T bits_as(uint32_t bits) {
    return reinterpret_cast<T const&>(bits);
  }

  /// {M + v[2i], M + v[2i+1]}, exact: one LOP3.
  CUTE_DEVICE static uint32_t biased_pair(uint32_t word, int i) { return lop3_and_or(word >> (4 * i), kMask, B::kMagic); }

  /// {v[2i] - zero, v[2i+1] - zero}, exact (offset = -(M + zero)).
  CUTE_DEVICE static Pair exact_pair(uint32_t word, int i, Pair offset) {
    return B::fma(bits_as<Pair>(biased_pair(word, i)), bits_as<Pair>(B::kOne), offset);
  }

  /// out[i] = {B::kSumBias + v[2i], ...}, exact: the codes for the column-sum path, one
  /// LOP3 a pair (and the shifts).
  CUTE_DEVICE static void biased(uint32_t word, uint32_t (&out)[4]) {
    constexpr int up = B::kSumShift;
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) {
      uint32_t const w = 4 * i <= up ? word << (up - 4 * i) : word >> (4 * i - up);
      out[i] = lop3_and_or(w, kMask << up, B::kSumMagic);
    }
  }

  /// out[i] = exact_pair(word, i, offset[i]): the codes minus their zero point, unscaled.
  CUTE_DEVICE static void exact(uint32_t word, Pair const (&offset)[4], uint32_t (&out)[4]) {
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) {
      Pair const v = exact_pair(word, i, offset[i]);
      out[i] = reinterpret_cast<uint32_t const&>(v);
    }
  }

  CUTE_DEVICE static void convert(uint32_t word, Pair const (&offset)[4], Pair const (&scale)[4], uint32_t (&out)[4]) {
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) {
      Pair const v = B::mul(exact_pair(word, i, offset[i]), scale[i]);
      out[i] = reinterpret_cast<uint32_t const&>(v);
    }
  }

  /// {-(M + z), -(M + z)} for a zero point z given as a bit pattern of Element (low half).
  CUTE_DEVICE static Pair offset_of(uint32_t zero_bits) {
    return B::fma(bits_as<Pair>(zero_bits | (zero_bits << 16)), bits_as<Pair>(B::kMinusOne),
                  bits_as<Pair>(B::kMinusMagic));
  }

  /// The constant offset of u4b8: -(M + 8).
  CUTE_DEVICE static Pair fixed_offset() { return bits_as<Pair>(B::kU4b8Offset); }

  /// {s, s} for a scale given as a bit pattern of Element (low half).
  CUTE_DEVICE static Pair splat(uint32_t bits) { return bits_as<Pair>(bits | (bits << 16)); }
};

}  // namespace quantgemm
