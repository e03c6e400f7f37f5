// Prepacking of 4- and 8-bit weight codes (include/quantgemm/launch/prepack_b.hpp): the GPU kernel
// and the host reference both gather through PrepackedBLayout.
#include "quantgemm/launch/prepack_b.hpp"
#include "quantgemm/layout/prepacked_b.hpp"
#include "quantgemm/layout/prepacked_b_sm80.hpp"

namespace quantgemm {
namespace {

template <class Layout>
bool shape_ok(int N, int K) {
  return N > 0 && K > 0 && N % Layout::kBlockN == 0 && K % Layout::kBlockK == 0;
}

template <class Layout>
int64_t words_of(int N, int K) {
  return int64_t(N) * K / Layout::kCodesPerWord;
}

template <class Layout>
__global__ void prepack_b_kernel(uint8_t const* codes, int K, int64_t words, uint32_t* packed) {
  int64_t const w = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w < words) {
    packed[w] = Layout::gather_word(codes, K, w);
  }
}

template <class Layout>
cudaError_t prepack(uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream) {
  if (!shape_ok<Layout>(N, K)) {
    return cudaErrorInvalidValue;
  }
  int64_t const words = words_of<Layout>(N, K);
  int const threads = 256;
  prepack_b_kernel<Layout><<<unsigned((words + threads - 1) / threads), threads, 0, stream>>>(
      codes, K, words, reinterpret_cast<uint32_t*>(packed));
  return cudaGetLastError();
}

template <class Layout>
void prepack_host(uint8_t const* codes, int N, int K, uint8_t* packed) {
  if (!shape_ok<Layout>(N, K)) {
    return;
  }
  int64_t const words = words_of<Layout>(N, K);
  for (int64_t w = 0; w < words; ++w) {
    uint32_t const word = Layout::gather_word(codes, K, w);
    for (int byte = 0; byte < 4; ++byte) {
      packed[4 * w + byte] = uint8_t(word >> (8 * byte));
    }
  }
}

template <class Layout>
void unpack_host(uint8_t const* packed, int N, int K, uint8_t* codes) {
  if (!shape_ok<Layout>(N, K)) {
    return;
  }
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) {
      int64_t const bit = Layout::code_offset(n, k, K) * Layout::kBits;
      codes[int64_t(n) * K + k] = (packed[bit / 8] >> (bit % 8)) & Layout::kCodeMask;
    }
  }
}

using Layout4 = PrepackedBLayoutOfBits<4>;
using Layout8 = PrepackedBLayoutOfBits<8>;

using Sm80Layout4 = Sm80PrepackedBLayoutOfBits<4>;
using Sm80Layout8 = Sm80PrepackedBLayoutOfBits<8>;

using E4m3Layout = PrepackedBLayoutE4m3;

}  // namespace

cudaError_t prepack_b_u4b8(uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream) {
  return prepack<Layout4>(codes, N, K, packed, stream);
}

void prepack_b_u4b8_host(uint8_t const* codes, int N, int K, uint8_t* packed) {
  prepack_host<Layout4>(codes, N, K, packed);
}

void unpack_b_u4b8_host(uint8_t const* packed, int N, int K, uint8_t* codes) {
  unpack_host<Layout4>(packed, N, K, codes);
}

cudaError_t prepack_b_u8(uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream) {
  return prepack<Layout8>(codes, N, K, packed, stream);
}

void prepack_b_u8_host(uint8_t const* codes, int N, int K, uint8_t* packed) {
  prepack_host<Layout8>(codes, N, K, packed);
}

void unpack_b_u8_host(uint8_t const* packed, int N, int K, uint8_t* codes) {
  unpack_host<Layout8>(packed, N, K, codes);
}

cudaError_t prepack_b_sm80(int bits, uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream) {
  return bits == 8 ? prepack<Sm80Layout8>(codes, N, K, packed, stream) : prepack<Sm80Layout4>(codes, N, K, packed, stream);
}

void prepack_b_sm80_host(int bits, uint8_t const* codes, int N, int K, uint8_t* packed) {
  bits == 8 ? prepack_host<Sm80Layout8>(codes, N, K, packed) : prepack_host<Sm80Layout4>(codes, N, K, packed);
}

void unpack_b_sm80_host(int bits, uint8_t const* packed, int N, int K, uint8_t* codes) {
  bits == 8 ? unpack_host<Sm80Layout8>(packed, N, K, codes) : unpack_host<Sm80Layout4>(packed, N, K, codes);
}

cudaError_t prepack_b_e4m3(uint8_t const* codes, int N, int K, uint8_t* packed, cudaStream_t stream) {
  return prepack<E4m3Layout>(codes, N, K, packed, stream);
}

void prepack_b_e4m3_host(uint8_t const* codes, int N, int K, uint8_t* packed) {
  prepack_host<E4m3Layout>(codes, N, K, packed);
}

void unpack_b_e4m3_host(uint8_t const* packed, int N, int K, uint8_t* codes) {
  unpack_host<E4m3Layout>(packed, N, K, codes);
}

}  // namespace quantgemm
