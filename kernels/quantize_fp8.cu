// Per-token FP8 quantization (include/quantgemm/launch/quantize_fp8.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

template <class T>
__global__ void __launch_bounds__(kThreads) quantize_fp8_kernel(T const* x, int64_t ldx, int K, uint8_t* q, int64_t ldq,
                                                                float* scales) {
  uint4 const* row = reinterpret_cast<uint4 const*>(x + int64_t(blockIdx.x) * ldx);
  int const vectors = K / 8;
  float amax = 0.f;
  for (int i = threadIdx.x; i < vectors; i += kThreads) {
    float f[8];
    widen<T>(row[i], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      amax = fmaxf(amax, fabsf(f[j]));
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
  for (int i = threadIdx.x; i < vectors; i += kThreads) {
    float f[8];
    widen<T>(row[i], f);
    uint8_t b[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      b[j] = __nv_cvt_float_to_fp8(__fdiv_rn(f[j], scale), __NV_SATFINITE, __NV_E4M3);
    }
    out[i] = *reinterpret_cast<uint2 const*>(b);
  }
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
    quantize_fp8_kernel<__half><<<M, kThreads, 0, stream>>>(static_cast<__half const*>(x), ldx, K, q, ldq, scales);
  } else {
    quantize_fp8_kernel<__nv_bfloat16>
        <<<M, kThreads, 0, stream>>>(static_cast<__nv_bfloat16 const*>(x), ldx, K, q, ldq, scales);
  }
  return cudaGetLastError();
}

}  // namespace quantgemm
