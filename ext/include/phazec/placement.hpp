// The model of time and memory of a training plan, and the placement DP over it: pipeline stages,
// tensor-parallel width t and data-parallel width d that minimise the time per batch of 1F1B
// training. Pure C++17, no Python.
//
// This is the one implementation of the model; its statement is the module docstring of
// phazec/solvers/placement.py. In short: a stage is the difference of two downsets of the layer
// DAG; its load per microbatch is forward + backward + recompute time (none, selective: attention
// cores, full: forward again, op: the ops torchtitan's op-level selective checkpointing does not save,
// block: the forward of the first recompute_layers blocks of each model chunk again;
// the last stage recomputes only under Megatron's rule) + 2 v transfers
// of the cut (+ ZeRO-3's exposed weight gathers); its memory is weights, gradients, optimizer state
// (sharded over d by ZeRO stage: state from 1, gradients from 2, weights from 3; a MoE block's routed
// experts' over the expert-data-parallel group, t d cp / ep devices) and the activations kept for the
// model-chunk microbatches in flight plus the working set a recomputation rebuilds; time per batch =
// max load * (m + (s - 1) / v) (under ZB-H1: max load * m + (s - 1) max(0, max load - 2 W), W the least
// weight-gradient time of a stage, each capped at (min(F, B_in) + W) / 2) + the latest exposed DP sync (a MoE block's routed experts' gradients
// reduced over the expert-data-parallel group) + optimizer step of a stage. `solve_placements`
// searches it; `evaluate_plan` times one given plan with the same functions, so the DP's optimum and
// the evaluation of its plan agree bit for bit.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
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
  std::vector<double> weight_grad_s;  // of backward_s, the weight-gradient work (ZB-H1 defers it)
  std::vector<int64_t> param_bytes;
  std::vector<int64_t> expert_param_bytes;  // of param_bytes, the routed experts' (whole at every t)
  std::vector<int64_t> gather_bytes;         // of param_bytes, what ZeRO-3 gathers (FP8 copies: fewer)
  std::vector<int64_t> expert_gather_bytes;  // of gather_bytes, the routed experts'
  std::vector<int64_t> dummy_wgrad_bytes;    // Transformer Engine's cached dummy weight gradients
  std::vector<int64_t> activation_bytes;
  std::vector<int64_t> stash_bytes;      // kept without recompute
  std::vector<int64_t> selective_bytes;  // kept under selective recompute
  std::vector<int64_t> input_bytes;      // the layer's inputs: kept under full recompute
  std::vector<double> selective_s;       // attention-core forward latency (selective recompute)
  std::vector<int64_t> op_bytes;         // kept under op-level selective checkpointing (op recompute)
  std::vector<double> op_s;              // forward latency of the ops op recompute runs again
  std::vector<uint8_t> tensor_parallel;
  std::vector<uint8_t> block;            // a transformer block: what block recompute counts
};

/// The problem every plan shares; `edges[i]` carries `edge_bytes[i]` per microbatch.
struct PlacementInput {
  int32_t n = 0;
  std::vector<Edge> edges;
  std::vector<int64_t> edge_bytes;
  std::vector<LayerFigures> widths;
  int64_t devices = 1;
  int64_t microbatches = 1;
  std::vector<NetworkTier> tiers;  // ascending group sizes; the last holds every device
  int64_t optimizer_factor = 2;    // bytes of weights, bf16 gradients and optimizer state per weight byte
  double hbm_bytes_per_s = 0.0;    // times the optimizer step; 0: untimed
  double collective_share = 0.0;   // of a device's cores, what an overlapped collective's kernels hold
  bool bound_sync_windows = false;  // DP syncs hide behind all the bottleneck load allows: a lower bound
};

/// The settings of one plan that the model reads, as X(type, name, default): one line per setting.
/// The bindings fill `PlanSettings` from a Python dict by these names, so a new setting needs its
/// line here and its use in placement.cpp only (and a range check in check_input where it has one).
#define PHAZEC_PLAN_SETTINGS(X)                                                                      \
  X(int64_t, recompute, 0)           /* index in ("none", "selective", "full", "op", "block"): `Recompute` */ \
  X(int64_t, recompute_layers, 1)    /* block recompute: the blocks of each model chunk recomputed */ \
  X(int64_t, interleave, 1)          /* model chunks per stage (interleaved 1F1B when > 1) */        \
  X(int64_t, zero_stage, 0)          /* 0-3: what is sharded over the d replicas (`zero_stage`) */   \
  X(int64_t, cp, 1)                  /* context-parallel devices per stage device (`cp`) */          \
  X(bool, last_stage_recomputes, false)  /* Megatron-LM's rule (true) or PHAZE's (false) */          \
  X(bool, overlap_grad_reduce, false)    /* the DP reduction hides behind the first stage's backward */ \
  X(bool, overlap_param_gather, false)   /* a distributed optimizer's all-gather hides behind its forward */ \
  X(int64_t, ep, 1)                      /* expert-parallel width: every stage's t d devices a multiple */ \
  X(bool, sequence_parallel, false)      /* a stage's pipeline sends split over its tensor-parallel devices */ \
  X(int64_t, pipeline_schedule, 0)       /* index in ("1f1b", "zb_h1"): `PipelineSchedule` */ \
  X(bool, overlap_p2p_comm, false)       /* interleaved 1F1B's sends run beside the next chunk's compute */ \
  X(bool, grad_reduce_in_fp32, false)    /* gradients kept and reduced in fp32: twice the weights' bytes */ \
  X(bool, gradient_accumulation_fusion, false) /* a stage keeps its largest layer's dummy weight gradients */

