// The reduction of split-K partials (include/quantgemm/launch/split_k_reduce.hpp).
#include <climits>

#include "quantgemm/arch/grid_dependency.hpp"
#include "quantgemm/launch/split_k_reduce.hpp"
#include "quantgemm/launch/status.hpp"

namespace quantgemm {
namespace {

constexpr int kThreads = 128;
constexpr int kColumns = 8;  // a thread's columns: two 16-byte loads a slice, one 16-byte store

struct ReduceParams {
  float const* partials;
  int splits;
  int64_t slice;  ///< M * N, floats between slices
  int N;
  int64_t work;   ///< M * N / kColumns, the threads with columns to sum
  __nv_bfloat16* out;
  int64_t ldo;
};

__global__ void __launch_bounds__(kThreads) split_k_reduce_kernel(ReduceParams p) {
  // the next kernel may begin launching (it waits for this one before reading its output); this
  // one waits for the GEMM that wrote the partials
  allow_next_kernel();
  wait_for_previous_kernel();
  int64_t const i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= p.work) {
    return;
  }
  int64_t const m = i / (p.N / kColumns);
  int64_t const n = i % (p.N / kColumns) * kColumns;
  float4 const* src = reinterpret_cast<float4 const*>(p.partials + m * p.N + n);
  int64_t const step = p.slice / 4;  // float4s between slices
  float4 lo = src[0];
  float4 hi = src[1];
  for (int s = 1; s < p.splits; ++s) {
    float4 const a = src[s * step];
    float4 const b = src[s * step + 1];
    lo = make_float4(lo.x + a.x, lo.y + a.y, lo.z + a.z, lo.w + a.w);
    hi = make_float4(hi.x + b.x, hi.y + b.y, hi.z + b.z, hi.w + b.w);
  }
  __nv_bfloat162 const v[4] = {__floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
                               __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w)};
  *reinterpret_cast<uint4*>(p.out + m * p.ldo + n) = *reinterpret_cast<uint4 const*>(v);
}

}  // namespace

cudaError_t split_k_reduce(float const* partials, int splits, int M, int N, __nv_bfloat16* out, int64_t ldo,
                           cudaStream_t stream) {
  int64_t const work = int64_t(M) * (N / kColumns);
  if (M < 0 || N <= 0 || N % kColumns || ldo < N || ldo % kColumns || splits < 1 || !aligned(partials, 16) ||
      !aligned(out, 16) || (work + kThreads - 1) / kThreads > INT_MAX) {
    return cudaErrorInvalidValue;
  }
  if (M == 0) {
    return cudaSuccess;
  }
  ReduceParams const p{partials, splits, int64_t(M) * N, N, work, out, ldo};
  int const grid = int((work + kThreads - 1) / kThreads);
  return launch_kernel(&split_k_reduce_kernel, grid, kThreads, 0, stream, compute_capability() >= 90, p);
}

}  // namespace quantgemm
