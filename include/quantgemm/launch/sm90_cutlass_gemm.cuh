/*! \file
    \brief Sets up and runs one configured CUTLASS GemmUniversalAdapter with quantgemm's launch protocol: the
           workspace is the caller's (kWorkspaceTooSmall with the bytes needed, nothing launched,
           when it is short), an unsupported problem is kInvalidArgument, a launch failure
           kCudaError; nothing throws. Shared by the W8A8 and block-scaled launchers.
*/
#pragma once

#include <cstddef>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/gemm/gemm.h"
#include "quantgemm/launch/status.hpp"

namespace quantgemm {

/// Whether the CUTLASS sm90 kernels of this translation unit wait for the kernel before them
/// (griddepcontrol) before they touch global memory, and let the next one launch as their last
/// tiles run: a generated translation unit defines CUTLASS_ENABLE_GDC_FOR_SM90 before its includes
/// (but for stream-K schedules). Only such kernels are launched with programmatic dependent launch
/// (QUANTGEMM_PDL=0 turns it off).
#if defined(CUTLASS_ENABLE_GDC_FOR_SM90)
constexpr bool kCutlassKernelsWait = true;
#else
constexpr bool kCutlassKernelsWait = false;
#endif

/// Whether a launcher goes on to launch: arguments valid (else kInvalidArgument), M > 0 (else a
/// successful no-op) and an sm_90 device (else kCudaError, cudaErrorNoKernelImageForDevice).
inline bool ready_to_launch(bool args_valid, int M, LaunchResult& result) {
  if (!args_valid) {
    result.status = Status::kInvalidArgument;
    return false;
  }
  if (M == 0) {
    return false;
  }
  if (compute_capability() != 90) {
    result.status = Status::kCudaError;
    result.cuda = cudaErrorNoKernelImageForDevice;
    return false;
  }
  return true;
}

/// The operands of a GemmUniversal argument struct from launcher arguments X (a, lda, b, ldb, out,
/// ldo, M, N, K; K contiguous in both operands): with Swap the kernel computes D^T = B A^T, its rows
/// the weight's, and writes out column-major.
template <bool Swap, class ElementAB, class ElementD, class Kernel, class GemmArguments, class X>
void set_gemm_operands(GemmArguments& args, X const& x) {
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {Swap ? x.N : x.M, Swap ? x.M : x.N, x.K, 1};
  args.mainloop.ptr_A = static_cast<ElementAB const*>(Swap ? x.b : x.a);
  args.mainloop.dA = cute::make_stride(Swap ? x.ldb : x.lda, cute::Int<1>{}, int64_t(0));
  args.mainloop.ptr_B = static_cast<ElementAB const*>(Swap ? x.a : x.b);
  args.mainloop.dB = cute::make_stride(Swap ? x.lda : x.ldb, cute::Int<1>{}, int64_t(0));
  typename Kernel::StrideD stride_d;
  if constexpr (Swap) {
    stride_d = cute::make_stride(cute::Int<1>{}, x.ldo, int64_t(0));
  } else {
    stride_d = cute::make_stride(x.ldo, cute::Int<1>{}, int64_t(0));
  }
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = stride_d;
  args.epilogue.ptr_D = static_cast<ElementD*>(x.out);
  args.epilogue.dD = stride_d;
}

/// The first `reserved_bytes` of the workspace are the launcher's own (a multiple of 256: split-K
/// partials); CUTLASS's workspace follows them.
template <class Gemm>
LaunchResult run_cutlass_gemm(typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream, size_t reserved_bytes = 0) {
  using Kernel = typename Gemm::GemmKernel;
  LaunchResult result;
  cudaGetDevice(&args.hw_info.device_id);
  args.hw_info.sm_count = multiprocessor_count();
  size_t const need = reserved_bytes + Gemm::get_workspace_size(args);
  if (need > workspace_bytes || (need > 0 && workspace == nullptr)) {
    result.status = Status::kWorkspaceTooSmall;
    result.workspace_bytes_needed = need;
    return result;
  }
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess) {
    result.status = Status::kInvalidArgument;
    return result;
  }
  workspace = reserved_bytes ? static_cast<char*>(workspace) + reserved_bytes : workspace;
  // the kernel's dynamic shared memory limit, raised once per device (the adapter's initialize()
  // would do it on every call, a driver call on the host's critical path)
  bool ok = Kernel::initialize_workspace(args, workspace, stream) == cutlass::Status::kSuccess &&
            (Kernel::SharedStorageSize < (48 << 10) ||
             allow_shared_memory<&cutlass::device_kernel<Kernel>>(Kernel::SharedStorageSize) == cudaSuccess);
  if (ok) {
    typename Kernel::Params params = Kernel::to_underlying_arguments(args, workspace);
    ok = Gemm::run(params, stream, nullptr, kCutlassKernelsWait && programmatic_launch_enabled()) ==
         cutlass::Status::kSuccess;
  }
  if (!ok) {
    result.status = Status::kCudaError;
    result.cuda = cudaGetLastError();
    if (result.cuda == cudaSuccess) {
      result.cuda = cudaErrorLaunchFailure;
    }
  }
  return result;
}

}  // namespace quantgemm
