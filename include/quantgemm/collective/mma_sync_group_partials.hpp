/*! \file
    \brief Group scales applied to fp32 partial sums, for the mma.sync mainloops (the sm80 kernel,
           the sm90 8-token tiles):

             part   = sum_{k in group} c[n, k] * a[m, k]                  (mma.sync, fp32)
             acc   += s[group, n] * (part + offset[n] * sums[m])          (once per group)

           c = q - zero exactly with offset unused, or (ColumnSums) c = b + q, the code biased
           under the converter's constant b (bf16 128 + q, fp16 64 + q), sums[m] =
           sum_{k in group} a[m, k] (one more mma a k16 step, with an A operand of ones) and offset =
           -(b + zero). Either way the weight is s (q - zero) unrounded
           (reference.mm_quantized(..., exact_weight=True)), one FMA per accumulator and group where
           scaling each code costs a packed multiply per pair of codes.

    The accumulators are m16n8 fragments (lane l, g = l / 4, q = l % 4): element i of a tile holds
    row g + 8 (i / 2) and token 2q + i % 2, so scale and offset are kept per row pair, the column
    sums per token pair.
*/
#pragma once

#include <cstdint>
#include <type_traits>

#include "cute/config.hpp"

#include "quantgemm/arch/mma_sync.hpp"

namespace quantgemm {

/// Every element of a (nested) register array to zero.
template <class T, int N>
CUTE_DEVICE void zero(T (&a)[N]) {
  CUTE_UNROLL
  for (int i = 0; i < N; ++i) {
    if constexpr (std::is_array_v<T>) {
      zero(a[i]);
    } else {
      a[i] = T(0);
    }
  }
}

/// The column-sum path's offset for a converter whose codes are kSumBias + q: -(kSumBias + zero)
/// comes off times the column sums (exact below 2^11, or 2^23 + 255), since (kSumBias + q) + offset
/// = q - zero. (Every converter's codes step by 1, so that the sums are in the group scale's units:
/// fp16's 4-bit codes sit under 64.0, not 1.0, which would take a multiply a scale.)
template <class Convert>
CUTE_HOST_DEVICE constexpr float column_sum_offset(float zero) {
  return -(Convert::kSumBias + zero);
}

/// A lane's accumulators of Tiles m16 row tiles x TokenTiles n8 token tiles, with the current
/// group's partial sums spread over Sets independent sets (for the latency of a chain of mmas).
template <int Tiles, int TokenTiles, bool ColumnSums, class Offset, int Sets = 1>
struct GroupPartials {
  float acc[Tiles][TokenTiles][4];
  float part[Sets][Tiles][TokenTiles][4];       ///< the current group's sums of c a
  float sums[ColumnSums ? TokenTiles : 1][4];   ///< ColumnSums: the group's sums of a, tokens 2q (+ 1)
  float scale[Tiles][2];                        ///< the group scale of rows g (+ 8) of each tile
  Offset offset[Tiles][2];                      ///< the converter's offset of the same rows

  CUTE_DEVICE void clear_group() {
    zero(part);
    zero(sums);
  }

  /// sums[j] += the column sums of token tile j's k16 fragment b (ColumnSums).
  template <class Element>
  CUTE_DEVICE void add_column_sums(int j, uint32_t const (&b)[2]) {
    constexpr uint32_t kOnes = std::is_same_v<Element, cutlass::half_t> ? 0x3C003C00u : 0x3F803F80u;
    mma_16816<Element>(sums[j], {kOnes, kOnes, kOnes, kOnes}, b);
  }

  /// The accumulators into a wgmma accumulator fragment of m64n8 tiles, which lays them out alike
  /// (one token tile: element v of row tile t is the fragment's element v + 4 t).
  template <class Fragment>
  CUTE_DEVICE void copy_to(Fragment& out) const {
    static_assert(TokenTiles == 1);
    CUTE_UNROLL
    for (int t = 0; t < Tiles; ++t) {
      CUTE_UNROLL
      for (int v = 0; v < 4; ++v) {
        out(v + 4 * t) = acc[t][0][v];
      }
    }
  }

  /// acc += scale * (part [+ offset * sums]), then a new group.
  CUTE_DEVICE void flush() {
    CUTE_UNROLL
    for (int t = 0; t < Tiles; ++t) {
      CUTE_UNROLL
      for (int j = 0; j < TokenTiles; ++j) {
        CUTE_UNROLL
        for (int i = 0; i < 4; ++i) {
          float x = part[0][t][j][i];
          CUTE_UNROLL
          for (int s = 1; s < Sets; ++s) {
            x += part[s][t][j][i];
          }
          if constexpr (ColumnSums) {
            x = fmaf(offset[t][i / 2], sums[j][i % 2], x);
          }
          acc[t][j][i] = fmaf(scale[t][i / 2], x, acc[t][j][i]);
        }
      }
    }
    clear_group();
  }
};

}  // namespace quantgemm
