// Prepacking of 4-bit weight codes (include/quantgemm/launch/prepack_b.hpp): the GPU kernel and the
// host reference both gather through PrepackedBLayout.
#include "quantgemm/launch/prepack_b.hpp"
#include "quantgemm/layout/prepacked_b.hpp"

namespace quantgemm {
namespace {

using Layout = PrepackedBLayout<u4b8>;

bool shape_ok(int N, int K) { return N > 0 && K > 0 && N % Layout::kBlockN == 0 && K % Layout::kBlockK == 0; }

__global__ void prepack_b_u4b8_kernel(uint8_t const* codes, int K, int64_t words, uint32_t* packed) {
  int64_t const w = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w < words) {
    packed[w] = Layout::gather_word(codes, K, w);
  }
}

}  // namespace

cudaError_t prepack_b_u4b8(uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream) {
  if (!shape_ok(N, K)) {
    return cudaErrorInvalidValue;
  }
  int64_t const words = int64_t(N) * K / 8;
  int const threads = 256;
  prepack_b_u4b8_kernel<<<unsigned((words + threads - 1) / threads), threads, 0, stream>>>(
      codes, K, words, reinterpret_cast<uint32_t*>(packed));
  return cudaGetLastError();
}

void prepack_b_u4b8_host(uint8_t const* codes, int N, int K, uint8_t* packed) {
  if (!shape_ok(N, K)) {
    return;
  }
  int64_t const words = int64_t(N) * K / 8;
  for (int64_t w = 0; w < words; ++w) {
    uint32_t const word = Layout::gather_word(codes, K, w);
    for (int byte = 0; byte < 4; ++byte) {
      packed[4 * w + byte] = uint8_t(word >> (8 * byte));
    }
  }
}

void unpack_b_u4b8_host(uint8_t const* packed, int N, int K, uint8_t* codes) {
  if (!shape_ok(N, K)) {
    return;
  }
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) {
      int64_t const e = Layout::code_offset(n, k, K);
      codes[int64_t(n) * K + k] = (packed[e / 2] >> (4 * (e % 2))) & 0xfu;
    }
  }
}

}  // namespace quantgemm
