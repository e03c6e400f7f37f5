// Read-only bandwidth probe (include/quantgemm/launch/stream_read.hpp).
#include "quantgemm/launch/stream_read.hpp"

namespace quantgemm {
namespace {

constexpr int kBlocks = 1024;
constexpr int kThreads = 512;
constexpr int kUnroll = 4;

__global__ void __launch_bounds__(kThreads) stream_read_kernel(uint4 const* src, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  int64_t const stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = __ldcs(src + i + u * stride);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
  }
  for (; i < n; i += stride) {
    uint4 const v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if (threadIdx.x == 0) {
    sink[blockIdx.x] = acc;
  }
}

}  // namespace

cudaError_t stream_read(void const* src, int64_t bytes, uint32_t* sink, cudaStream_t stream) {
  if (bytes <= 0 || bytes % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  stream_read_kernel<<<kBlocks, kThreads, 0, stream>>>(static_cast<uint4 const*>(src), bytes / 16, sink);
  return cudaGetLastError();
}

}  // namespace quantgemm
