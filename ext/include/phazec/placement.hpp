// The placement DP: pipeline stages, tensor-parallel width t and data-parallel width d that
// minimise the time per batch of 1F1B training. Pure C++17, no Python.
//
// The cost model is stated in full in phazec/solvers/placement.py (module docstring), which also
// evaluates it in Python with the same arithmetic in the same order. In short: a stage is the
// difference of two downsets of the layer DAG; its load per microbatch is forward + backward +
// recompute time (none, selective: attention cores, full: forward again; the last stage recomputes
// only under Megatron's rule) + 2 v transfers of the cut; its memory is weights, gradients,
// optimizer state (sharded over d with a distributed optimizer) and the activations kept for the
// model-chunk microbatches in flight plus the working set a recomputation rebuilds; time per batch
// = max load * (m + (s - 1) / v) + exposed DP sync + optimizer step of the first stage.
#pragma once

#include <cstdint>
#include <vector>

#include "phazec/dag.hpp"

namespace phazec {

/// One level of the network: aligned groups of `group_size` consecutive devices.
struct NetworkTier {
  int64_t group_size = 1;
  double bandwidth_bytes_per_s = 1.0;
  double latency_s = 0.0;
};

/// Per-layer figures at one tensor-parallel width, per device and per microbatch.
struct LayerFigures {
  int64_t t = 1;
  std::vector<double> forward_s;
  std::vector<double> backward_s;
  std::vector<int64_t> param_bytes;
  std::vector<int64_t> activation_bytes;
  std::vector<int64_t> stash_bytes;      // kept without recompute
  std::vector<int64_t> selective_bytes;  // kept under selective recompute
  std::vector<int64_t> input_bytes;      // the layer's inputs: kept under full recompute
  std::vector<double> selective_s;       // attention-core forward latency (selective recompute)
  std::vector<uint8_t> tensor_parallel;
};

/// Everything the DP needs; `edges[i]` carries `edge_bytes[i]` per microbatch.
struct PlacementInput {
  int32_t n = 0;
  std::vector<Edge> edges;
  std::vector<int64_t> edge_bytes;
  std::vector<LayerFigures> widths;
  int64_t devices = 1;
  int64_t microbatches = 1;
  std::vector<NetworkTier> tiers;  // ascending group sizes; the last holds every device
  int64_t optimizer_factor = 2;    // bytes of weights, gradients and optimizer state per weight byte
  bool last_stage_recomputes = false;  // Megatron-LM's rule (true) or PHAZE's (false)
  bool overlap_grad_reduce = false;    // the DP all-reduce hides behind the first stage's backward
  bool overlap_param_gather = false;   // a distributed optimizer's all-gather hides behind its forward
  double hbm_bytes_per_s = 0.0;        // times the optimizer step; 0: untimed
  bool bound_sync_windows = false;     // DP syncs hide behind all the bottleneck load allows: a lower bound
};

enum class Recompute : int32_t { kNone = 0, kSelective = 1, kFull = 2 };

/// One problem variant: which entry of `widths`, recomputation, the per-device HBM, interleave and
/// the distributed optimizer.
struct Variant {
  int32_t width_index = 0;
  Recompute recompute = Recompute::kNone;
  int64_t hbm_bytes = 0;
  int64_t interleave = 1;              // model chunks per stage (interleaved 1F1B when > 1)
  bool distributed_optimizer = false;  // optimizer state sharded over the d replicas
};

/// The optimum of one variant, or (feasible = false) the least peak memory any plan needs.
struct PlanResult {
  bool feasible = false;
  int64_t t = 1;
  int64_t d = 0;
  int64_t microbatches_per_pipeline = 0;
  double time_per_batch_s = 0.0;
  std::vector<std::vector<int32_t>> stage_layers;  // first stage first
  std::vector<int64_t> stage_devices;
  std::vector<double> stage_load_s;
  std::vector<int64_t> stage_memory_bytes;
  // Set when infeasible: the least peak per-device memory over all plans and the split of the
  // peak stage of one plan attaining it.
  int64_t min_memory_bytes = 0;
  int64_t parameter_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t stash_bytes = 0;
};

/// Solves every variant; throws std::invalid_argument on malformed input (sizes, a cycle).
std::vector<PlanResult> solve_placements(const PlacementInput& in, const std::vector<Variant>& variants);

/// The first tier whose aligned group holds devices first..last (the last tier if none).
std::size_t span_tier(const std::vector<NetworkTier>& tiers, int64_t first, int64_t last);

/// The tier a DP gradient all-reduce runs on, for d replicas of k devices each, the first stage
/// `width` devices wide (replica r on r*k..r*k+k-1): the first tier whose aligned group holds the
/// whole group. When that group spans several groups of the tier below (several nodes), each node
/// holds members of the width DP groups (ids r*k + j), each with its own link (a DGX's NIC per GPU),
/// and the hierarchical all-reduce uses them all: the fewest members a node holds of any DP group
/// spanning several nodes (`rails`) times the tier's bandwidth per device, at most the tier below's.
NetworkTier dp_sync_tier(const std::vector<NetworkTier>& tiers, int64_t d, int64_t k, int64_t width);

}  // namespace phazec
