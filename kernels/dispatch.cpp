// The C++ entry points: the heuristic's or the named schedule, launched.
#include <cstring>

#include "quantgemm/launch/dispatch.hpp"

namespace quantgemm {

namespace {

template <class LaunchFn>
LaunchFn find(FamilyTable<LaunchFn> const& table, char const* schedule) {
  for (int i = 0; table.entries != nullptr && schedule != nullptr && i < table.size; ++i) {
    if (std::strcmp(schedule, table.entries[i].name) == 0) {
      return table.entries[i].launch;
    }
  }
  return nullptr;
}

template <class LaunchFn, class Args>
LaunchResult launch(FamilyTable<LaunchFn> const& table, char const* family, char const* schedule, Args const& args) {
  if (schedule == nullptr || *schedule == '\0') {
    schedule = select_schedule(family, args.M, args.N, args.K);
  }
  LaunchFn const fn = find(table, schedule);
  if (fn == nullptr) {
    LaunchResult result;
    result.status = Status::kInvalidArgument;
    return result;
  }
  return fn(args);
}

}  // namespace

char const* built_cuda_architectures() { return QUANTGEMM_CUDA_ARCHITECTURES; }

MixedInputMmLaunchFn mixed_input_launcher(char const* family, char const* schedule) {
  return find(mixed_input_family(family), schedule);
}

ScaledMmLaunchFn scaled_mm_launcher(char const* family, char const* schedule) {
  return find(scaled_mm_family(family), schedule);
}

BlockScaledMmLaunchFn block_scaled_mm_launcher(char const* family, char const* schedule) {
  return find(block_scaled_mm_family(family), schedule);
}

LaunchResult mixed_input_mm(char const* family, char const* schedule, MixedInputMmArgs const& args) {
  return launch(mixed_input_family(family), family, schedule, args);
}

LaunchResult scaled_mm(char const* family, char const* schedule, ScaledMmArgs const& args) {
  return launch(scaled_mm_family(family), family, schedule, args);
}

LaunchResult block_scaled_mm(char const* family, char const* schedule, BlockScaledMmArgs const& args) {
  return launch(block_scaled_mm_family(family), family, schedule, args);
}

}  // namespace quantgemm
