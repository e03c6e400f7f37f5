/*! \file
    \brief The compiled schedules of each family and the heuristic that picks one, both generated
           from the rules files (codegen/rules/) into the build tree; the one-call C++ entry points.

    Families: mixed-input W4A16 ("u4b8_bf16", "u4_bf16", "u4b8_fp16", "u4_fp16"), W8A8
    ("fp8fast", "fp8", "int8"; bf16 or fp16 output, ScaledEpilogueParams::out_fp16) and block-scaled FP8
    ("fp8block_bf16").
*/
#pragma once

#include "quantgemm/launch/block_scaled_mm.hpp"
#include "quantgemm/launch/mixed_input_mm.hpp"
#include "quantgemm/launch/scaled_mm.hpp"

namespace quantgemm {

template <class LaunchFn>
struct ScheduleEntry {
  char const* name;
  LaunchFn launch;
};

template <class LaunchFn>
struct FamilyTable {
  ScheduleEntry<LaunchFn> const* entries;  ///< in schedule order; nullptr for an unknown family
  int size;
};

using MixedInputFamilyTable = FamilyTable<MixedInputMmLaunchFn>;
using ScaledMmFamilyTable = FamilyTable<ScaledMmLaunchFn>;
using BlockScaledMmFamilyTable = FamilyTable<BlockScaledMmLaunchFn>;

/// One link of the dispatch chain: the first whose condition holds names the schedule.
struct DispatchRule {
  char const* condition;  ///< C++ condition on M, N, K; "" for the catch-all
  char const* schedule;
};

struct RuleTable {
  DispatchRule const* entries;  ///< in the order the chain tests them; nullptr for an unknown family
  int size;
};

/// The schedules compiled for a mixed-input / a W8A8 / a block-scaled family (an empty table for
/// another name).
MixedInputFamilyTable mixed_input_family(char const* family);
ScaledMmFamilyTable scaled_mm_family(char const* family);
BlockScaledMmFamilyTable block_scaled_mm_family(char const* family);

/// The dispatch chain of any family, as select_schedule tests it.
RuleTable dispatch_rules(char const* family);

/// The schedule the heuristic picks for an M x N x K problem, or nullptr for an unknown family.
char const* select_schedule(char const* family, int M, int N, int K);

/// The CUDA architectures the kernels were built for (CMAKE_CUDA_ARCHITECTURES, ','-separated).
char const* built_cuda_architectures();

/// The launcher of `schedule` in `family`, or nullptr when that schedule is not compiled.
MixedInputMmLaunchFn mixed_input_launcher(char const* family, char const* schedule);
ScaledMmLaunchFn scaled_mm_launcher(char const* family, char const* schedule);
BlockScaledMmLaunchFn block_scaled_mm_launcher(char const* family, char const* schedule);

/// out = a @ W^T through `family`'s heuristic (schedule nullptr or "") or the named schedule: the
/// one call a C++ consumer needs. kInvalidArgument for an unknown family or schedule or invalid
/// arguments; kWorkspaceTooSmall, with the sizes needed and nothing launched, when the scratch in
/// `args` is short. Never throws.
LaunchResult mixed_input_mm(char const* family, char const* schedule, MixedInputMmArgs const& args);
LaunchResult scaled_mm(char const* family, char const* schedule, ScaledMmArgs const& args);
LaunchResult block_scaled_mm(char const* family, char const* schedule, BlockScaledMmArgs const& args);

}  // namespace quantgemm
