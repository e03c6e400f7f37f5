/*! \file
    \brief Host launcher arguments of the W8A8 GEMMs (FP8 e4m3 and INT8): raw pointers, sizes,
           strides and a stream in, a status out; nothing throws.

             out[m, n] = sa * sb * (sum_k a[m, k] * b[n, k] - azp[m] * azp_adj[n]) + bias[n]

    (epilogue/scaled.hpp has each formula as an Sm90EVT tree). a: [M, K] e4m3 or int8, row stride lda; b: the [N, K]
    weight, same type, row stride ldb (K contiguous in both); out: [M, N] bf16 or fp16, row stride
    ldo. K, lda and ldb multiples of 16 elements, N and ldo multiples of 8; 16-byte aligned bases.
    Schedules that split K (stream-K) need `workspace`; a launch that needs more than given returns
    kWorkspaceTooSmall with the bytes it needs, launching nothing.
*/
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "quantgemm/launch/status.hpp"

namespace quantgemm {

/// The scalars and vectors an epilogue reads, in the user's coordinates.
struct ScaledEpilogueParams {
  float const* scale_a = nullptr;    ///< sa: [M] when scale_a_per_token, else one value
  bool scale_a_per_token = false;
  float const* scale_b = nullptr;    ///< sb: [N] when scale_b_per_channel, else one value
  bool scale_b_per_channel = false;
  void const* bias = nullptr;        ///< [N] in the output type, or nullptr
  bool out_fp16 = false;             ///< the output (and bias) dtype: fp16, else bf16
  int32_t const* azp_adj = nullptr;  ///< [N], or nullptr
  int32_t const* azp = nullptr;      ///< [M], or nullptr
};

/// What every 8-bit GEMM takes (W8A8 and block-scaled): the operands, the output, the scratch.
struct Gemm8BitArgs {
  void const* a = nullptr;
  int64_t lda = 0;
  void const* b = nullptr;
  int64_t ldb = 0;
  void* out = nullptr;
  int64_t ldo = 0;
  int M = 0;
  int N = 0;
  int K = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

struct ScaledMmArgs : Gemm8BitArgs {
  ScaledEpilogueParams epilogue;  ///< scales, bias and zero-point corrections
};

/// Launches one compiled schedule.
using ScaledMmLaunchFn = LaunchResult (*)(ScaledMmArgs const&);

/// The operand checks of the 8-bit GEMMs: what the TMA needs of 8-bit operands and a 16-bit output.
inline bool tma_8bit_operands_valid(Gemm8BitArgs const& x) {
  return x.M >= 0 && x.N > 0 && x.K > 0 && x.N % 8 == 0 && x.K % 16 == 0 && x.lda >= x.K && x.lda % 16 == 0 &&
         x.ldb >= x.K && x.ldb % 16 == 0 && x.ldo >= x.N && x.ldo % 8 == 0 &&
         (x.M == 0 || (x.a && x.b && x.out && aligned(x.a, 16) && aligned(x.b, 16) && aligned(x.out, 16)));
}

/// Structural checks shared by every schedule.
inline bool scaled_mm_args_valid(ScaledMmArgs const& x) {
  return tma_8bit_operands_valid(x) && (x.M == 0 || (x.epilogue.scale_a && x.epilogue.scale_b));
}

}  // namespace quantgemm
