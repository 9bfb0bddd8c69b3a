// One run of serial schedule generation (list scheduling) for one layer's operator schedule: the
// fast feasible schedule that bounds the scheduling ILP's horizon. Pure C++17, no Python.
//
// Ops are placed one at a time: among the ops whose predecessors are all placed, either the one with
// the highest priority, or (`first_start`) the one that can start first, priority breaking ties,
// then the lower index. An op starts at the earliest time not before its predecessors' ends at which
// its resources are free for its whole duration, in the mode that ends first (then starts first,
// then the lower mode index). The problem is the exact search's (schedule_search.hpp), without tails.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "phazec/schedule_search.hpp"

namespace phazec {

struct ListScheduleResult {
  std::vector<double> start_s;  // per op
  std::vector<int32_t> mode;    // per op, an index into its modes
};

/// One greedy run; std::invalid_argument on malformed input.
ListScheduleResult list_schedule(const std::vector<std::vector<OpMode>>& modes,
                                 const std::vector<std::vector<int32_t>>& preds,
                                 const std::array<int32_t, kResources>& capacity,
                                 const std::vector<double>& priority, bool first_start);

}  // namespace phazec
