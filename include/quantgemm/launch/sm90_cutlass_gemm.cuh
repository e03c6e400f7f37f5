/*! \file
    \brief Runs one configured CUTLASS GemmUniversalAdapter with quantgemm's launch protocol: the
           workspace is the caller's (kWorkspaceTooSmall with the bytes needed, nothing launched,
           when it is short), an unsupported problem is kInvalidArgument, a launch failure
           kCudaError; nothing throws. Shared by the W8A8 and block-scaled launchers.
*/
#pragma once

#include <cstddef>

#include "cutlass/cutlass.h"
#include "quantgemm/launch/status.hpp"

namespace quantgemm {

/// True (and `result` left alone) when the current device can run sm_90a kernels.
inline bool device_is_sm90(LaunchResult& result) {
  if (compute_capability() == 90) {
    return true;
  }
  result.status = Status::kCudaError;
  result.cuda = cudaErrorNoKernelImageForDevice;
  return false;
}

template <class Gemm>
LaunchResult run_cutlass_gemm(typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  LaunchResult result;
  cudaGetDevice(&args.hw_info.device_id);
  args.hw_info.sm_count = multiprocessor_count();
  size_t const need = Gemm::get_workspace_size(args);
  if (need > workspace_bytes || (need > 0 && workspace == nullptr)) {
    result.status = Status::kWorkspaceTooSmall;
    result.workspace_bytes_needed = need;
    return result;
  }
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    result.status = Status::kInvalidArgument;
    return result;
  }
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess ||
      gemm.run(stream) != cutlass::Status::kSuccess) {
    result.status = Status::kCudaError;
    result.cuda = cudaGetLastError();
    if (result.cuda == cudaSuccess) {
      result.cuda = cudaErrorLaunchFailure;
    }
  }
  return result;
}

}  // namespace quantgemm
