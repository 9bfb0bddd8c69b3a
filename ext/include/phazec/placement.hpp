// The placement DP: pipeline stages, tensor-parallel width t and data-parallel width d that
// minimise the time per batch of 1F1B training. Pure C++17, no Python.
//
// The cost model (phazec/solvers/placement.py states it in full and evaluates it in Python):
//   * A stage is the difference of two downsets of the layer DAG. Stages are counted from the end:
//     the stage at position s (1 = last) keeps s microbatches in flight under 1F1B.
//   * A stage uses t devices if it holds a tensor-parallel layer, else 1 (t > 1) or t (t = 1).
//   * Stage compute = forward critical path + backward critical path inside the stage, plus the
//     forward critical path again under recomputation unless the stage is the last one.
//   * Every tensor that crosses the cut after a stage (relayed tensors of earlier stages included,
//     each source sending its largest edge across the cut once) is sent forward and its gradient
//     received backward by that stage: load = compute + 2 * transfer(cut bytes).
//   * Memory of a stage per device = factor * parameter bytes + activation bytes
//     + (s - 1) * stash bytes, where stash = the layers' stash bytes (no recompute) or the stage's
//     input bytes (recompute).
//   * Replica r of a k-device pipeline holds device ids r*k..r*k+k-1; tier i links aligned groups
//     of group_size ids. Pipeline transfers use the slowest tier any replica spans; the gradient
//     all-reduce uses the tier holding the first stage's devices of all d replicas.
//   * Time per batch = max stage load * (m + s - 1) + all-reduce of the first stage's gradients.
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
  std::vector<int64_t> stash_bytes;
  std::vector<int64_t> input_bytes;  // inputs from outside the layer graph (token ids, labels)
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
};

/// One problem variant: which entry of `widths`, recomputation, and the per-device HBM.
struct Variant {
  int32_t width_index = 0;
  bool recompute = false;
  int64_t hbm_bytes = 0;
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

}  // namespace phazec
