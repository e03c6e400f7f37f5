/*! \file
    \brief The compiled schedules of each mixed-input family and the heuristic that picks one, both
           generated from the rules files (codegen/rules/) into the build tree.
*/
#pragma once

#include "quantgemm/launch/mixed_input_mm.hpp"

namespace quantgemm {

struct ScheduleEntry {
  char const* name;
  MixedInputMmLaunchFn launch;
};

struct MixedInputFamilyTable {
  ScheduleEntry const* entries;  ///< in schedule order; nullptr for an unknown family
  int size;
};

/// One link of the dispatch chain: the first whose condition holds names the schedule.
struct DispatchRule {
  char const* condition;  ///< C++ condition on M, N, K; "" for the catch-all
  char const* schedule;
};

struct MixedInputRuleTable {
  DispatchRule const* entries;  ///< in the order the chain tests them; nullptr for an unknown family
  int size;
};

/// The schedules compiled for `family` ("u4b8_bf16", ...).
MixedInputFamilyTable mixed_input_family(char const* family);

/// The dispatch chain of `family`, as mixed_input_select tests it.
MixedInputRuleTable mixed_input_rules(char const* family);

/// The schedule the heuristic picks for an M x N x K problem, or nullptr for an unknown family.
char const* mixed_input_select(char const* family, int M, int N, int K);

/// The CUDA architectures the kernels were built for (CMAKE_CUDA_ARCHITECTURES, ';'-separated).
char const* built_cuda_architectures();

/// The launcher of `schedule` in `family`, or nullptr when that schedule is not compiled.
MixedInputMmLaunchFn mixed_input_launcher(char const* family, char const* schedule);

/// out = a @ W^T through `family`'s heuristic (schedule nullptr or "") or the named schedule: the
/// one call a C++ consumer needs (family: "u4b8_bf16", "u4_bf16", "u4b8_fp16" or "u4_fp16").
/// kInvalidArgument for an unknown family or schedule or invalid arguments; kWorkspaceTooSmall,
/// with the sizes needed and nothing launched, when the scratch in `args` is short. Never throws.
LaunchResult mixed_input_mm(char const* family, char const* schedule, MixedInputMmArgs const& args);

}  // namespace quantgemm
