// The C++ entry point of the mixed-input GEMM: the heuristic's or the named schedule, launched.
#include <cstring>

#include "quantgemm/launch/dispatch.hpp"

namespace quantgemm {

char const* built_cuda_architectures() { return QUANTGEMM_CUDA_ARCHITECTURES; }

MixedInputMmLaunchFn mixed_input_launcher(char const* family, char const* schedule) {
  MixedInputFamilyTable const table = mixed_input_family(family);
  for (int i = 0; table.entries != nullptr && schedule != nullptr && i < table.size; ++i) {
    if (std::strcmp(schedule, table.entries[i].name) == 0) {
      return table.entries[i].launch;
    }
  }
  return nullptr;
}

LaunchResult mixed_input_mm(char const* family, char const* schedule, MixedInputMmArgs const& args) {
  if (schedule == nullptr || *schedule == '\0') {
    schedule = mixed_input_select(family, args.M, args.N, args.K);
  }
  MixedInputMmLaunchFn const launch = mixed_input_launcher(family, schedule);
  if (launch == nullptr) {
    LaunchResult result;
    result.status = Status::kInvalidArgument;
    return result;
  }
  return launch(args);
}

}  // namespace quantgemm
