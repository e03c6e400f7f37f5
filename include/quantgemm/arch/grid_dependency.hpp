/*! \file
    \brief Programmatic dependent launch, the device side (Hopper's griddepcontrol), shared by every
           kernel of quantgemm's own that a launch with the attribute (launch/status.hpp's
           launch_kernel) may start before the kernel ahead of it in the stream has completed. Below
           sm_90, and for a launch without programmatic dependencies, both are no-ops.
*/
#pragma once

namespace quantgemm {

/// Lets the next kernel in the stream begin launching (it still waits for this one before reading
/// what this one writes).
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// Waits until the kernels this one depends on in the stream have completed and their writes are
/// visible; returns at once for a launch without programmatic dependencies.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace quantgemm