struct PlanSettings {
#define PHAZEC_SETTING_FIELD(type, name, value) type name = value;
  PHAZEC_PLAN_SETTINGS(PHAZEC_SETTING_FIELD)
#undef PHAZEC_SETTING_FIELD
};

/// Megatron-Core's block method (`recompute_method=block`, `recompute_num_layers`) is kBlock: the first
/// `recompute_layers` transformer blocks of each model chunk recompute in full, the others keep theirs.
enum class Recompute : int64_t { kNone = 0, kSelective = 1, kFull = 2, kOp = 3, kBlock = 4 };

/// 1F1B (interleaved when interleave > 1), or ZB-H1: 1F1B with each backward pass split into its input
/// gradients, run in place, and its weight gradients, deferred to fill the bubble (Qi et al., ICLR 2024).
enum class PipelineSchedule : int64_t { k1F1B = 0, kZbH1 = 1 };

/// One problem variant: which entry of `widths`, the per-device HBM and the plan's settings.
struct Variant {
  int32_t width_index = 0;
  int64_t hbm_bytes = 0;
  PlanSettings settings;
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

/// The figures of one stage that depend on neither d, its position nor the settings (but for the block
/// figures, which depend on the blocks block recompute reruns: `recomputed_blocks`).
struct StageCost {
  double forward_s = 0.0;               // forward critical path
  double backward_s = 0.0;              // backward critical path
  double weight_grad_s = 0.0;           // its weight-gradient part: critical path of the layers' (ZB-H1)
  double selective_s = 0.0;             // sum of the layers' attention-core forward latencies
  int64_t param_bytes = 0;              // 2-byte weights (= gradient bytes) on one device
  int64_t expert_param_bytes = 0;       // of them, the routed experts' (sharded over the expert DP group)
  int64_t largest_layer_bytes = 0;      // the weights of its largest layer (its gradients under ZeRO-3)
  int64_t gather_bytes = 0;             // of param_bytes, what ZeRO-3's all-gathers move
  int64_t expert_gather_bytes = 0;      // of gather_bytes, the routed experts'
  int64_t largest_gather_bytes = 0;     // the gathered copy of its largest layer (ZeRO-3 holds two)
  int64_t largest_dummy_wgrad_bytes = 0;  // its largest layer's dummy weight gradients (the blocks share them)
  int64_t stash_bytes = 0;              // kept without recomputation
  int64_t selective_bytes = 0;          // kept under selective recompute
  int64_t input_bytes = 0;              // kept under full recompute: the layers' inputs
  int64_t selective_working_bytes = 0;  // the largest attention core of a layer: rebuilt at once
  int64_t full_working_bytes = 0;       // the largest activations of a layer: rebuilt at once
  double op_s = 0.0;                    // sum of the layers' latencies of the ops op recompute runs again
  int64_t op_bytes = 0;                 // kept under op recompute
  int64_t op_working_bytes = 0;         // the largest part of a layer's stash op recompute rebuilds
  int64_t cut_bytes = 0;                // bytes crossing the cut after the stage
  int64_t devices = 1;                  // t when it holds a tensor-parallel layer, else 1
  int64_t block_layers = 0;             // blocks block recompute reruns: its first (`stage_cost`)
  double block_s = 0.0;                 // their forward latencies, summed
  int64_t block_bytes = 0;              // kept under block recompute: their inputs, the other layers' stash
  int64_t block_working_bytes = 0;      // the largest activations of one of them: rebuilt at once
};

/// Time per microbatch of one stage, in parts.
struct StageTime {
  double forward_s = 0.0;
  double backward_s = 0.0;
  double recompute_s = 0.0;
  double p2p_s = 0.0;  // sending the cut forward and receiving its gradient, for each model chunk
  double shard_s = 0.0;  // ZeRO-3's weight gathers and gradient reduce-scatter the passes do not hide
  /// The stage's load: the parts summed in this order.
  double load_s() const { return forward_s + backward_s + recompute_s + p2p_s + shard_s; }
};

/// Bytes on one device of one stage, in parts.
struct StageMemory {
  int64_t weights_bytes = 0;
  int64_t gradients_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t stash_bytes = 0;    // activations kept for the model-chunk microbatches in flight
  int64_t working_bytes = 0;  // activations a recomputation rebuilds at once
  int64_t in_flight = 0;      // model-chunk microbatches in flight (microbatches for v = 1)
  int64_t parameter_bytes() const { return weights_bytes + gradients_bytes + optimizer_state_bytes; }
  int64_t total_bytes() const { return parameter_bytes() + stash_bytes + working_bytes; }
};

/// What a stage adds after the pipeline's flush: its exposed DP sync and its optimizer step.
struct SyncTime {
  double exposed_s = 0.0;
  double step_s = 0.0;
  double end_s = 0.0;  // when the stage's work after the flush ends: exposed_s + step_s (up to rounding)
};

/// One stage of an evaluated plan.
struct PlanStage {
  std::vector<int32_t> layers;  // ascending
  int64_t devices = 1;
  double load_s = 0.0;
  int64_t memory_bytes = 0;
  int64_t recompute = 0;  // its own mode, `Recompute`
  StageCost cost;
  StageTime time;
  StageMemory memory;
  SyncTime sync;  // after the flush; the last to end ends the iteration
};

/// One iteration in parts, adding up to the time per batch (up to rounding).
struct IterationTime {
  int64_t bottleneck_stage = 0;  // the stage with the largest load (the first on a tie)
  double forward_s = 0.0;        // the bottleneck stage's parts times m
  double backward_s = 0.0;
  double recompute_s = 0.0;
  double p2p_s = 0.0;
  double shard_s = 0.0;
  double bubble_s = 0.0;         // 1F1B's, or ZB-H1's (`PlanModel::bubble_s`)
  int64_t dp_sync_stage = 0;  // the stage whose DP sync and optimizer step end last (the first on a tie)
  double dp_sync_s = 0.0;     // its exposed DP sync
  double optimizer_s = 0.0;   // its optimizer step
};

/// Every figure of one plan at widths t and d.
struct PlanFigures {
  int64_t t = 1;
  int64_t d = 1;
  int64_t microbatches_per_pipeline = 0;
  double time_per_batch_s = 0.0;
  bool fits_hbm = false;  // every stage fits in the variant's HBM
  std::vector<PlanStage> stages;  // first stage first
  IterationTime iteration;
};

/// Thrown out of a solve when its `cancelled` callback says so.
struct Cancelled : std::runtime_error {
  Cancelled() : std::runtime_error("placement cancelled") {}
};

/// Asks a `cancelled` callback, at most once per `kInterval`, whether to stop; throws `Cancelled` when
/// it says yes. The work between two polls is a few milliseconds, so a solve stops well within a
/// second of its caller's request (a signal, for the bindings).
class CancelPoll {
 public:
  static constexpr std::chrono::milliseconds kInterval{20};
  explicit CancelPoll(std::function<bool()> cancelled) : cancelled_(std::move(cancelled)) {}
  void operator()() {
    if (!cancelled_ || ++calls_ % kCallsPerClock != 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return;
    next_ = now + kInterval;
    if (cancelled_()) throw Cancelled();
  }

 private:
  static constexpr unsigned kCallsPerClock = 16;  // the clock is read every 16th call
  std::function<bool()> cancelled_;
  unsigned calls_ = 0;
  std::chrono::steady_clock::time_point next_{};
};

/// Solves every variant, in turn: each starts from the fastest plan found for an earlier variant of its
/// width that is a plan of it too, and returns what it returns alone. Throws std::invalid_argument on
/// malformed input (sizes, a cycle), and `Cancelled` when `cancelled` (polled every few milliseconds;
/// empty: never) returns true.
std::vector<PlanResult> solve_placements(const PlacementInput& in, const std::vector<Variant>& variants,
                                         std::function<bool()> cancelled = {});

/// The figures of one plan: `stages` holds the layer ids of each stage, first stage first, in
/// pipeline order (no edge runs back); t is the variant's width. The plan is timed whether or not
/// it fits on the devices or in HBM and whether or not interleaving can cut its stages into chunks
/// (the caller checks what it needs). Throws std::invalid_argument on malformed input, stages that
/// do not hold each layer once or run an edge back, or d < 1.
PlanFigures evaluate_plan(const PlacementInput& in, const Variant& variant,
                          const std::vector<std::vector<int32_t>>& stages, int64_t d);

/// The first tier whose aligned group holds devices first..last (the last tier if none).
std::size_t span_tier(const std::vector<NetworkTier>& tiers, int64_t first, int64_t last);

/// The tiers a stage's DP gradient all-reduce runs on: its dense gradients' over the data-parallel group,
/// its routed experts' over the expert-data-parallel group.
struct SyncTiers {
  NetworkTier dense;
  NetworkTier expert;
};

/// The tier a DP gradient all-reduce runs on, for d replicas of k devices each, the first stage
/// `width` devices wide (replica r on r*k..r*k+k-1): the first tier whose aligned group holds the
/// whole group. When that group spans several groups of the tier below (several nodes), each node
/// holds members of the width DP groups (ids r*k + j), each with its own link (a DGX's NIC per GPU),
/// and the hierarchical all-reduce uses them all: the fewest members a node holds of any DP group
/// spanning several nodes (`rails`) times the tier's bandwidth per device, at most the tier below's.
NetworkTier dp_sync_tier(const std::vector<NetworkTier>& tiers, int64_t d, int64_t k, int64_t width);

}  // namespace phazec
