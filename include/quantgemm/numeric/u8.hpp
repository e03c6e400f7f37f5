/*! \file
    \brief 8-bit unsigned weight codes and their register converters to bf16 / fp16.

             u8b128: value = q - 128 (GPTQ's symmetric 8-bit weights)
             u8:     value = q - z[k / group, n] (a zero point per group and column)

             2 x 32-bit words of four 8-bit codes (the thread's 8 values of one k16 step, value v in
             byte v % 4 of word v / 4)  ->  4 x bf16x2 (or fp16x2) holding (q - zero) * s

    fp16: one PRMT per pair puts two codes under the magic number 1024 (0x64: 10 mantissa bits hold
    any 8-bit code), giving exactly 1024 + q; one packed FMA adds -(1024 + zero) (exact), one packed
    multiply applies the scale (rounded once). bf16 has only 7 mantissa bits, so each code goes
    through fp32 instead: one PRMT gives 2^23 + q, one FADD subtracts 2^23 + zero (exact), one
    conversion packs two of them into bf16x2 (exact: |q - zero| < 256), one packed multiply applies
    the scale (rounded once). Either way the weight is (q - zero) * s rounded once to the type, as
    the reference computes it.
*/
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cute/config.hpp"
#include "cutlass/numeric_types.h"
#include "quantgemm/numeric/u4.hpp"

namespace quantgemm {

/// 8-bit weight code with zero point 128.
using u8b128 = FixedZeroPointCode<8, 128>;
/// 8-bit weight code with a zero point per group and column.
using u8 = GroupZeroPointCode<8>;

/// d = bytes of {a, b} picked by `selector` (PRMT).
CUTE_DEVICE uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

template <class Element>
struct Convert8Bit {
  static_assert(sizeof(Element) == 0, "quantgemm: no 8-bit converter for this element type");
};

/// The loops over a thread's two words of an 8-bit converter (Derived: its exact_pair, Pair, Offset).
template <class Derived>
struct Convert8BitWords {
  /// out[r] = Derived::exact_pair(r): the pair of values {2r, 2r + 1} minus their zero point, exact.
  template <class Offset>
  CUTE_DEVICE static void exact(uint32_t word0, uint32_t word1, Offset const (&offset)[4], uint32_t (&out)[4]) {
    uint32_t const words[2] = {word0, word1};
    CUTE_UNROLL
    for (int r = 0; r < 4; ++r) {
      auto const v = Derived::exact_pair(words, r, offset[r]);
      out[r] = reinterpret_cast<uint32_t const&>(v);
    }
  }

  /// out[r] = the pair of values {2r, 2r + 1} (rows of offset[r] and scale[r]).
  template <class Offset, class Pair>
  CUTE_DEVICE static void convert(uint32_t word0, uint32_t word1, Offset const (&offset)[4], Pair const (&scale)[4],
                                  uint32_t (&out)[4]) {
    uint32_t const words[2] = {word0, word1};
    CUTE_UNROLL
    for (int r = 0; r < 4; ++r) {
      Pair const v = __hmul2(Derived::exact_pair(words, r, offset[r]), scale[r]);
      out[r] = reinterpret_cast<uint32_t const&>(v);
    }
  }
};

/// fp16: the codes under the magic number 1024.
template <>
struct Convert8Bit<cutlass::half_t> : Convert8BitWords<Convert8Bit<cutlass::half_t>> {
  using B = Bits16<cutlass::half_t>;
  using Pair = __half2;
  using Offset = Pair;  ///< {-(1024 + zero), -(1024 + zero)}
  static constexpr uint32_t kMagicBytes = 0x64646464u;
  static constexpr uint32_t kU8b128Offset = 0xE480E480u;  // {-1152, -1152}: -(1024 + 128)

  template <class T>
  CUTE_DEVICE static T bits_as(uint32_t bits) {
    return reinterpret_cast<T const&>(bits);
  }

