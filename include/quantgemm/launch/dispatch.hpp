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

}  // namespace quantgemm
