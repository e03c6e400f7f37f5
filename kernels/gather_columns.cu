// GPTQ act-order's activation gather (include/quantgemm/launch/gather_columns.hpp).
#include <climits>

#include "quantgemm/arch/grid_dependency.hpp"
#include "quantgemm/launch/gather_columns.hpp"
#include "quantgemm/launch/status.hpp"

namespace quantgemm {
namespace {

constexpr int kThreads = 128;
constexpr int kColumns = 8;  // a thread's columns of a row: one 16-byte (8-byte) store

struct GatherParams {
  void const* x;
  int64_t ldx;
  int K;
  int column_blocks;  ///< CTAs a row
  int64_t const* perm;
  void* out;
  int64_t ldo;
};

/// Row blockIdx.x / column_blocks, columns from (blockIdx.x % column_blocks * kThreads + threadIdx.x)
/// * kColumns: Word is the element, Vector kColumns of them.
template <class Word, class Vector>
__global__ void __launch_bounds__(kThreads) gather_columns_kernel(GatherParams p) {
  // a GEMM launched after this kernel with programmatic dependent launch may start streaming its
  // weight now (it waits for this kernel to complete before it reads the gathered activation); this
  // kernel, launched so too, waits for the kernel before it (which may write x) before reading x
  allow_next_kernel();
  int const m = int(blockIdx.x) / p.column_blocks;
  int const j = (int(blockIdx.x) % p.column_blocks * kThreads + int(threadIdx.x)) * kColumns;
  if (j >= p.K) {
    return;
  }
  longlong2 index[kColumns / 2];
#pragma unroll
  for (int i = 0; i < kColumns / 2; ++i) {
    index[i] = reinterpret_cast<longlong2 const*>(p.perm + j)[i];
  }
  wait_for_previous_kernel();
  Word const* row = static_cast<Word const*>(p.x) + int64_t(m) * p.ldx;
  Word v[kColumns];
#pragma unroll
  for (int i = 0; i < kColumns / 2; ++i) {
    v[2 * i] = row[index[i].x];
    v[2 * i + 1] = row[index[i].y];
  }
  *reinterpret_cast<Vector*>(static_cast<Word*>(p.out) + int64_t(m) * p.ldo + j) = *reinterpret_cast<Vector const*>(v);
}

}  // namespace

cudaError_t gather_columns(void const* x, int element_bytes, int64_t ldx, int M, int K, int64_t const* perm,
                           void* out, int64_t ldo, cudaStream_t stream) {
  int const column_blocks = (K / kColumns + kThreads - 1) / kThreads;
  if (M < 0 || K <= 0 || K % kColumns || (element_bytes != 1 && element_bytes != 2) || ldx < K || ldo < K ||
      ldo % kColumns || int64_t(M) * column_blocks > INT_MAX || !aligned(perm, 16) ||
      !aligned(out, kColumns * element_bytes)) {
    return cudaErrorInvalidValue;
  }
  if (M == 0) {
    return cudaSuccess;
  }
  GatherParams const p{x, ldx, K, column_blocks, perm, out, ldo};
  auto* kernel = element_bytes == 2 ? &gather_columns_kernel<uint16_t, uint4> : &gather_columns_kernel<uint8_t, uint2>;
  // programmatic dependent launch on Hopper (QUANTGEMM_PDL=0 turns it off): the launch overlaps the
  // previous kernel's tail, and the GEMM after it overlaps this one
  return launch_kernel(kernel, M * column_blocks, kThreads, 0, stream, compute_capability() >= 90, p);
}

}  // namespace quantgemm
