/*! \file
    \brief The warp-level tensor-core instructions shared by the sm80 kernel and the sm90 decode
           mainloop: ldmatrix and mma.sync m16n8k16 with fp32 accumulators.
*/
#pragma once

#include <cstdint>
#include <type_traits>

#include "cute/config.hpp"
#include "cutlass/numeric_types.h"

namespace quantgemm {

CUTE_DEVICE uint32_t smem_address(void const* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

/// Shared-memory loads at a shared-window address (smem_address).
CUTE_DEVICE uint4 lds128(uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(address));
  return v;
}
CUTE_DEVICE void sts128(uint32_t address, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
CUTE_DEVICE void sts32(uint32_t address, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(v));
}
CUTE_DEVICE uint32_t lds32(uint32_t address) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(address));
  return v;
}
CUTE_DEVICE uint16_t lds16(uint32_t address) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(address));
  return v;
}

/// Two 8x8 b16 matrices: lanes 0-7 address the first's rows, lanes 8-15 the second's.
CUTE_DEVICE void ldmatrix_x2(uint32_t (&r)[2], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
}

/// Four 8x8 b16 matrices: lanes 8i ... 8i + 7 address the rows of matrix i.
CUTE_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// d += a b, m16n8k16, fp32 accumulators. The fragments (lane l, g = l / 4, q = l % 4): a = rows
/// {g, g + 8, g, g + 8} x k {2q, 2q + 1 | 2q + 8, 2q + 9}; b = k {2q, 2q + 1 | 2q + 8, 2q + 9} of
/// column g; d = rows {g, g, g + 8, g + 8} x columns {2q, 2q + 1, 2q, 2q + 1}.
template <class Element>
CUTE_DEVICE void mma_16816(float (&d)[4], uint32_t const (&a)[4], uint32_t const (&b)[2]) {
  if constexpr (std::is_same_v<Element, cutlass::half_t>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

}  // namespace quantgemm
