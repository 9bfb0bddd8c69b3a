// Exact branch and bound for one layer's operator schedule: the gap closer of the scheduling ILP.
// Pure C++17, no Python.
//
// The problem (phazec/solvers/schedule_problem.py states it): ops with one or two modes, each mode a
// duration and how many units of each resource (tensor cores, vector cores, network, HBM bandwidth
// in shares) it holds while it runs; resources have fixed capacities; dependencies between ops.
// Minimise the makespan.
//
// The search builds schedules op by op in order of start time (serial schedule generation): a node
// picks an op whose predecessors are all placed, and a mode, and starts it at the earliest time not
// before the previous op's start at which its predecessors have finished and its resources are
// free for its whole duration (an op of no duration that holds units, a barrier, at the first
// instant at or after that no placed op spans: its units must be free at that instant, and nothing
// placed later starts before it). Every active schedule (no op can start earlier without moving
// another) is built this way, and some optimal schedule is active, so the search is exact.
//
// Pruning: a node is dropped when its lower bound is within the relative tolerance of the best
// makespan found. The bound is the largest of (a) the earliest start of each unplaced op plus its
// fastest duration plus its tail, and (b) per resource, for each head threshold h and tail
// threshold q, h + the time the free capacity after h needs to absorb the least core-time of the
// unplaced ops whose earliest start is >= h and tail is >= q, + q. Two dominance rules drop more:
// an op is not started at t when another could start before t and finish by then (moving that op
// there keeps any completion's makespan and makes the schedule lexicographically earlier), and a
// node is dropped when a recently searched node with the same placed ops started its last op no
// later, releases every successor no later and is nowhere busier from this node's last start on.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace phazec {

constexpr int kResources = 4;  // tensor cores, vector cores, network, HBM bandwidth (in units)
constexpr int kHbm = 3;        // the HBM bandwidth's index

/// One way to run an op: its duration and the units of each resource it holds meanwhile.
struct OpMode {
  double duration_s = 0.0;
  std::array<int32_t, kResources> use{};
};

struct ScheduleSearchInput {
  std::vector<std::vector<OpMode>> modes;  // per op, one or two modes
  std::vector<std::vector<int32_t>> preds;  // per op, the ops that must finish before it starts
  std::array<int32_t, kResources> capacity{};
  std::vector<double> tail_s;  // per op, a lower bound on the time from its end to the makespan
  double upper_s = 0.0;        // makespan of a known feasible schedule: only shorter ones are sought
  double lower_s = 0.0;        // a proven lower bound: the search stops once it finds a schedule there
  double rel_gap = 1e-6;       // prune nodes whose bound is within this fraction of the best makespan
  int64_t node_limit = 0;
};

struct ScheduleSearchResult {
  bool complete = false;    // the search ended within node_limit: best is optimal within rel_gap
  bool improved = false;    // a schedule shorter than upper_s was found
  double makespan_s = 0.0;  // of the best schedule found (upper_s if none)
  double bound_s = 0.0;     // proven lower bound on every schedule's makespan
  std::vector<double> start_s;  // of the best schedule found (empty if none)
  std::vector<int32_t> mode;    // index into modes[i], likewise
  int64_t nodes = 0;
};

/// Runs the search; std::invalid_argument on malformed input.
ScheduleSearchResult search_schedule(const ScheduleSearchInput& in);

}  // namespace phazec