  /// The pair of values {2r, 2r + 1} of the words under 1024: {1024 + q, 1024 + q'}, exact.
  CUTE_DEVICE static uint32_t biased_pair(uint32_t const (&words)[2], int r) {
    // bytes {2r, 2r + 1} % 4 of the word, each under 0x64
    return prmt(words[r / 2], kMagicBytes, (r % 2) ? 0x7372u : 0x7170u);
  }

  /// The pair of values {2r, 2r + 1} of the words, minus their zero point: exact.
  CUTE_DEVICE static Pair exact_pair(uint32_t const (&words)[2], int r, Offset offset) {
    return __hfma2(bits_as<Pair>(biased_pair(words, r)), bits_as<Pair>(B::kOne), offset);
  }

  /// the mma.sync tiles' column-sum path: out[r] = biased_pair(r), 1024 + q (one PRMT a pair; the
  /// partial sums are then about 18 times the result's terms, (1024 + z) / |q - z|)
  static constexpr bool kColumnSums = true;
  static constexpr float kSumBias = 1024.f;
  CUTE_DEVICE static void biased(uint32_t word0, uint32_t word1, uint32_t (&out)[4]) {
    uint32_t const words[2] = {word0, word1};
    CUTE_UNROLL
    for (int r = 0; r < 4; ++r) {
      out[r] = biased_pair(words, r);
    }
  }

  /// The offset of a zero point given as the bit pattern of an fp16 integer (low half).
  CUTE_DEVICE static Offset offset_of(uint32_t zero_bits) { return Convert4Bit<cutlass::half_t>::offset_of(zero_bits); }
  CUTE_DEVICE static Offset fixed_offset() { return bits_as<Pair>(kU8b128Offset); }
  /// {s, s} for a scale given as a bit pattern (low half).
  CUTE_DEVICE static Pair splat(uint32_t bits) { return Convert4Bit<cutlass::half_t>::splat(bits); }
};

/// bf16: each code through fp32.
template <>
struct Convert8Bit<cutlass::bfloat16_t> : Convert8BitWords<Convert8Bit<cutlass::bfloat16_t>> {
  using Pair = __nv_bfloat162;
  using Offset = float;  ///< -(2^23 + zero)
  static constexpr bool kColumnSums = false;  ///< (bf16 holds no biased 8-bit code)
  static constexpr uint32_t kMagicBytes = 0x4B000000u;  // fp32 2^23: its low 23 bits hold a code exactly
  static constexpr float kU8b128Offset = -8388736.0f;   // -(2^23 + 128)

  /// The pair of values {2r, 2r + 1} of the words, minus their zero point: exact.
  CUTE_DEVICE static Pair exact_pair(uint32_t const (&words)[2], int r, Offset offset) {
    // byte b of the word into the low byte of 2^23: 0x4B0000bb = 2^23 + q
    uint32_t const lo_selector = (r % 2) ? 0x7442u : 0x7440u;  // bytes: {2r % 4, 0, 0, 0x4B}
    uint32_t const hi_selector = (r % 2) ? 0x7443u : 0x7441u;
    float const lo = __uint_as_float(prmt(words[r / 2], kMagicBytes, lo_selector)) + offset;
    float const hi = __uint_as_float(prmt(words[r / 2], kMagicBytes, hi_selector)) + offset;
    return __floats2bfloat162_rn(lo, hi);
  }

  /// The offset of a zero point given as the bit pattern of a bf16 integer (low half).
  CUTE_DEVICE static Offset offset_of(uint32_t zero_bits) { return -8388608.0f - __uint_as_float(zero_bits << 16); }
  CUTE_DEVICE static Offset fixed_offset() { return kU8b128Offset; }
  /// {s, s} for a scale given as a bit pattern (low half).
  CUTE_DEVICE static Pair splat(uint32_t bits) { return Convert4Bit<cutlass::bfloat16_t>::splat(bits); }
};

}  // namespace quantgemm
