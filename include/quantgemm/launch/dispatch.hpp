/*! \file
    \brief The compiled schedules of each mixed-input family and the heuristic that picks one, both
           generated from codegen/rules.py into the build tree.
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

/// The schedules compiled for `family` ("u4b8_bf16", ...).
MixedInputFamilyTable mixed_input_family(char const* family);

/// The schedule the heuristic picks for an M x N x K problem, or nullptr for an unknown family.
char const* mixed_input_select(char const* family, int M, int N, int K);

}  // namespace quantgemm
