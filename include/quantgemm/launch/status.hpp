/*! \file
    \brief What every host launcher returns (a status, never an exception) and the device attributes
           the launchers read, cached per device.
*/
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

namespace quantgemm {

enum class Status : int {
  kSuccess = 0,
  kInvalidArgument = 1,
  kWorkspaceTooSmall = 2,
  kCudaError = 3,
};

struct LaunchResult {
  Status status = Status::kSuccess;
  cudaError_t cuda = cudaSuccess;
  size_t workspace_bytes_needed = 0;
  int counters_needed = 0;
};

/// An attribute of the current device, read once per device (0 when it cannot be read); one of the
/// three the launchers read: the multiprocessor count and the compute capability's major and minor.
inline int device_attribute(cudaDeviceAttr attribute) {
  constexpr int kDevices = 64;
  static int cached[kDevices][3] = {};  // value + 1; 0: not read yet
  int const slot = attribute == cudaDevAttrMultiProcessorCount ? 0
                   : attribute == cudaDevAttrComputeCapabilityMajor ? 1
                                                                     : 2;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return 0;
  }
  if (device < kDevices && cached[device][slot] > 0) {
    return cached[device][slot] - 1;
  }
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) {
    return 0;
  }
  if (device < kDevices) {
    cached[device][slot] = value + 1;
  }
  return value;
}

/// Whether address `p` is a multiple of `bytes`.
inline bool aligned(void const* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/// Multiprocessors of the current device, read once per device.
inline int multiprocessor_count() { return device_attribute(cudaDevAttrMultiProcessorCount); }

/// The current device's compute capability as 10 * major + minor (90 for sm_90), read once per device.
inline int compute_capability() {
  return 10 * device_attribute(cudaDevAttrComputeCapabilityMajor) +
         device_attribute(cudaDevAttrComputeCapabilityMinor);
}

/// Whether launches allow programmatic dependent launch: yes unless QUANTGEMM_PDL is "0".
inline bool programmatic_launch_enabled() {
  static bool const enabled = [] {
    char const* v = std::getenv("QUANTGEMM_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

/// Allows `Kernel` `smem` bytes of dynamic shared memory on the current device: a driver call on
/// the first call for each device only (thread-safe), not on every launch's critical path.
template <auto Kernel>
cudaError_t allow_shared_memory(int smem) {
  static std::atomic<uint64_t> done{0};  // bit d: device d is set up
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  uint64_t const bit = device < 64 ? uint64_t(1) << device : 0;
  if (err != cudaSuccess || (bit && (done.load(std::memory_order_acquire) & bit))) {
    return err;
  }
  err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err == cudaSuccess) {
    done.fetch_or(bit, std::memory_order_acq_rel);
  }
  return err;
}

/// How many CTAs of `Kernel` (`threads` a CTA, `smem` bytes of dynamic shared memory, allowed
/// beforehand) an SM of the current device holds at once; 0 if the driver cannot say. Asked of the
/// driver on the first call for each device only (thread-safe).
template <auto Kernel>
int resident_blocks_per_sm(int threads, int smem) {
  static std::atomic<int> known[64] = {};  // per device; 0: not asked yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return 0;
  }
  if (device < 64) {
    if (int const n = known[device].load(std::memory_order_relaxed); n > 0) {
      return n;
    }
  }
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, threads, smem) != cudaSuccess) {
    return 0;
  }
  if (device < 64 && n > 0) {
    known[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

/// Launches kernel<<<grid, threads, smem, stream>>>(args), allowing programmatic dependent launch
/// (the kernel may start while the previous kernel in the stream finishes) when `programmatic` and
/// programmatic_launch_enabled(), in clusters of `cluster` consecutive CTAs when it is above 1.
template <class... KernelArgs, class Args>
cudaError_t launch_kernel(void (*kernel)(KernelArgs...), int grid, int threads, int smem, cudaStream_t stream,
                          bool programmatic, Args const& args, int cluster = 1) {
  cudaLaunchAttribute attribute[2];
  int n = 0;
  if (programmatic && programmatic_launch_enabled()) {
    attribute[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attribute[n].id = cudaLaunchAttributeClusterDimension;
    attribute[n].val.clusterDim.x = unsigned(cluster);
    attribute[n].val.clusterDim.y = 1;
    attribute[n++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = size_t(smem);
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = unsigned(n);
  return cudaLaunchKernelEx(&config, kernel, args);
}

}  // namespace quantgemm
