// Per-token FP8 quantization (include/quantgemm/launch/quantize_fp8.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "quantgemm/arch/grid_dependency.hpp"
#include "quantgemm/launch/quantize_fp8.hpp"

namespace quantgemm {
namespace {

constexpr int kThreads = 256;
constexpr float kFp8Max = 448.0f;
constexpr float kTiny = 1e-12f;

template <class T>
__device__ void widen(uint4 v, float (&f)[8]) {
  T const* h = reinterpret_cast<T const*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    f[i] = float(h[i]);
  }
}

/// V > 0: each thread keeps its (at most V) 16-byte vectors of the row in registers between the two
/// passes; V = 0: the second pass reads the row again.
template <class T, int V>
__global__ void __launch_bounds__(kThreads) quantize_fp8_kernel(T const* x, int64_t ldx, int K, uint8_t* q, int64_t ldq,
                                                                float* scales) {
  // a GEMM launched after this kernel with programmatic dependent launch may start streaming its
  // weight now; it waits for this kernel to complete before it reads the quantized activation
  allow_next_kernel();
  uint4 const* row = reinterpret_cast<uint4 const*>(x + int64_t(blockIdx.x) * ldx);
  int const vectors = K / 8;
  uint4 held[V > 0 ? V : 1];
  float amax = 0.f;
  auto absmax = [&](uint4 v) {
    float f[8];
    widen<T>(v, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      amax = fmaxf(amax, fabsf(f[j]));
    }
  };
  if constexpr (V > 0) {
#pragma unroll
    for (int u = 0; u < V; ++u) {
      int const i = threadIdx.x + u * kThreads;
      if (i < vectors) {
        held[u] = row[i];
        absmax(held[u]);
      }
    }
  } else {
    for (int i = threadIdx.x; i < vectors; i += kThreads) {
      absmax(row[i]);
    }
  }
  __shared__ float warp_max[kThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  }
  if (threadIdx.x % 32 == 0) {
    warp_max[threadIdx.x / 32] = amax;
  }
  __syncthreads();
  amax = warp_max[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) {
    amax = fmaxf(amax, warp_max[w]);
  }
  float const scale = fmaxf(amax, kTiny) / kFp8Max;
  if (threadIdx.x == 0) {
    scales[blockIdx.x] = scale;
  }
  uint2* out = reinterpret_cast<uint2*>(q + int64_t(blockIdx.x) * ldq);
  auto store = [&](int i, uint4 v) {
    float f[8];
    widen<T>(v, f);
    uint8_t b[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      b[j] = __nv_cvt_float_to_fp8(__fdiv_rn(f[j], scale), __NV_SATFINITE, __NV_E4M3);
    }
    out[i] = *reinterpret_cast<uint2 const*>(b);
  };
  if constexpr (V > 0) {
#pragma unroll
    for (int u = 0; u < V; ++u) {
      int const i = threadIdx.x + u * kThreads;
      if (i < vectors) {
        store(i, held[u]);
      }
    }
  } else {
    for (int i = threadIdx.x; i < vectors; i += kThreads) {
      store(i, row[i]);
    }
  }
}

template <class T>
void launch(T const* x, int64_t ldx, int M, int K, uint8_t* q, int64_t ldq, float* scales, cudaStream_t stream) {
  int const per_thread = (K / 8 + kThreads - 1) / kThreads;
  auto* kernel = per_thread <= 1   ? &quantize_fp8_kernel<T, 1>
                 : per_thread <= 2 ? &quantize_fp8_kernel<T, 2>
                 : per_thread <= 4 ? &quantize_fp8_kernel<T, 4>
                 : per_thread <= 8 ? &quantize_fp8_kernel<T, 8>
                 : per_thread <= 16 ? &quantize_fp8_kernel<T, 16>
                                    : &quantize_fp8_kernel<T, 0>;
  kernel<<<M, kThreads, 0, stream>>>(x, ldx, K, q, ldq, scales);
}

}  // namespace

cudaError_t quantize_fp8_per_token(void const* x, bool x_is_fp16, int64_t ldx, int M, int K, uint8_t* q, int64_t ldq,
                                   float* scales, cudaStream_t stream) {
  if (M < 0 || K <= 0 || K % 8 || ldx % 8 || ldq % 8 || ldx < K || ldq < K) {
    return cudaErrorInvalidValue;
  }
  if (M == 0) {
    return cudaSuccess;
  }
  if (x_is_fp16) {
    launch(static_cast<__half const*>(x), ldx, M, K, q, ldq, scales, stream);
  } else {
    launch(static_cast<__nv_bfloat16 const*>(x), ldx, M, K, q, ldq, scales, stream);
  }
  return cudaGetLastError();
}

}  // namespace quantgemm
