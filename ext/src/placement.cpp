#include "phazec/placement.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace phazec {

namespace {

template <typename T>
constexpr T kNone = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                         : std::numeric_limits<T>::max();

bool contains(const NodeSet& s, int32_t v) { return (s[v / 64] >> (v % 64)) & 1U; }

bool is_subset(const NodeSet& a, const NodeSet& b) {
  for (std::size_t w = 0; w < a.size(); ++w) {
    if ((a[w] & ~b[w]) != 0) return false;
  }
  return true;
}

NodeSet difference(const NodeSet& a, const NodeSet& b) {
  NodeSet out(a.size());
  for (std::size_t w = 0; w < a.size(); ++w) out[w] = a[w] & ~b[w];
  return out;
}

/// The layer DAG with the bytes of its edges.
struct LayerGraph {
  Dag g;
  std::vector<int32_t> order;                                       // topological
  std::vector<std::vector<std::pair<int32_t, int64_t>>> out_edges;  // per layer: (target, bytes)
};

LayerGraph make_layer_graph(const PlacementInput& in) {
  LayerGraph graph;
  graph.g = make_dag(in.n, in.edges);
  graph.order = topological_order(graph.g);
  graph.out_edges.assign(in.n, {});
  for (std::size_t e = 0; e < in.edges.size(); ++e) {
    graph.out_edges[in.edges[e].first].emplace_back(in.edges[e].second, in.edge_bytes[e]);
  }
  return graph;
}

/// Sum over layers u outside `inside` of the largest edge from u into `targets`: a layer sends a
/// tensor once to a stage however many of the stage's layers read it.
int64_t incoming_bytes(const LayerGraph& graph, const NodeSet& targets, const NodeSet& inside) {
  int64_t total = 0;
  for (int32_t u = 0; u < graph.g.n; ++u) {
    if (contains(inside, u)) continue;
    int64_t largest = 0;
    for (const auto& [v, bytes] : graph.out_edges[u]) {
      if (contains(targets, v)) largest = std::max(largest, bytes);
    }
    total += largest;
  }
  return total;
}

/// Longest paths through a stage's layers, each weighing its latency, as when each layer finishes:
/// forward, finish(v) = max(finish of v's predecessors in the stage, 0) + latency(v); backward the
/// same over its successors. A stage is a downset `upto` (closed under successors) less a smaller one
/// `after`, and no predecessor of a stage's layer lies in `after` (it would hold the layer too), so
/// its predecessors in the stage are those in `upto`: forward finishes depend on `upto` alone, and
/// backward ones, likewise, on `after` alone. `forward_finish` sets finish(v) of every v in `upto`,
/// `backward_finish` of every v outside `after`; a stage's critical path is its layers' largest.
void forward_finish(const LayerGraph& graph, const std::vector<double>& latency_s, const NodeSet& upto,
                    double* finish) {
  for (int32_t v : graph.order) {
    if (!contains(upto, v)) continue;
    double start = 0.0;
    for (int32_t u : graph.g.pred[v]) {
      if (contains(upto, u)) start = std::max(start, finish[u]);
    }
    finish[v] = start + latency_s[v];
  }
}

void backward_finish(const LayerGraph& graph, const std::vector<double>& latency_s, const NodeSet& after,
                     double* finish) {
  for (auto it = graph.order.rbegin(); it != graph.order.rend(); ++it) {
    const int32_t v = *it;
    if (contains(after, v)) continue;
    double start = 0.0;
    for (int32_t u : graph.g.succ[v]) {
      if (!contains(after, u)) start = std::max(start, finish[u]);
    }
    finish[v] = start + latency_s[v];
  }
}

/// The cost of a stage at width f.t, `cut_bytes` crossing the cut after it, from its layers' forward,
/// backward and weight-gradient finishes (`forward_finish`, `backward_finish` on the backward and on the
/// weight-gradient latencies). Block recompute reruns the stage's first `blocks` transformer blocks in
/// layer order (`recomputed_blocks`): each keeps its inputs and is rebuilt alone, as Megatron-Core
/// checkpoints each of them on its own; the stage's other layers keep their stash.
StageCost stage_cost(const LayerFigures& f, const NodeSet& stage, int64_t cut_bytes, const double* forward,
                     const double* backward, const double* weight_grad, int64_t blocks) {
  StageCost c;
  bool any_tensor_parallel = false;
  for (int32_t v : members(stage)) {
    if (blocks > 0 && f.block[v] != 0 && c.block_layers < blocks) {
      ++c.block_layers;
      c.block_s += f.forward_s[v];
      c.block_bytes += f.input_bytes[v];
      c.block_working_bytes = std::max(c.block_working_bytes, f.activation_bytes[v]);
    } else if (blocks > 0) {
      c.block_bytes += f.stash_bytes[v];
    }
    c.forward_s = std::max(c.forward_s, forward[v]);
    c.backward_s = std::max(c.backward_s, backward[v]);
    c.weight_grad_s = std::max(c.weight_grad_s, weight_grad[v]);
    c.selective_s += f.selective_s[v];
    c.param_bytes += f.param_bytes[v];
    c.expert_param_bytes += f.expert_param_bytes[v];
    c.largest_layer_bytes = std::max(c.largest_layer_bytes, f.param_bytes[v]);
    c.gather_bytes += f.gather_bytes[v];
    c.expert_gather_bytes += f.expert_gather_bytes[v];
    c.largest_gather_bytes = std::max(c.largest_gather_bytes, f.gather_bytes[v]);
    c.largest_dummy_wgrad_bytes = std::max(c.largest_dummy_wgrad_bytes, f.dummy_wgrad_bytes[v]);
    c.stash_bytes += f.stash_bytes[v];
    c.selective_bytes += f.selective_bytes[v];
    c.input_bytes += f.input_bytes[v];
    c.selective_working_bytes = std::max(c.selective_working_bytes, f.stash_bytes[v] - f.selective_bytes[v]);
    c.full_working_bytes = std::max(c.full_working_bytes, f.activation_bytes[v]);
    c.op_s += f.op_s[v];
    c.op_bytes += f.op_bytes[v];
    c.op_working_bytes = std::max(c.op_working_bytes, f.stash_bytes[v] - f.op_bytes[v]);
    any_tensor_parallel = any_tensor_parallel || f.tensor_parallel[v] != 0;
  }
  // ZB-H1's bubble slot is at least the slot's forward work and its input-gradient work (the first
  // microbatch's forward chain and the last one's backward chain have no weight gradients beside them),
  // so each slot is L - 2 W' with W' = min(W, (min(F, B_in) + W) / 2): L - 2 W' = max(L - 2 W, F, B_in)
  // for L = F + B_in + W (docs/model/placement.md, Zero bubble).
  const double input_grad_s = c.backward_s - c.weight_grad_s;
  c.weight_grad_s = std::min(c.weight_grad_s, (std::min(c.forward_s, input_grad_s) + c.weight_grad_s) / 2.0);
  c.cut_bytes = cut_bytes;
  c.devices = any_tensor_parallel ? f.t : 1;
  return c;
}

/// The downsets of the layer DAG and every nested pair of them; independent of t.
/// Pair p is the stage sets[outer[p]] minus sets[inner[p]].
struct Lattice {
  LayerGraph graph;
  std::vector<NodeSet> sets;  // by size: empty first, all last
  std::vector<int32_t> set_size;
  std::vector<int64_t> cut_bytes;       // per set: bytes sent into it from outside
  std::vector<std::size_t> first_pair;  // pairs of outer set i: [first_pair[i], first_pair[i + 1])
  std::vector<int32_t> outer;
  std::vector<int32_t> inner;
  std::vector<NodeSet> stage;           // per pair
};

Lattice make_lattice(const PlacementInput& in) {
  Lattice lat;
  lat.graph = make_layer_graph(in);
  lat.sets = downsets(lat.graph.g, std::numeric_limits<std::size_t>::max());
  for (const auto& set : lat.sets) {
    lat.set_size.push_back(static_cast<int32_t>(members(set).size()));
    lat.cut_bytes.push_back(incoming_bytes(lat.graph, set, set));
  }
  for (std::size_t i = 0; i < lat.sets.size(); ++i) {
    lat.first_pair.push_back(lat.outer.size());
    for (std::size_t j = 0; j < i; ++j) {
      if (lat.set_size[j] == lat.set_size[i] || !is_subset(lat.sets[j], lat.sets[i])) continue;
      lat.outer.push_back(static_cast<int32_t>(i));
      lat.inner.push_back(static_cast<int32_t>(j));
      lat.stage.push_back(difference(lat.sets[i], lat.sets[j]));
    }
  }
  lat.first_pair.push_back(lat.outer.size());
  return lat;
}

/// Per-pair stage costs at one tensor-parallel width.
struct StageTable {
  int64_t t = 1;
  std::vector<StageCost> cost;  // per pair
  std::vector<uint8_t> narrow;  // 1 when the stage uses one device although t > 1
  int64_t max_narrow = 0;       // most narrow stages a plan can have
};

StageTable make_stage_table(const Lattice& lat, const LayerFigures& f, int64_t blocks) {
  StageTable tab;
  tab.t = f.t;
  const auto n = static_cast<std::size_t>(lat.graph.g.n);
  // Per set: the backward and the weight-gradient finishes of the layers outside it.
  std::vector<double> backward(lat.sets.size() * n), weight_grad(lat.sets.size() * n);
  for (std::size_t set = 0; set < lat.sets.size(); ++set) {
    backward_finish(lat.graph, f.backward_s, lat.sets[set], &backward[set * n]);
    backward_finish(lat.graph, f.weight_grad_s, lat.sets[set], &weight_grad[set * n]);
  }
  std::vector<double> forward(n);  // the forward finishes of the layers of the outer set of the pairs at hand
  for (std::size_t set = 0; set < lat.sets.size(); ++set) {
    if (lat.first_pair[set] == lat.first_pair[set + 1]) continue;
    forward_finish(lat.graph, f.forward_s, lat.sets[set], forward.data());
    for (std::size_t p = lat.first_pair[set]; p < lat.first_pair[set + 1]; ++p) {
      const auto inner = static_cast<std::size_t>(lat.inner[p]);
      tab.cost.push_back(stage_cost(f, lat.stage[p], lat.cut_bytes[inner], forward.data(), &backward[inner * n],
                                    &weight_grad[inner * n], blocks));
      tab.narrow.push_back(f.t > 1 && tab.cost.back().devices == 1 ? 1 : 0);
    }
  }
  if (f.t > 1) {
    tab.max_narrow = std::count(f.tensor_parallel.begin(), f.tensor_parallel.end(), uint8_t{0});
  }
  return tab;
}

double transfer_s(double bytes, const NetworkTier& tier) {
  return bytes == 0.0 ? 0.0 : bytes / tier.bandwidth_bytes_per_s + tier.latency_s;
}

double allreduce_s(int64_t bytes, int64_t d, const NetworkTier& tier) {
  const double steps = static_cast<double>(d - 1);
  return 2.0 * steps / static_cast<double>(d) * static_cast<double>(bytes) / tier.bandwidth_bytes_per_s +
         2.0 * steps * tier.latency_s;
}

/// A stage's work after the pipeline's flush, as figures that each grow with its dense and its expert
/// bytes: its DP sync S = R + G, R the gradients' reduction (all-reduce, or a distributed optimizer's
/// reduce-scatter) and G a distributed optimizer's weight all-gather (0 without one), its optimizer step
/// P, and, h the least share of an overlapped sync left exposed (`PlanModel::sync_floor`: the share of
/// the cores an overlapped collective holds, `PlacementInput::collective_share`, or 1 / v interleaved),
/// h S + P, (R + h G) + P, (G + h R) + P and S + P (`PlanModel::end_s` reads the last four).
struct SyncKeys {
  double sync_s = 0.0;
  double reduce_s = 0.0;
  double step_s = 0.0;
  double held_s = 0.0;
  double reduce_first_s = 0.0;
  double gather_first_s = 0.0;
  double whole_s = 0.0;
};

/// The computation a stage's DP sync hides behind after the flush: `reduce_s` for the gradients'
/// reduction, `gather_s` for a distributed optimizer's weight all-gather; `pooled` (the bounded search's
/// lower bound, `PlanModel::sync_windows_s`) when both can open and the two parts may split `reduce_s`
/// between them in any way (`gather_s` is then 0).
struct SyncWindows {
  double reduce_s = 0.0;
  double gather_s = 0.0;
  bool pooled = false;
};

/// The least over w1 + w2 = w (both at least 0) of max(a - w1, b - w2): the later of two parts that
/// share a window of w, split so that they end as early as they can.
double split_end_s(double a, double b, double w) {
  if (a - b >= w) return a - w;
  if (b - a >= w) return b - w;
  return (a + b - w) / 2.0;
}

/// The figures of several stages' syncs that fix when the last of them ends: their maxima.
SyncKeys latest(const SyncKeys& a, const SyncKeys& b) {
  return {std::max(a.sync_s, b.sync_s),
          std::max(a.reduce_s, b.reduce_s),
          std::max(a.step_s, b.step_s),
          std::max(a.held_s, b.held_s),
          std::max(a.reduce_first_s, b.reduce_first_s),
          std::max(a.gather_first_s, b.gather_first_s),
          std::max(a.whole_s, b.whole_s)};
}

/// Whether a layer at width `f` holds routed experts.
bool has_experts(const LayerFigures& f) {
  return std::any_of(f.expert_param_bytes.begin(), f.expert_param_bytes.end(), [](int64_t x) { return x > 0; });
}

/// The largest share W / (F + B) of a layer's forward and backward latency that is weight-gradient work
/// (0 for a layer of neither). A stage's weight-gradient critical path is then at most this share of its
/// forward and backward critical paths: along any path of its layers, W sums to at most the share of
/// F + B, and F and B sum to at most their critical paths.
double weight_grad_share(const LayerFigures& f) {
  double share = 0.0;
  for (std::size_t v = 0; v < f.weight_grad_s.size(); ++v) {
    const double pass_s = f.forward_s[v] + f.backward_s[v];
    if (pass_s > 0.0) share = std::max(share, f.weight_grad_s[v] / pass_s);
  }
  return share;
}

/// The model's formulas (phazec/solvers/placement.py states them) for one problem and one plan's
/// settings, each a function of a stage's cost: what the DP searches and `evaluate_plan` times.
struct PlanModel {
  const PlacementInput& in;
  const PlanSettings& settings;
  bool experts = false;      // a layer at the plan's width holds routed experts (`has_experts`)
  int64_t t = 1;             // the plan's tensor-parallel width
  double grad_share = 0.0;   // `weight_grad_share` of the layers at the plan's width

  /// A stage's recompute mode: the plan's, or none for the last stage under PHAZE's rule.
  Recompute mode(bool last) const {
    return last && !settings.last_stage_recomputes ? Recompute::kNone : static_cast<Recompute>(settings.recompute);
  }

  /// The transformer blocks a stage reruns under block recompute: `recompute_layers` in each of its v
  /// model chunks, the first of its blocks in layer order (`stage_cost`); 0 in every other mode.
  int64_t recomputed_blocks() const { return recomputed_blocks_of(settings); }
  static int64_t recomputed_blocks_of(const PlanSettings& s) {
    return s.recompute == static_cast<int64_t>(Recompute::kBlock) ? s.recompute_layers * s.interleave : 0;
  }

  /// m: the microbatches each of d data-parallel replicas runs.
  int64_t microbatches_per_replica(int64_t d) const { return (in.microbatches + d - 1) / d; }

  /// Whether the optimizer state is sharded over the d replicas (ZeRO stage 1 and up: Megatron's
  /// distributed optimizer), the gradients too (stage 2 and up), the weights too (stage 3: FSDP).
  bool shards_state() const { return settings.zero_stage >= 1; }
  bool shards_gradients() const { return settings.zero_stage >= 2; }
  bool shards_weights() const { return settings.zero_stage >= 3; }
  /// Gradient bytes per byte of 2-byte weights: 2 when they are kept and reduced in fp32 (Megatron-Core's
  /// `grad_reduce_in_fp32`), else 1.
  int64_t grad_factor() const { return settings.grad_reduce_in_fp32 ? 2 : 1; }

  /// The devices a gradient is reduced over, and a ZeRO stage shards over, at width d: the d replicas'
  /// context-parallel devices (Megatron's data- and context-parallel group).
  int64_t group(int64_t d) const { return d * settings.cp; }

  /// The devices a routed expert's gradient is reduced over, and a ZeRO stage shards its weights, gradients
  /// and state over, at width d: Megatron-Core's expert-data-parallel group, the t group(d) tensor-, data-
  /// and context-parallel devices of a stage that hold one expert-parallel rank's experts (expert tensor
  /// parallelism 1: an expert's weights are whole on each): t group(d) / ep, at least 1 (below ep, at
  /// d = 1 for the least memory of an infeasible problem, unsharded).
  int64_t expert_group(int64_t d) const { return std::max<int64_t>(1, t * group(d) / settings.ep); }

  /// `bytes` sharded over `devices` (rounded up).
  static int64_t shard_of(int64_t bytes, int64_t devices) { return (bytes + devices - 1) / devices; }

  /// A stage's `weights` bytes, `expert` of them routed experts', sharded by a ZeRO stage at width d: the
  /// dense ones over group(d), the experts' over expert_group(d).
  int64_t sharded_bytes(int64_t weights, int64_t expert, int64_t d) const {
    return shard_of(weights - expert, group(d)) + shard_of(expert, expert_group(d));
  }

  /// The devices of a stage: its cost's (t when it holds a tensor-parallel layer, else 1) times cp.
  int64_t stage_devices(const StageCost& c) const { return c.devices * settings.cp; }

  /// The tiers of the DP groups of a stage `width` devices wide at width d, replicas of k devices each
  /// (replica r on r k..r k + k - 1, the stage's devices at the same place in each). Megatron-Core orders
  /// a stage's ranks tp, cp, dp (the fastest first) and, with expert tensor parallelism 1, its expert
  /// ranks ep, then expert-data-parallel: an expert-parallel group is ep consecutive of the stage's
  /// t cp d ranks and the expert-data-parallel group every ep-th of them. Where t cp divides ep that is
  /// the same device of every (ep / (t cp))-th replica, t d cp / ep replicas k ep / (t cp) devices apart
  /// (`dp_sync_tier`); otherwise it spans the replicas the dense group spans, and reduces on its tier.
  SyncTiers sync_tiers(const std::vector<NetworkTier>& tiers, int64_t d, int64_t k, int64_t width) const {
    const NetworkTier dense = dp_sync_tier(tiers, d, k, width);
    if (settings.ep % (t * settings.cp) != 0) return {dense, dense};
    const int64_t stride = settings.ep / (t * settings.cp);
    return {dense, dp_sync_tier(tiers, std::max<int64_t>(1, d / stride), stride * k, width)};
  }

  /// The all-reduce of a stage's gradients at width d: its dense ones' over group(d), then its routed
  /// experts' over expert_group(d) (none without expert bytes).
  double reduce_s(int64_t weights, int64_t expert, int64_t d, const SyncTiers& tiers) const {
    const double dense_s = allreduce_s(weights - expert, group(d), tiers.dense);
    return expert == 0 ? dense_s : dense_s + allreduce_s(expert, expert_group(d), tiers.expert);
  }

  /// What a collective of `comm_s` seconds run beside `window_s` seconds of computation adds to them:
  /// while its kernels hold a share h of the cores (`PlacementInput::collective_share`) the computation
  /// runs on the rest, so the two take max(window + h comm, comm): max(h comm, comm - window) more
  /// (max(0, comm - window) with every core left to the computation; the whole collective with no
  /// window). It never falls as the collective grows, nor grows as the window does.
  double exposed_beside(double comm_s, double window_s) const {
    return std::max(in.collective_share * comm_s, comm_s - window_s);
  }

  /// ZeRO-3's collectives per microbatch of a stage at width d, on `shard_tiers`: its gathered bytes
  /// are all-gathered before the forward pass and again before the backward pass, and its gradients
  /// (`grad_factor` times its weights' bytes) reduce-scattered after it, each half a ring all-reduce of
  /// its bytes (`reduce_s`). One gather's time and the reduce-scatter's (0 and 0 when nothing is
  /// gathered).
  std::pair<double, double> shard_collectives_s(const StageCost& c, int64_t d, const SyncTiers& shard_tiers) const {
    if (!shards_weights() || group(d) == 1) return {0.0, 0.0};
    const int64_t g = grad_factor();
    return {reduce_s(c.gather_bytes, c.expert_gather_bytes, d, shard_tiers) / 2.0,
            reduce_s(g * c.param_bytes, g * c.expert_param_bytes, d, shard_tiers) / 2.0};
  }

  /// ZeRO-3's exposed time per microbatch of a stage whose collectives take `gather_s` and `scatter_s`
  /// (`shard_collectives_s`): each layer's gather is prefetched during the layer before it, so a pass
  /// hides as much as it lasts, less what the collectives' kernels take from it (`exposed_beside`).
  double shard_s(const StageCost& c, double gather_s, double scatter_s) const {
    return exposed_beside(gather_s, c.forward_s) + exposed_beside(gather_s + scatter_s, c.backward_s);
  }

  /// Bytes each device of a stage sends across its cut: a tp-th of them under sequence parallelism, where
  /// Megatron-Core's pipeline tensor is s / (cp t) tokens long (`get_tensor_shapes`), else all of them
  /// (the cut's bytes are already a cp-th).
  double sent_bytes(const StageCost& c) const {
    const auto bytes = static_cast<double>(c.cut_bytes);
    return settings.sequence_parallel ? bytes / static_cast<double>(c.devices) : bytes;
  }

  /// Whether a stage's pipeline sends run beside its computation: Megatron-Core's overlap_p2p_comm, which
  /// its interleaved schedule alone applies (its 1F1B blocks on each send and receive).
  bool hides_sends() const { return settings.overlap_p2p_comm && settings.interleave > 1; }

  /// Time per microbatch of a stage in a recompute mode at width d, its pipeline transfers on `tier`
  /// and its ZeRO-3 gathers on `shard_tiers`. Each of the 2 v model-chunk passes of a microbatch sends
  /// and receives once; with `hides_sends` a chunk's transfer runs beside the next chunk's pass, so
  /// only what outlasts the microbatch's computation is exposed: max(0, sends - (F + B + R)).
  /// That load, max(F + B + R, sends) + gathers, falls as a pass grows while the sends outlast the
  /// computation (a longer pass hides more of the gathers). With bound_sync_windows it is instead
  /// max(F + B + R + gathers, sends + h G), G the gathers' and reduce-scatter's collectives (their
  /// least cost, `exposed_beside`): never above the real load at any longer latencies, and never
  /// falling as a latency grows (F + gathers and B + gathers each grow with their pass).
  StageTime time(const StageCost& c, Recompute mode, const NetworkTier& tier, int64_t d,
                 const SyncTiers& shard_tiers) const {
    double recompute_s = 0.0;
    if (mode == Recompute::kSelective) recompute_s = c.selective_s;
    if (mode == Recompute::kFull) recompute_s = c.forward_s;
    if (mode == Recompute::kOp) recompute_s = c.op_s;
    if (mode == Recompute::kBlock) recompute_s = c.block_s;
    double p2p_s = 2.0 * static_cast<double>(settings.interleave) * transfer_s(sent_bytes(c), tier);
    const auto [gather_s, scatter_s] = shard_collectives_s(c, d, shard_tiers);
    const double gathers_s = shard_s(c, gather_s, scatter_s);
    const double compute_s = c.forward_s + c.backward_s + recompute_s;
    if (hides_sends() && !in.bound_sync_windows) p2p_s = std::max(0.0, p2p_s - compute_s);
    if (hides_sends() && in.bound_sync_windows) {
      const double least_s = in.collective_share * (2.0 * gather_s + scatter_s);
      p2p_s = std::max(0.0, (p2p_s + least_s) - (compute_s + gathers_s));
    }
    return {c.forward_s, c.backward_s, recompute_s, p2p_s, gathers_s};
  }

  /// The m v model-chunk microbatches a replica's m microbatches make at width d.
  int64_t chunks_per_replica(int64_t d) const { return microbatches_per_replica(d) * settings.interleave; }

  /// Model-chunk microbatches in flight on the stage at position q from the end of `total` stages:
  /// Megatron's warm-up plus one, never more than `chunks` (`chunks_per_replica(d)` at width d).
  int64_t in_flight_of(int64_t q, int64_t total, int64_t chunks) const {
    const int64_t v = settings.interleave;
    return std::min(v == 1 ? q : 2 * (q - 1) + (v - 1) * total + 1, chunks);
  }
  int64_t in_flight(int64_t q, int64_t total, int64_t d) const { return in_flight_of(q, total, chunks_per_replica(d)); }

  /// Optimizer state per device of a stage with `weights` bytes, `expert` of them routed experts', at
  /// data-parallel width d.
  int64_t state_bytes(int64_t weights, int64_t expert, int64_t d) const {
    const int64_t factor = in.optimizer_factor - 2;
    return shards_state() ? sharded_bytes(factor * weights, factor * expert, d) : factor * weights;
  }

  /// The activation bytes of a stage in a recompute mode: those it keeps per model-chunk microbatch in
  /// flight, and the working set a recomputation rebuilds at once.
  std::pair<int64_t, int64_t> activation_bytes(const StageCost& c, Recompute mode) const {
    if (mode == Recompute::kSelective) return {c.selective_bytes, c.selective_working_bytes};
    if (mode == Recompute::kFull) return {c.input_bytes, c.full_working_bytes};
    if (mode == Recompute::kOp) return {c.op_bytes, c.op_working_bytes};
    if (mode == Recompute::kBlock) return {c.block_bytes, c.block_working_bytes};
    return {c.stash_bytes, 0};
  }

  /// The bytes kept for u model-chunk microbatches in flight, `kept` per microbatch of the stage.
  int64_t stash_bytes(int64_t kept, int64_t u) const {
    const int64_t v = settings.interleave;
    return v == 1 ? kept * u : (kept * u + v - 1) / v;  // the division is the DP's hot spot
  }

  /// Memory of a stage in a recompute mode at position q from the end of `total` stages, at width d.
  StageMemory memory(const StageCost& c, Recompute mode, int64_t q, int64_t total, int64_t d) const {
    const auto [kept, working] = activation_bytes(c, mode);
    const int64_t u = in_flight(q, total, d);
    const int64_t g = grad_factor();
    int64_t weights = c.param_bytes, gradients = g * c.param_bytes;
    if (shards_gradients()) {
      const int64_t shard = sharded_bytes(c.param_bytes, c.expert_param_bytes, d);
      // ZeRO-3 holds a gathered layer and the next, prefetched, and a gathered layer's gradients.
      gradients = g * (shard + (shards_weights() ? c.largest_layer_bytes : 0));
      if (shards_weights()) weights = shard + 2 * c.largest_gather_bytes;
    }
    // Transformer Engine keeps one dummy weight gradient per weight shape, which a stage's blocks share.
    if (settings.gradient_accumulation_fusion) gradients += c.largest_dummy_wgrad_bytes;
    return {weights, gradients, state_bytes(c.param_bytes, c.expert_param_bytes, d), stash_bytes(kept, u), working,
            u};
  }

  /// HBM bytes of the optimizer step at width d of `weights` bytes, `expert` of them routed experts': it
  /// zeroes every gradient, reads its shard of them (each `grad_factor` times the weights' bytes) and
  /// reads and writes its shard of the weights and its optimizer state (a distributed optimizer's shard:
  /// `sharded_bytes`; otherwise all of them).
  int64_t step_bytes(int64_t weights, int64_t expert, int64_t d) const {
    const int64_t shard = shards_state() ? sharded_bytes(weights, expert, d) : weights;
    const int64_t g = grad_factor();
    return g * (weights + shard) + 2 * shard + 2 * state_bytes(weights, expert, d);
  }

  /// How many of the first stage's passes per microbatch a DP sync's part has to hide behind: 1 without
  /// interleaving, where the reduction runs beside the last backward pass B and a distributed optimizer's
  /// all-gather beside the first forward pass F. Interleaved, Megatron-Core syncs each of the v model
  /// chunks apart (`grad_sync_func` when the chunk's last backward pass ends, `param_sync_func` before
  /// its first forward pass): the backward passes run chunk by chunk in groups of g = min(s, m)
  /// microbatches, so v - 1 chunks' reductions have (v - 1) g passes of B / v each behind them, and the
  /// gathers of all chunks but the first as many forward passes: (v - 1) g / v. What the last chunk
  /// leaves is `sync_floor`.
  double sync_window_share(int64_t total, int64_t d) const {
    const int64_t v = settings.interleave;
    if (v == 1) return 1.0;
    const int64_t g = std::min(total, microbatches_per_replica(d));
    return static_cast<double>((v - 1) * g) / static_cast<double>(v);
  }

  /// The least share of an overlapped DP sync's part left exposed: h, what the collectives' kernels take
  /// from the computation beside them, or interleaved at least 1 / v, the model chunk synced last (the
  /// reduction of the chunk whose backward passes end the flush; the gather of the chunk the next
  /// forward pass starts with).
  double sync_floor() const {
    const double h = in.collective_share;
    const int64_t v = settings.interleave;
    return v == 1 ? h : std::max(h, 1.0 / static_cast<double>(v));
  }

  /// The windows (reduction, all-gather) a stage's DP sync hides behind, from the first stage's cost
  /// `first` at width d in a pipeline of `total` stages: under overlap_grad_reduce its backward pass B,
  /// under overlap_param_gather a distributed optimizer's all-gather its forward pass F, each times
  /// `sync_window_share`. A later stage's flush ends before the first's, so it has at least those
  /// windows. With bound_sync_windows, each window that can open is as long as the bottleneck load
  /// `bottleneck_s` allows (B and F are at most it, B + F too): when both can open, the two share the
  /// share times it, split between them as suits the sync best (`SyncWindows::pooled`). The time is then
  /// never above the real one and grows with every latency (the share is below the slots m + (s - 1) / v:
  /// (v - 1) g / v < g <= m).
  SyncWindows sync_windows_s(const StageCost& first, int64_t total, int64_t d, double bottleneck_s) const {
    const bool reduce = settings.overlap_grad_reduce;
    const bool gather = shards_state() && !shards_weights() && settings.overlap_param_gather;
    const double share = sync_window_share(total, d);
    if (in.bound_sync_windows) {
      if (reduce && gather) return {share * bottleneck_s, 0.0, true};
      return {reduce ? share * bottleneck_s : 0.0, gather ? share * bottleneck_s : 0.0, false};
    }
    return {reduce ? share * first.backward_s : 0.0, gather ? share * first.forward_s : 0.0, false};
  }

  /// A stage's work after the flush at width d, of `weights` bytes, `expert` of them routed experts', its
  /// DP sync on `tiers` (none under ZeRO-3, whose passes gather and reduce-scatter). The reduction R
  /// moves the gradients, `grad_factor` times the weights' bytes: a ring all-reduce of them, or with a
  /// distributed optimizer half of one (its reduce-scatter), the weights' all-gather G the other half of
  /// a ring all-reduce of the weights' bytes. At factor 1 R = G = S / 2 exactly.
  SyncKeys sync_keys(int64_t weights, int64_t expert, int64_t d, const SyncTiers& tiers) const {
    SyncKeys k;
    if (!shards_weights()) {
      const int64_t g = grad_factor();
      const double gradients_s = reduce_s(g * weights, g * expert, d, tiers);
      if (!shards_state()) {
        k.reduce_s = gradients_s;
        k.sync_s = k.reduce_s;
      } else {
        // The weights' all-reduce is the gradients' one at factor 1: computed once on the DP's hot path.
        const double weights_s = g == 1 ? gradients_s : reduce_s(weights, expert, d, tiers);
        k.reduce_s = gradients_s / 2.0;
        k.sync_s = k.reduce_s + weights_s / 2.0;
      }
    }
    if (in.hbm_bytes_per_s > 0.0) k.step_s = static_cast<double>(step_bytes(weights, expert, d)) / in.hbm_bytes_per_s;
    const double h = sync_floor();
    const double gather_s = k.sync_s - k.reduce_s;
    k.held_s = h * k.sync_s + k.step_s;
    k.reduce_first_s = (k.reduce_s + h * gather_s) + k.step_s;
    k.gather_first_s = (gather_s + h * k.reduce_s) + k.step_s;
    k.whole_s = k.sync_s + k.step_s;
    return k;
  }

  /// The part of a DP sync that `windows` leave exposed (as `exposed_beside`, h the `sync_floor`): a
  /// plain all-reduce S hides behind the reduction's window, max(h S, S - w1); a sharded optimizer's
  /// reduce-scatter R behind the reduction's and its all-gather G behind the other's, max(h R, R - w1) +
  /// max(h G, G - w2), or, pooled, behind any split of w1: at least max(h S, S - w1). A window that does
  /// not open (0) leaves its part exposed whole.
  double exposed_s(const SyncKeys& k, const SyncWindows& windows) const {
    const double h = sync_floor();
    const auto exposed = [&](double part_s, double window_s) { return std::max(h * part_s, part_s - window_s); };
    if (!shards_state() || windows.pooled) return exposed(k.sync_s, windows.reduce_s);
    return exposed(k.reduce_s, windows.reduce_s) + exposed(k.sync_s - k.reduce_s, windows.gather_s);
  }

  /// When a stage's work after the flush ends: its exposed sync, then its step P. With experts it is
  /// written as the same sum's maximum of terms, max(h S + P, S + P - w1), or max(h S + P,
  /// (R + h G) + P - w1, (G + h R) + P - w2, S + P - w1 - w2) (pooled: max(h S + P, S + P - w1) and
  /// the two middle terms at their best split of w1, `split_end_s`), each growing with one figure of
  /// `SyncKeys`: the latest end of several stages is then this of their figures' maxima, bit for bit
  /// (subtracting a window keeps the order of doubles). Either never falls as a stage's bytes grow, and
  /// falls by at most the windows' growth.
  double end_s(const SyncKeys& k, const SyncWindows& windows) const {
    if (!experts) return exposed_s(k, windows) + k.step_s;
    const double w1 = windows.reduce_s, w2 = windows.gather_s;
    if (!shards_state()) return std::max(k.held_s, k.whole_s - w1);
    if (windows.pooled) return std::max({k.held_s, k.whole_s - w1, split_end_s(k.reduce_first_s, k.gather_first_s, w1)});
    return std::max({k.held_s, k.reduce_first_s - w1, k.gather_first_s - w2, k.whole_s - w1 - w2});
  }

  /// What a stage adds after the flush: its sync's exposed part, its step and their end (`end_s`).
  SyncTime sync_time(const SyncKeys& k, const SyncWindows& windows) const {
    return {exposed_s(k, windows), k.step_s, end_s(k, windows)};
  }

  /// (s - 1) / v: the bubble of interleaved 1F1B over `total` stages, in stage loads.
  double bubble(int64_t total) const {
    return static_cast<double>(total - 1) / static_cast<double>(settings.interleave);
  }

  /// m + (s - 1) / v: the stage loads the bottleneck stage runs one after another per batch at width d.
  double slots(int64_t total, int64_t d) const {
    return static_cast<double>(microbatches_per_replica(d)) + bubble(total);
  }

  /// Whether the schedule is ZB-H1 (`PipelineSchedule`).
  bool zero_bubble() const { return settings.pipeline_schedule == static_cast<int64_t>(PipelineSchedule::kZbH1); }

  /// The bubble, in seconds, of a pipeline of `total` stages whose bottleneck load is `load_s`, `grad_s` the
  /// least weight-gradient time W of its stages. 1F1B's: load (s - 1) / v. ZB-H1's: (s - 1) max(0, load -
  /// 2 W): each of the s - 1 bubble slots of 1F1B, a bottleneck load long, is shortened by the weight-gradient
  /// work the warm-up and the cool-down defer, W twice (Qi et al.: (p - 1)(F + B - W) for uniform stages,
  /// load F + B + W), credited at the least W of any stage, so never more than any stage defers. Under
  /// bound_sync_windows ZB-H1's bubble is 0: a time never above the real one that only grows with every
  /// latency (a longer W shortens the real bubble).
  double bubble_s(double load_s, double grad_s, int64_t total) const {
    if (!zero_bubble()) return load_s * bubble(total);
    if (in.bound_sync_windows) return 0.0;
    return static_cast<double>(total - 1) * std::max(0.0, load_s - 2.0 * grad_s);
  }

  /// The pipeline's part of the time per batch at width d: m bottleneck loads and the bubble (`bubble_s`).
  double pipeline_s(double load_s, double grad_s, int64_t total, int64_t d) const {
    if (!zero_bubble()) return load_s * slots(total, d);
    return load_s * static_cast<double>(microbatches_per_replica(d)) + bubble_s(load_s, grad_s, total);
  }

  /// A factor that times a plan's bottleneck load gives at most its `pipeline_s` (what the DP's bounds
  /// multiply a load by): 1F1B's slots; under ZB-H1 m + (s - 1) max(0, 1 - 2 `grad_share`) (the least
  /// W is at most the bottleneck stage's, at most grad_share of its load; 0 for the bubble under
  /// bound_sync_windows), scaled down far past the rounding of the sums.
  double pace(int64_t total, int64_t d) const {
    if (!zero_bubble()) return slots(total, d);
    const double bubble_share = in.bound_sync_windows ? 0.0 : std::max(0.0, 1.0 - 2.0 * grad_share);
    return (static_cast<double>(microbatches_per_replica(d)) + static_cast<double>(total - 1) * bubble_share) *
           (1.0 - 1e-9);
  }
};

/// Everything fixed within one variant of the DP.
struct VariantModel {
  PlanModel plan;
  const Lattice& lat;
  const StageTable& tab;
  const Variant& variant;
  CancelPoll& poll;  // asked between units of a few milliseconds of work

  const PlacementInput& in() const { return plan.in; }
  int64_t interleave() const { return plan.settings.interleave; }
  int64_t devices(int64_t s, int64_t q) const { return ((s - q) * tab.t + q) * plan.settings.cp; }

  /// The most stages a plan can have: one layer each at least, on the devices there are (a stage uses
  /// at least cp devices, t cp unless it is one of the narrow ones).
  std::size_t max_stages() const {
    int64_t s = lat.graph.g.n;
    while (s > 1 && devices(s, std::min(s, tab.max_narrow)) > in().devices) --s;
    return static_cast<std::size_t>(s);
  }
  int64_t stage_devices(std::size_t p) const { return plan.stage_devices(tab.cost[p]); }

  /// The least pace (`PlanModel::pace`) of a plan that a partition into s stages can be part of: of
  /// `total` stages (0: any count above s) at width d (0: any). The pace grows with the stage count and
  /// falls with d, which is at most the microbatches and the replicas of the fewest devices the stages
  /// take that fit on the devices.
  double least_pace(int64_t s, int64_t total, int64_t d) const {
    const int64_t count = total > 0 ? total : s + 1;
    if (d == 0) {
      const int64_t k = devices(count, std::min(count, tab.max_narrow));
      d = std::max<int64_t>(1, std::min(in().microbatches, in().devices / k));
    }
    return plan.pace(count, d);
  }

  /// Whether stage p, one of `total`, can be cut into the v model chunks of interleaving: one stage
  /// (no pipeline), or at least v layers (a chunk holds at least one).
  bool chunks_fit(std::size_t p, int64_t total) const {
    return total == 1 || lat.set_size[lat.outer[p]] - lat.set_size[lat.inner[p]] >= interleave();
  }

  /// Stage p's recompute mode: none for the last stage (nothing after it) under PHAZE's rule.
  Recompute mode(std::size_t p) const { return plan.mode(lat.inner[p] == 0); }

  /// Memory of stage p at position q from the end of `total` stages, at width d.
  StageMemory memory(std::size_t p, int64_t q, int64_t total, int64_t d) const {
    return plan.memory(tab.cost[p], mode(p), q, total, d);
  }

  int64_t memory_bytes(std::size_t p, int64_t q, int64_t total, int64_t d) const {
    return memory(p, q, total, d).total_bytes();
  }

  /// Stage p's memory_bytes at each position q from the end of `total` stages at width d: the bytes no
  /// position changes, plus the stash of the model-chunk microbatches in flight at q.
  struct PositionMemory {
    const PlanModel& plan;
    int64_t total, chunks, fixed, kept;
    int64_t at(int64_t q) const { return fixed + plan.stash_bytes(kept, plan.in_flight_of(q, total, chunks)); }
  };
  PositionMemory position_memory(std::size_t p, int64_t total, int64_t d) const {
    const StageMemory first = memory(p, 1, total, d);
    return {plan, total, plan.chunks_per_replica(d), first.total_bytes() - first.stash_bytes,
            plan.activation_bytes(tab.cost[p], mode(p)).first};
  }

  /// Stage p's load, its transfers on tier `tier`, at width d with replicas of k devices (its ZeRO-3
  /// gathers over its DP group, `dp_sync_tier`).
  double load_s(std::size_t p, std::size_t tier, int64_t d, int64_t k) const {
    // The DP groups' tiers matter only to ZeRO-3's gathers.
    const SyncTiers groups = plan.shards_weights() ? shard_tiers(p, d, k) : SyncTiers{in().tiers[0], in().tiers[0]};
    return plan.time(tab.cost[p], mode(p), in().tiers[tier], d, groups).load_s();
  }

  /// The tiers of stage p's DP groups at width d with replicas of k devices.
  SyncTiers shard_tiers(std::size_t p, int64_t d, int64_t k) const {
    return plan.sync_tiers(in().tiers, d, k, std::min(stage_devices(p), k));
  }

  /// Whether a layer at the variant's width holds routed experts: a later stage's sync then depends on
  /// its dense and its expert bytes apart, and the DP keeps its `SyncKeys` at each d.
  bool experts() const { return plan.experts; }
};

/// The last x in [lo, hi] such that `holds` holds on [lo, x] (lo - 1 if it fails at lo), for `holds`
/// that holds on a run from lo and nowhere after it: galloping from lo, then halving.
template <typename Holds>
int64_t run_end(int64_t lo, int64_t hi, Holds holds) {
  int64_t good = lo - 1, bad = hi + 1;
  for (int64_t step = 1; good + step < bad; step *= 2) {
    if (!holds(good + step)) {
      bad = good + step;
      break;
    }
    good += step;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (holds(mid) ? good : bad) = mid;
  }
  return good;
}

/// Entries per (set, stage count s, narrow count q) of a table over the partitions of sets into at most
/// `max_stages` stages (a partition into more is never looked up).
struct TableShape {
  std::size_t max_stages = 0;
  std::size_t max_narrow = 0;

  TableShape(const VariantModel& model, std::size_t stages)
      : max_stages(stages), max_narrow(static_cast<std::size_t>(model.tab.max_narrow)) {}
  std::size_t size(const Lattice& lat) const { return lat.sets.size() * (max_stages + 1) * (max_narrow + 1); }
  std::size_t at(std::size_t set, std::size_t s, std::size_t q) const {
    return (set * (max_stages + 1) + s) * (max_narrow + 1) + q;
  }
};

/// value[set][s][q]: the least, over partitions of the set into s stages of which q are narrow
/// and that fit on the devices, of the largest memory(p, position) of a stage (kNone if none).
struct MinMaxTable : TableShape {
  std::vector<int64_t> value;
  std::vector<int32_t> choice;  // the pair that forms the set's first stage

  MinMaxTable(const VariantModel& model, std::size_t stages) : TableShape(model, stages) {}
};

/// `cost(p, s)` is stage p's at position s from the end, kNone when it does not fit; once kNone it stays
/// kNone at every later position (a stage's memory never falls as its position grows), so the positions
/// of a stage are tried until the first that does not fit. Partitions into up to `stages` stages.
template <typename Cost>
MinMaxTable minmax_partition(const VariantModel& model, std::size_t stages, Cost cost) {
  const Lattice& lat = model.lat;
  MinMaxTable table(model, stages);
  table.value.assign(table.size(lat), kNone<int64_t>);
  table.choice.assign(table.value.size(), -1);
  auto relax = [&](std::size_t set, std::size_t s, std::size_t q, int64_t candidate, std::size_t p) {
    const std::size_t i = table.at(set, s, q);
    if (candidate < table.value[i]) {
      table.value[i] = candidate;
      table.choice[i] = static_cast<int32_t>(p);
    }
  };
  for (std::size_t set = 1; set < lat.sets.size(); ++set) {
    model.poll();
    for (std::size_t p = lat.first_pair[set]; p < lat.first_pair[set + 1]; ++p) {
      const std::size_t rest = static_cast<std::size_t>(lat.inner[p]);
      const std::size_t narrow = model.tab.narrow[p];
      if (rest == 0) {
        const int64_t c = cost(p, 1);
        if (c != kNone<int64_t> && model.stage_devices(p) <= model.in().devices) relax(set, 1, narrow, c, p);
        continue;
      }
      const std::size_t last = std::min(static_cast<std::size_t>(lat.set_size[rest]) + 1, table.max_stages);
      for (std::size_t s = 2; s <= last; ++s) {
        const int64_t c = cost(p, static_cast<int64_t>(s));
        if (c == kNone<int64_t>) break;
        for (std::size_t q = narrow; q <= std::min(table.max_narrow, s); ++q) {
          const int64_t before = table.value[table.at(rest, s - 1, q - narrow)];
          if (before == kNone<int64_t>) continue;
          if (model.devices(static_cast<int64_t>(s), static_cast<int64_t>(q)) > model.in().devices) continue;
          relax(set, s, q, std::max(c, before), p);
        }
      }
    }
  }
  return table;
}

/// A partition of a set into stages, summarised for the time per batch: its largest stage load and
/// its largest stage weights, or, where layers hold routed experts, the maxima of its stages'
/// `SyncKeys` (at the table's d and sync tiers; a stage's sync then depends on its dense and its expert
/// bytes apart); under ZB-H1 also its stages' least weight-gradient time (`PlanModel::bubble_s`).
/// `pair` forms the set's first stage; `rest` indexes the point of the remaining set's partition that it
/// extends (-1: none, a single stage).
struct Point {
  double load_s;
  int64_t weights;
  int32_t pair;
  int32_t rest;
  SyncKeys keys{};
  double grad_s = 0.0;
};

/// Whether sync figures `a` end no later than `b` under any windows (`PlanModel::end_s`).
bool ends_by(const SyncKeys& a, const SyncKeys& b) {
  return a.held_s <= b.held_s && a.reduce_first_s <= b.reduce_first_s && a.gather_first_s <= b.gather_first_s &&
         a.whole_s <= b.whole_s;
}

/// The kept points of one entry of a frontier table, a view into the table's store.
struct Frontier {
  const Point* first = nullptr;
  std::size_t size = 0;
  const Point& operator[](std::size_t i) const { return first[i]; }
  const Point* begin() const { return first; }
  const Point* end() const { return first + size; }
};

/// Every stage's load on one tier (at one d and k under ZeRO-3), and each set's pairs by load: pairs
/// first_pair[set]..first_pair[set + 1] - 1 of `by_load`, load ascending (pair order on a tie).
struct PairLoads {
  std::vector<double> load_s;
  std::vector<int32_t> by_load;

  PairLoads(const VariantModel& model, std::size_t tier, int64_t d, int64_t k) : by_load(model.lat.stage.size()) {
    const Lattice& lat = model.lat;
    for (std::size_t p = 0; p < lat.stage.size(); ++p) load_s.push_back(model.load_s(p, tier, d, k));
    std::iota(by_load.begin(), by_load.end(), 0);
    for (std::size_t set = 0; set + 1 < lat.first_pair.size(); ++set) {
      std::sort(by_load.begin() + static_cast<std::ptrdiff_t>(lat.first_pair[set]),
                by_load.begin() + static_cast<std::ptrdiff_t>(lat.first_pair[set + 1]),
                [&](int32_t a, int32_t b) { return std::tie(load_s[a], a) < std::tie(load_s[b], b); });
    }
  }
};

/// points[set][s][q]: over the partitions of the set into s stages of which q are narrow and that fit
/// on the devices, those no other beats on both the largest load and the largest weights (with experts:
/// on the largest load and every sync figure, `keep_sync_frontier`; under ZB-H1 on the least
/// weight-gradient time too, `keep_grad_frontier`), load ascending. The time per batch never falls as
/// either grows (under bound_sync_windows a window grows with the bottleneck load, but no faster than the
/// load times its slots, at least 1), nor grows as the least weight-gradient time grows, so an optimal
/// plan extends one of them. An entry is made when the DP first asks for it (`frontier`: the partitions
/// into s stages extend those of the remaining sets into s - 1, made first): stage p is priced
/// `load_s(p, tier, d, k)` at each position s from the end where it fits in HBM at width `priced_d` in a
/// plan of `total` stages, which once false stays false at every later position (a stage's memory never
/// falls as its position grows): the last position it fits at is searched once, galloping then halving.
struct FrontierTable : TableShape {
  int64_t total = 0;
  int64_t priced_d = 1;
  std::size_t tier = 0;
  int64_t d = 1;
  int64_t k = 1;
  int64_t plans_total = 0;  // the stage count of every plan that uses the table (0: any)
  int64_t plans_d = 0;      // a width with as many microbatches per replica as any that uses it (0: any)
  std::vector<Point> store;  // the points of every made entry, entry after entry
  std::vector<std::pair<std::size_t, std::size_t>> span;  // per entry: its first point in `store` and its count
  std::vector<uint8_t> made;                      // per entry: 1 once made
  std::shared_ptr<const PairLoads> loads;         // shared by the tables whose loads are the same
  std::vector<int32_t> last_fit;                  // per pair: the last position it fits at (-1: not searched)
  std::vector<std::vector<Point>> scratch;        // per stage count: the points of the entry being made
  std::vector<std::vector<int32_t>> extending;    // per stage count: the pairs that extend into it
  std::optional<SyncTiers> later;                 // the tiers of a later stage's syncs; none without experts

  FrontierTable(const VariantModel& model, std::size_t stages, int64_t total_, int64_t priced_d_, std::size_t tier_,
                int64_t d_, int64_t k_, int64_t plans_total_, int64_t plans_d_,
                std::shared_ptr<const PairLoads> loads_, std::optional<SyncTiers> later_)
      : TableShape(model, stages),
        total(total_),
        priced_d(priced_d_),
        tier(tier_),
        d(d_),
        k(k_),
        plans_total(plans_total_),
        plans_d(plans_d_),
        span(size(model.lat), {0, 0}),
        made(span.size(), 0),
        loads(std::move(loads_)),
        last_fit(model.lat.stage.size(), -1),
        scratch(stages + 1),
        extending(stages + 1),
        later(later_) {}

  /// Whether layers hold routed experts: the points then keep their stages' `SyncKeys` (`Point`).
  bool experts() const { return later.has_value(); }

  /// Stage p's sync figures as a later stage at the table's d and sync tiers (with experts).
  SyncKeys sync(const VariantModel& model, std::size_t p) const {
    const StageCost& c = model.tab.cost[p];
    return model.plan.sync_keys(c.param_bytes, c.expert_param_bytes, d, *later);
  }

  Frontier points(std::size_t entry) const {
    return {store.data() + span[entry].first, span[entry].second};
  }

  /// Stage p's load.
  double price(std::size_t p) const { return loads->load_s[p]; }

  /// Whether stage p fits at position s.
  bool fits_at(const VariantModel& model, std::size_t p, int64_t s) {
    if (last_fit[p] < 0) {
      // Positions above max_stages are never asked.
      const auto bytes = model.position_memory(p, total, priced_d);
      const auto fits = [&](int64_t at) { return bytes.at(at) <= model.variant.hbm_bytes; };
      const int64_t last = model.chunks_fit(p, total) ? run_end(1, static_cast<int64_t>(max_stages), fits) : 0;
      last_fit[p] = static_cast<int32_t>(last);
    }
    return s <= last_fit[p];
  }
};

/// Keeps the points no other beats on the load and every sync figure (of equal ones, the first made),
/// load ascending.
void keep_sync_frontier(std::vector<Point>& points) {
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    return std::tie(a.load_s, a.keys.held_s, a.keys.reduce_first_s, a.keys.gather_first_s, a.keys.whole_s, a.pair,
                    a.rest) < std::tie(b.load_s, b.keys.held_s, b.keys.reduce_first_s, b.keys.gather_first_s,
                                       b.keys.whole_s, b.pair, b.rest);
  });
  std::size_t kept = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto beaten = std::any_of(points.begin(), points.begin() + static_cast<std::ptrdiff_t>(kept),
                                    [&](const Point& x) { return ends_by(x.keys, points[i].keys); });
    if (!beaten) points[kept++] = points[i];
  }
  points.resize(kept);
}

/// Keeps the points no other beats on both load and weights (of equal ones, the first made), load
/// ascending and weights descending.
void keep_frontier(std::vector<Point>& points) {
  // Points are made in (pair, rest) order (`extend_frontier`), so that order breaks ties as a stable sort
  // would, without its buffer.
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    return std::tie(a.load_s, a.weights, a.pair, a.rest) < std::tie(b.load_s, b.weights, b.pair, b.rest);
  });
  std::size_t kept = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (kept == 0 || points[i].weights < points[kept - 1].weights) points[kept++] = points[i];
  }
  points.resize(kept);
}

/// Appends to `here` the extensions by a stage of load `load_s` and `weights` of the points of `before`
/// (a frontier: load strictly ascending, weights strictly descending) that no other of them beats on
/// both or equals earlier: of the points whose load is at most `load_s`, which all extend to it, the
/// first whose weights are at most `weights` (all extend to them), else the last (the least weights);
/// then those of larger load up to the first whose weights are at most `weights` (the later extend to
/// the same weights with more load). `keep_frontier` keeps the same points as from every extension.
void extend_frontier(const Frontier& before, double load_s, int64_t weights, int32_t pair, std::vector<Point>& here) {
  const Point* begin = before.begin();
  const Point* within = std::partition_point(begin, before.end(), [&](const Point& x) { return x.load_s <= load_s; });
  if (within != begin) {
    const Point* light = std::partition_point(begin, within, [&](const Point& x) { return x.weights > weights; });
    if (light == within) --light;
    here.push_back({load_s, std::max(weights, light->weights), pair, static_cast<int32_t>(light - begin)});
  }
  for (const Point* it = within; it != before.end(); ++it) {
    here.push_back({it->load_s, std::max(weights, it->weights), pair, static_cast<int32_t>(it - begin)});
    if (it->weights <= weights) break;
  }
}

/// Appends to `here` the extensions by a stage of load `load_s` and sync figures `keys` of the points of
/// `before` (a frontier, load ascending) that no other extension beats: of the points whose load is at
/// most `load_s`, which all extend to it, the first whose figures end by `keys` (its extension, `keys`,
/// beats theirs), else every one; then those of larger load up to the first whose figures end by `keys`
/// (the later extend to at least `keys` with more load). `keep_sync_frontier` keeps the same points as
/// from every extension.
void extend_sync_frontier(const Frontier& before, double load_s, const SyncKeys& keys, int32_t pair,
                          std::vector<Point>& here) {
  const Point* begin = before.begin();
  const Point* within = std::partition_point(begin, before.end(), [&](const Point& x) { return x.load_s <= load_s; });
  const Point* light = std::find_if(begin, within, [&](const Point& x) { return ends_by(x.keys, keys); });
  for (const Point* it = light == within ? begin : light; it != within; ++it) {
    here.push_back({load_s, 0, pair, static_cast<int32_t>(it - begin), latest(keys, it->keys)});
    if (it == light) break;
  }
  for (const Point* it = within; it != before.end(); ++it) {
    here.push_back({it->load_s, 0, pair, static_cast<int32_t>(it - begin), latest(keys, it->keys)});
    if (ends_by(it->keys, keys)) break;
  }
}

/// Under ZB-H1, where a plan's time also falls as its stages' least weight-gradient time grows: appends to
/// `here` the extension of every point of `before` by a stage of load `load_s`, `weights`, sync figures
/// `keys` (with experts; else zeros) and weight-gradient time `grad_s` (`keep_grad_frontier` keeps those
/// no other beats).
void extend_grad_frontier(const Frontier& before, double load_s, int64_t weights, const SyncKeys& keys,
                          double grad_s, int32_t pair, std::vector<Point>& here) {
  for (const Point* it = before.begin(); it != before.end(); ++it) {
    here.push_back({std::max(load_s, it->load_s), std::max(weights, it->weights), pair,
                    static_cast<int32_t>(it - before.begin()), latest(keys, it->keys), std::min(grad_s, it->grad_s)});
  }
}

/// Keeps the points no other beats on the load, the weights, every sync figure and the least
/// weight-gradient time (more is better: a shorter ZB-H1 bubble), of equal ones the first made; load
/// ascending.
void keep_grad_frontier(std::vector<Point>& points) {
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    return std::make_tuple(a.load_s, a.weights, a.keys.held_s, a.keys.reduce_first_s, a.keys.gather_first_s,
                           a.keys.whole_s, -a.grad_s, a.pair, a.rest) <
           std::make_tuple(b.load_s, b.weights, b.keys.held_s, b.keys.reduce_first_s, b.keys.gather_first_s,
                           b.keys.whole_s, -b.grad_s, b.pair, b.rest);
  });
  std::size_t kept = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    const auto beaten = std::any_of(points.begin(), points.begin() + static_cast<std::ptrdiff_t>(kept), [&](const Point& x) {
      return x.weights <= p.weights && ends_by(x.keys, p.keys) && x.grad_s >= p.grad_s;
    });
    if (!beaten) points[kept++] = points[i];
  }
  points.resize(kept);
}

/// Entry (set, s, q) of the table, made on first ask from the partitions of the set's remaining sets
/// into s - 1 stages (made first, so that no entry is made while another's points are read), pair by pair
/// as the set's pairs come, so that `keep_frontier` keeps the first made of equal points. A partition
/// whose largest load times the least pace of a plan it can be part of reaches `best_s` (the best time
/// found when the entry is made) is never part of a better plan, nor is any extension of it (more load,
/// more pace): it is not kept, and a stage with such a load extends nothing. An entry made under a
/// larger `best_s` (earlier) keeps more points, which the entries made from it drop in turn; an entry
/// never reads one made after it, so every entry holds the points of the full frontier that are not
/// hopeless at its making, whatever the order of asking.
Frontier frontier(const VariantModel& model, FrontierTable& table, std::size_t set, std::size_t s, std::size_t q,
                  double best_s) {
  const Lattice& lat = model.lat;
  const std::size_t entry = table.at(set, s, q);
  if (table.made[entry] != 0) return table.points(entry);
  table.made[entry] = 1;
  if (set == 0 || set + 1 == lat.sets.size() || static_cast<std::size_t>(lat.set_size[set]) < s ||
      model.devices(static_cast<int64_t>(s), static_cast<int64_t>(q)) > model.in().devices) {
    return table.points(entry);  // no partition: left empty
  }
  model.poll();
  const double pace = model.least_pace(static_cast<int64_t>(s), table.plans_total, table.plans_d);
  const auto hopeless = [&](double load_s) { return load_s * pace >= best_s; };
  std::vector<Point>& made = table.scratch[s];
  if (s == 1) {
    const std::size_t p = lat.first_pair[set];  // the whole set as one stage (its inner set is the empty one)
    if (model.tab.narrow[p] == q && table.fits_at(model, p, 1) && model.stage_devices(p) <= model.in().devices &&
        !hopeless(table.price(p))) {
      const int64_t weights = table.experts() ? 0 : model.tab.cost[p].param_bytes;
      const SyncKeys keys = table.experts() ? table.sync(model, p) : SyncKeys{};
      made.push_back({table.price(p), weights, static_cast<int32_t>(p), -1, keys, model.tab.cost[p].weight_grad_s});
    }
  } else {
    // The pairs that extend, in pair order: of those whose load is not hopeless (a run of the set's pairs
    // by load), those whose remaining set has s - 1 layers at least and that fit at position s.
    std::vector<int32_t>& pairs = table.extending[s];
    for (std::size_t i = lat.first_pair[set]; i < lat.first_pair[set + 1]; ++i) {
      const auto p = static_cast<std::size_t>(table.loads->by_load[i]);
      if (hopeless(table.price(p))) break;
      if (static_cast<std::size_t>(lat.set_size[lat.inner[p]]) + 1 >= s && model.tab.narrow[p] <= q &&
          table.fits_at(model, p, static_cast<int64_t>(s))) {
        pairs.push_back(static_cast<int32_t>(p));
      }
    }
    std::sort(pairs.begin(), pairs.end());
    for (const int32_t p : pairs) {
      frontier(model, table, static_cast<std::size_t>(lat.inner[p]), s - 1, q - model.tab.narrow[p], best_s);
    }
    for (const int32_t p : pairs) {
      const Frontier before =
          table.points(table.at(static_cast<std::size_t>(lat.inner[p]), s - 1, q - model.tab.narrow[p]));
      if (model.plan.zero_bubble()) {
        const int64_t weights = table.experts() ? 0 : model.tab.cost[p].param_bytes;
        const SyncKeys keys = table.experts() ? table.sync(model, p) : SyncKeys{};
        extend_grad_frontier(before, table.price(p), weights, keys, model.tab.cost[p].weight_grad_s, p, made);
      } else if (table.experts()) {
        extend_sync_frontier(before, table.price(p), table.sync(model, p), p, made);
      } else {
        extend_frontier(before, table.price(p), model.tab.cost[p].param_bytes, p, made);
      }
    }
    pairs.clear();
  }
  made.erase(std::remove_if(made.begin(), made.end(), [&](const Point& x) { return hopeless(x.load_s); }), made.end());
  if (model.plan.zero_bubble()) {
    keep_grad_frontier(made);
  } else {
    table.experts() ? keep_sync_frontier(made) : keep_frontier(made);
  }
  table.span[entry] = {table.store.size(), made.size()};
  table.store.insert(table.store.end(), made.begin(), made.end());
  made.clear();
  return table.points(entry);
}

/// The pairs of a plan, first stage first: `first`, then those of point `point` of the remaining set's
/// s - 1 stages.
std::vector<std::size_t> frontier_pairs(const VariantModel& model, const FrontierTable& table, std::size_t first,
                                        std::size_t s, std::size_t q, int32_t point) {
  std::vector<std::size_t> pairs{first};
  std::size_t set = static_cast<std::size_t>(model.lat.inner[first]);
  q -= model.tab.narrow[first];
  for (--s; s >= 1; --s) {
    const Point& at = table.points(table.at(set, s, q))[static_cast<std::size_t>(point)];
    const auto p = static_cast<std::size_t>(at.pair);
    pairs.push_back(p);
    q -= model.tab.narrow[p];
    set = static_cast<std::size_t>(model.lat.inner[p]);
    point = at.rest;
  }
  return pairs;
}

/// The pairs of a plan, first stage first, read back from a table.
std::vector<std::size_t> plan_pairs(const VariantModel& model, const MinMaxTable& table, std::size_t first,
                                    std::size_t s, std::size_t q) {
  std::vector<std::size_t> pairs{first};
  std::size_t set = static_cast<std::size_t>(model.lat.inner[first]);
  q -= model.tab.narrow[first];
  for (--s; s >= 1; --s) {
    const auto p = static_cast<std::size_t>(table.choice[table.at(set, s, q)]);
    pairs.push_back(p);
    q -= model.tab.narrow[p];
    set = static_cast<std::size_t>(model.lat.inner[p]);
  }
  return pairs;
}

/// A lower bound on the peak memory of every plan of `total` stages at width d: the largest of (1) its
/// first stage's, which holds at least the chunks interleaving cuts and sits at position `total`, so at
/// least the least memory of such a stage there, (2) the mean of its stages' memory: their weights,
/// gradients and optimizer state P_i add up to at least the whole model's P (sharded over the d cp devices
/// as the ZeRO stage says, rounding aside), and each keeps at least its layers' least kept bytes K_i
/// (its mode's, or none's for the last stage; they add up to K) for the fewest microbatches in flight,
/// the last stage's, and (3) their mean weighted by 1 / u_i, u_i the model-chunk microbatches in flight
/// at stage i's position: the stage at position q keeps K_i u_q / v at least, so sum_i M_i / u_i >=
/// sum_i P_i / u_i + K / v >= P / u_total + K / v, over sum_q 1 / u_q (the positions are 1..total). When
/// the kept bytes dominate, (3) is K / v over a harmonic sum, where (2) is K u_1 / v over the stage count.
/// A stage's memory never grows with d (more replicas shard more and leave fewer microbatches each), so
/// the bound at the widest d is one for every narrower d too, and the bound never grows with d. kNone when
/// no plan has `total` stages.
int64_t memory_bound(const VariantModel& model, int64_t total, int64_t d) {
  const Lattice& lat = model.lat;
  const std::size_t all = lat.sets.size() - 1;
  // Interleaving cuts each of several stages into v chunks of a layer at least: no plan has more stages.
  if (total > 1 && total * model.interleave() > lat.graph.g.n) return kNone<int64_t>;
  int64_t first = kNone<int64_t>;
  for (std::size_t p = lat.first_pair[all]; p < lat.first_pair[all + 1]; ++p) {
    if ((lat.inner[p] == 0) != (total == 1) || !model.chunks_fit(p, total)) continue;
    first = std::min(first, model.memory_bytes(p, total, total, d));
  }
  const PlanModel& plan = model.plan;
  const LayerFigures& f = model.in().widths[model.variant.width_index];
  const auto group = static_cast<double>(plan.group(d));
  // The experts' group as a real number: at most the integer one at every narrower d that tiles ep.
  const double expert_group = std::max(1.0, static_cast<double>(plan.t) * group / static_cast<double>(plan.settings.ep));
  double params = 0.0, experts = 0.0, kept = 0.0;
  for (std::size_t v = 0; v < f.param_bytes.size(); ++v) {
    params += static_cast<double>(f.param_bytes[v]);
    experts += static_cast<double>(f.expert_param_bytes[v]);
    int64_t own = f.stash_bytes[v];
    if (plan.settings.recompute == static_cast<int64_t>(Recompute::kSelective)) own = f.selective_bytes[v];
    if (plan.settings.recompute == static_cast<int64_t>(Recompute::kFull)) own = f.input_bytes[v];
    if (plan.settings.recompute == static_cast<int64_t>(Recompute::kOp)) own = f.op_bytes[v];
    // Block recompute keeps a block's inputs or its stash, whichever stage it lands in.
    if (plan.settings.recompute == static_cast<int64_t>(Recompute::kBlock) && f.block[v] != 0) own = f.input_bytes[v];
    kept += static_cast<double>(std::min(own, f.stash_bytes[v]));
  }
  const double dense = params - experts;
  const double shard = dense / group + experts / expert_group;
  const double weights = plan.shards_weights() ? shard : params;
  const double gradients = static_cast<double>(plan.grad_factor()) * (plan.shards_gradients() ? shard : params);
  const auto factor = static_cast<double>(model.in().optimizer_factor - 2);
  const double state = plan.shards_state() ? factor * dense / group + factor * experts / expert_group : factor * params;
  const auto v = static_cast<double>(model.interleave());
  const double in_flight = static_cast<double>(plan.in_flight(1, total, d)) / v;
  const double mean = (weights + gradients + state + kept * in_flight) / static_cast<double>(total);
  double inverse_in_flight = 0.0;
  for (int64_t q = 1; q <= total; ++q) inverse_in_flight += 1.0 / static_cast<double>(plan.in_flight(q, total, d));
  const double most_in_flight = static_cast<double>(plan.in_flight(total, total, d));
  const double weighted = ((weights + gradients + state) / most_in_flight + kept / v) / inverse_in_flight;
  // Scaled down far past the rounding of the sums, so the bound never exceeds the least peak.
  return std::max({first == kNone<int64_t> ? 0 : first, static_cast<int64_t>(mean * (1.0 - 1e-9)),
                   static_cast<int64_t>(weighted * (1.0 - 1e-9))});
}

/// Plans as the pairs of their stages, first stage first.
using PairPlans = std::vector<std::vector<std::size_t>>;

/// The least peak memory at d = 1 of the plans of `known` that are plans of the variant there: on the
/// devices, interleaving able to cut each of several stages into chunks (kNone if none).
int64_t known_peak(const VariantModel& model, const PairPlans& known) {
  int64_t least = kNone<int64_t>;
  for (const auto& pairs : known) {
    const auto total = static_cast<int64_t>(pairs.size());
    int64_t devices = 0, peak = 0;
    bool cut = true;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      devices += model.stage_devices(pairs[i]);
      cut = cut && model.chunks_fit(pairs[i], total);
      peak = std::max(peak, model.memory_bytes(pairs[i], total - static_cast<int64_t>(i), total, 1));
    }
    if (cut && devices <= model.in().devices) least = std::min(least, peak);
  }
  return least;
}

/// The least peak memory of any plan at d = 1 (whose stages interleaving can cut into chunks), split
/// for the peak stage of one plan attaining it (the plan of fewest stages, then fewest narrow ones),
/// whose pairs it leaves in `plan`. Under interleaving the in-flight count depends on the stage count,
/// so each count gets a table; the counts are tried by their `memory_bound`, least first, and a count
/// whose bound is above the least peak found is skipped (each of its plans peaks above it). The search
/// starts from the least peak of the `known` plans (`known_peak`), as if found, but for a tie: every
/// plan that peaks at most as high is still met, in the same order, so the plan reported is the same.
void fill_infeasible(const VariantModel& model, PlanResult& out, const PairPlans& known,
                     std::vector<std::size_t>& plan) {
  const std::size_t all = model.lat.sets.size() - 1;
  const auto max_stages = static_cast<int64_t>(model.max_stages());
  const bool per_total = model.interleave() > 1;
  std::vector<std::pair<int64_t, int64_t>> totals;  // (bound, stage count); 0: every count in one table
  if (per_total) {
    for (int64_t total = 1; total <= max_stages; ++total) totals.emplace_back(memory_bound(model, total, 1), total);
    std::sort(totals.begin(), totals.end());
  } else {
    totals.emplace_back(0, 0);
  }
  const int64_t seed = known_peak(model, known);
  int64_t best = seed;
  int64_t best_total = seed < kNone<int64_t> ? kNone<int64_t> : 0;  // the seed loses a tie to any plan found
  bool found = false;
  for (const auto& [bound, total] : totals) {
    if (bound > best || bound == kNone<int64_t>) continue;  // kNone: no plan of `total` stages
    // A stage above the least peak found is in no plan that peaks at most as high: priced as one that
    // does not fit, it leaves every entry at most that peak as it was.
    std::optional<VariantModel::PositionMemory> bytes;  // of the pair at hand (the table asks pair by pair)
    std::size_t bytes_of = 0;
    const auto table = minmax_partition(
        model, static_cast<std::size_t>(per_total ? total : max_stages), [&](std::size_t p, int64_t s) {
          if (!model.chunks_fit(p, total)) return kNone<int64_t>;
          if (!bytes || bytes_of != p) {
            bytes.emplace(model.position_memory(p, total, 1));
            bytes_of = p;
          }
          const int64_t at = bytes->at(s);
          return at > best ? kNone<int64_t> : at;
        });
    for (std::size_t s = per_total ? total : 1; s <= (per_total ? total : table.max_stages); ++s) {
      for (std::size_t q = 0; q <= table.max_narrow; ++q) {
        const int64_t peak = table.value[table.at(all, s, q)];
        if (peak == kNone<int64_t> || peak > best || (peak == best && total >= best_total)) continue;
        const auto first = static_cast<std::size_t>(table.choice[table.at(all, s, q)]);
        const auto pairs = plan_pairs(model, table, first, s, q);
        for (std::size_t i = 0; i < pairs.size(); ++i) {
          const StageMemory parts = model.memory(pairs[i], static_cast<int64_t>(s - i), static_cast<int64_t>(s), 1);
          if (parts.total_bytes() != peak) continue;
          best = peak;
          best_total = total;
          found = true;
          plan = pairs;
          out.min_memory_bytes = peak;
          out.parameter_bytes = parts.parameter_bytes();
          out.activation_bytes = parts.working_bytes;
          out.stash_bytes = parts.stash_bytes;
          break;
        }
      }
    }
  }
  if (!found && seed < kNone<int64_t>) fill_infeasible(model, out, {}, plan);  // not met: the tests rule it out
}

/// A lower bound on the time per batch of every plan of s stages at width d, from the bottleneck load
/// alone: a longest forward path of the whole layer graph crosses the stages in pipeline order, its
/// part inside a stage a path of the stage, so the stages' forward critical paths sum to at least the
/// graph's (and so do the backward ones). When every stage recomputes in the plan's mode (Megatron's
/// rule, or no recomputation), their recomputations add up to at least the graph's forward critical
/// path (full), to every layer's attention cores (selective) or to every layer's unsaved ops (op).
/// Every stage but the last sends its cut forward and receives its gradient, v times, each at least
/// the smallest cut of the graph on the pipeline's tier (a t-th of it per device under sequence
/// parallelism). The largest load is then at least the sum over s, and at least any one layer's
/// share of it; the time is at least that load times the pace (`PlanModel::pace`: the slots, under
/// 1F1B) plus a sync and step that are never negative.
/// Scaled down by 1e-9, far more than the rounding of the sums, so a plan it rules out is never one
/// the DP would have taken, ties included.
struct LoadBound {
  double graph_s = 0.0;  // forward + backward (+ recompute) critical paths of the whole graph
  double layer_s = 0.0;  // the largest forward + backward (+ recompute) of a layer
  int64_t cut_bytes = kNone<int64_t>;  // the fewest bytes crossing a cut between two stages
  const VariantModel& model;

  explicit LoadBound(const VariantModel& m) : model(m) {
    const Lattice& lat = m.lat;
    const std::size_t all = lat.sets.size() - 1;
    const LayerFigures& f = m.in().widths[m.variant.width_index];
    const Recompute mode = static_cast<Recompute>(m.plan.settings.recompute);
    const bool everywhere = mode == Recompute::kNone || m.plan.settings.last_stage_recomputes;
    for (std::size_t p = lat.first_pair[all]; p < lat.first_pair[all + 1]; ++p) {
      if (lat.inner[p] != 0) continue;
      const StageCost& c = m.tab.cost[p];
      graph_s = c.forward_s + c.backward_s;
      if (everywhere && mode == Recompute::kFull) graph_s += c.forward_s;
      if (everywhere && mode == Recompute::kSelective) graph_s += c.selective_s;
      if (everywhere && mode == Recompute::kOp) graph_s += c.op_s;
    }
    for (std::size_t v = 0; v < f.forward_s.size(); ++v) {
      double own_s = f.forward_s[v] + f.backward_s[v];
      if (everywhere && mode == Recompute::kFull) own_s += f.forward_s[v];
      if (everywhere && mode == Recompute::kSelective) own_s += f.selective_s[v];
      if (everywhere && mode == Recompute::kOp) own_s += f.op_s[v];
      layer_s = std::max(layer_s, own_s);
    }
    for (std::size_t set = 1; set < all; ++set) cut_bytes = std::min(cut_bytes, lat.cut_bytes[set]);
  }

  /// The fewest bytes a device sends across a cut: under sequence parallelism a t-th of the smallest
  /// cut, as a stage of t devices sends it (a narrower one sends more).
  double least_sent_bytes() const {
    const auto bytes = static_cast<double>(cut_bytes);
    return model.plan.settings.sequence_parallel ? bytes / static_cast<double>(model.tab.t) : bytes;
  }

  /// The bound for s stages at width d, the pipeline's transfers on `tier` (none when they hide behind
  /// the computation: a stage's load is then at least its computation's).
  double time_s(int64_t s, int64_t d, const NetworkTier& tier) const {
    const double sends_s = cut_bytes == kNone<int64_t> || model.plan.hides_sends() ? 0.0
                                                       : static_cast<double>(s - 1) * 2.0 *
                                                             static_cast<double>(model.interleave()) *
                                                             transfer_s(least_sent_bytes(), tier);
    const double load_s = std::max((graph_s + sends_s) / static_cast<double>(s), layer_s);
    return load_s * model.plan.pace(s, d) * (1.0 - 1e-9);
  }
};

/// A variant's width index and settings: what the least memory of its plans, at d = 1, depends on (not its
/// HBM). The switches that time the DP syncs alone count as off, and a ZeRO stage that shards nothing at
/// d = 1 as 0: below 3 on one context-parallel device (a shard over one device is the whole; ZeRO-3 still
/// holds gathered layers), every stage's memory is ZeRO-0's, bit for bit, unless routed experts
/// (`experts`) shard over an expert-data-parallel group wider than one device (t above ep at width t).
std::vector<int64_t> memory_key(const Variant& variant, int64_t t, bool experts) {
  PlanSettings settings = variant.settings;
  settings.overlap_grad_reduce = settings.overlap_param_gather = settings.overlap_p2p_comm = false;
  settings.pipeline_schedule = 0;  // ZB-H1 keeps 1F1B's microbatches in flight
  const bool experts_shard = experts && t > settings.ep;
  if (settings.cp == 1 && settings.zero_stage < 3 && !experts_shard) settings.zero_stage = 0;
  std::vector<int64_t> key{variant.width_index};
#define PHAZEC_SETTING_KEY(type, name, value) key.push_back(static_cast<int64_t>(settings.name));
  PHAZEC_PLAN_SETTINGS(PHAZEC_SETTING_KEY)
#undef PHAZEC_SETTING_KEY
  return key;
}

/// The least memory of each variant's plans, by `memory_key`: variants that differ in HBM, in how they
/// time syncs or in a ZeRO stage that shards nothing at d = 1 share it.
using LeastMemory = std::map<std::vector<int64_t>, PlanResult>;

/// The optimum of one variant, its pairs left in `plan` (or, when no plan fits and its least-memory report
/// is made, those of the plan that report splits; else none). `incumbent_s` is the time of a plan of the
/// variant (`kNone`: none known): the search starts with it as the best time, allowing ties (its next
/// double up), so it skips from the start every table and plan that cannot reach it, and still returns
/// the plan it returns without it (below). A report starts from the `known` plans (`fill_infeasible`).
PlanResult solve_variant(const VariantModel& model, LeastMemory& least_memory, const PairPlans& known,
                         std::vector<std::size_t>& plan, double incumbent_s = kNone<double>) {
  const Lattice& lat = model.lat;
  const PlacementInput& in = model.in();
  const int64_t t = model.tab.t;
  const int64_t cp = model.plan.settings.cp;
  const int64_t hbm_bytes = model.variant.hbm_bytes;
  const std::size_t all = lat.sets.size() - 1;
  // One table per network tier that pipeline transfers use, built on first use; and per stage count
  // under interleaving, per d with a sharded optimizer or experts, else per cap on the microbatches in
  // flight where it binds (below).
  // With experts, also per tiers of a later stage's syncs (their bandwidths and latencies).
  std::map<std::tuple<std::size_t, int64_t, int64_t, int64_t, std::array<double, 4>>, FrontierTable> tables;
  const bool per_total = model.interleave() > 1;
  const bool experts = model.experts();  // a point keeps its later stages' sync figures at d and k
  const bool per_d = model.plan.shards_state() || experts;
  const bool per_k = model.plan.shards_weights();  // a load depends on the DP group's tier
  // The tiers of a later stage's DP groups (t cp devices wide, at most k).
  auto later_tiers = [&](int64_t d, int64_t k) { return model.plan.sync_tiers(in.tiers, d, k, std::min(t * cp, k)); };
  std::map<std::size_t, std::shared_ptr<const PairLoads>> tier_loads;
  std::shared_ptr<const PairLoads> own_loads;
  // The table for plans of `total` stages at d.
  auto table_for = [&](std::size_t tier, int64_t total, int64_t d, int64_t k) -> FrontierTable& {
    // Without a sharded optimizer a stage's memory depends on d only through the model-chunk microbatches
    // in flight at its position q, min(Megatron's count(q), m v), and the count grows with q. When m v is
    // at least the count at the deepest position the DP can use at d (the stage count under
    // interleaving, else the most stages d replicas leave room for), d's tables are those of d = 1 over
    // those positions: shared, and priced at d = 1. Otherwise they are keyed by m v, which fixes every
    // figure in them.
    const int64_t cap = model.plan.microbatches_per_replica(d) * model.interleave();
    const int64_t positions =
        per_total ? total : std::min(static_cast<int64_t>(model.max_stages()), in.devices / (d * cp));
    const bool uncapped = cap >= model.plan.in_flight(positions, total, 1);
    const int64_t priced_d = per_d || !uncapped ? d : 1;
    const SyncTiers later = experts ? later_tiers(d, k) : SyncTiers{};
    const std::array<double, 4> sync_tiers{later.dense.bandwidth_bytes_per_s, later.dense.latency_s,
                                           later.expert.bandwidth_bytes_per_s, later.expert.latency_s};
    const auto key =
        std::make_tuple(tier, per_total ? total : 0, per_d ? d : (uncapped ? 0 : cap), per_k ? k : 0, sync_tiers);
    auto it = tables.find(key);
    if (it == tables.end()) {
      // The rest of a plan of `total` stages has total - 1 (any count below the most, without interleaving).
      const std::size_t stages = per_total ? static_cast<std::size_t>(total) - 1 : model.max_stages() - 1;
      // Every d that shares a table keyed by d or by m v has d's m microbatches per replica.
      const int64_t plans_d = per_d || !uncapped ? d : 0;
      // A load depends on the tier alone, but under ZeRO-3 (on d and k too: such a table has its own).
      std::shared_ptr<const PairLoads>& loads = per_k ? own_loads : tier_loads[tier];
      if (!loads || per_k) loads = std::make_shared<const PairLoads>(model, tier, d, k);
      it = tables
               .emplace(key, FrontierTable(model, stages, total, priced_d, tier, d, k, per_total ? total : 0, plans_d,
                                           loads, experts ? std::optional<SyncTiers>(later) : std::nullopt))
               .first;
    }
    return it->second;
  };
  struct Best {
    double time_s = kNone<double>;
    std::size_t tier = 0, pair = 0, s = 0, q = 0;
    int64_t d = 0, k = 0;
    int32_t point = -1;
  } best;
  // Every rule below skips only plans (and tables of them) whose time reaches the best time; the plan
  // kept is the first of least time in the search's order. Started from just above the incumbent's time,
  // the search skips plans no faster than it, so every plan of least time is still met, in the same
  // order: the plan returned is the same. Should none be met (the incumbent timed lower than the DP
  // would), the variant is solved again without it.
  if (incumbent_s < kNone<double>) best.time_s = std::nextafter(incumbent_s, kNone<double>);
  const std::size_t max_stages = model.max_stages();
  const auto max_narrow = static_cast<std::size_t>(model.tab.max_narrow);
  const LoadBound bound(model);
  for (std::size_t s = 1; s <= max_stages; ++s) {
    const auto total = static_cast<int64_t>(s);
    for (std::size_t q = 0; q <= std::min(max_narrow, s); ++q) {
      const int64_t k = model.devices(total, static_cast<int64_t>(q));
      if (k > in.devices) continue;
      const int64_t max_d = std::min(in.microbatches, in.devices / k);
      if (memory_bound(model, total, max_d) > hbm_bytes) continue;  // no plan of s stages fits at any d
      // Per d: the slowest tier any of the first d pipeline replicas spans (replica r on r*k..r*k+k-1),
      // and the DP sync's tiers for a stage one device and t devices wide (a later stage: t, at most k).
      // And the load bound of s stages at d (kNone where the expert-parallel groups do not tile the stage).
      std::vector<std::size_t> pipeline_tier(static_cast<std::size_t>(max_d) + 1, 0);
      const SyncTiers none{in.tiers[0], in.tiers[0]};
      std::vector<SyncTiers> narrow_sync{none}, wide_sync{none};
      std::vector<double> bound_s(static_cast<std::size_t>(max_d) + 1, kNone<double>);
      for (int64_t d = 1; d <= max_d; ++d) {
        pipeline_tier[d] = std::max(pipeline_tier[d - 1], span_tier(in.tiers, (d - 1) * k, d * k - 1));
        narrow_sync.push_back(model.plan.sync_tiers(in.tiers, d, k, std::min(cp, k)));
        wide_sync.push_back(later_tiers(d, k));
        if ((d * t * cp) % model.plan.settings.ep == 0) bound_s[d] = bound.time_s(total, d, in.tiers[pipeline_tier[d]]);
      }
      // No plan of s stages fits at a d whose memory bound is above the HBM: those below the narrowest
      // that passes (the bound never grows with d).
      const int64_t cramped = run_end(1, max_d, [&](int64_t d) { return memory_bound(model, total, d) > hbm_bytes; });
      std::fill(bound_s.begin(), bound_s.begin() + cramped + 1, kNone<double>);
      if (*std::min_element(bound_s.begin() + 1, bound_s.end()) >= best.time_s) continue;  // none beats the best
      std::vector<FrontierTable*> table_at(static_cast<std::size_t>(max_d) + 1, nullptr);  // per d, once asked
      // With a table per d (a sharded optimizer): the widths that share a pipeline tier share its loads
      // (unless ZeRO-3's), and a partition that fits at one of them fits at the widest, d_top. A plan at
      // such a d has a bottleneck of at least B, the least over first stages that fit at d_top of the
      // larger of their load and the least load of their rest's frontier there (none left: no partition
      // fits, or every plan is at least as slow as the best, since the points dropped are too loaded for
      // the pace of d_top, the least), and a time of at least B times its pace. So widths where nothing
      // fits are skipped before any best is found, with no table of their own.
      for (int64_t top = max_d; top >= 1 && per_d && !per_k;) {
        const std::size_t tier = pipeline_tier[top];
        int64_t low = top;
        while (low > 1 && pipeline_tier[low - 1] == tier) --low;
        if (*std::min_element(bound_s.begin() + low, bound_s.begin() + top + 1) < best.time_s) {
          double least_s = kNone<double>;
          for (std::size_t p = lat.first_pair[all]; p < lat.first_pair[all + 1]; ++p) {
            const std::size_t narrow = model.tab.narrow[p];
            const bool single = lat.inner[p] == 0;
            if (single != (s == 1) || narrow > q || (single && narrow != q) || !model.chunks_fit(p, total) ||
                model.memory_bytes(p, total, total, top) > hbm_bytes) {
              continue;
            }
            double bottleneck_s = model.load_s(p, tier, top, k);
            if (!single) {
              if (table_at[top] == nullptr) table_at[top] = &table_for(tier, total, top, k);
              const Frontier rest = frontier(model, *table_at[top], static_cast<std::size_t>(lat.inner[p]), s - 1,
                                             q - narrow, best.time_s);
              bottleneck_s = rest.size == 0 ? kNone<double> : std::max(bottleneck_s, rest[0].load_s);
            }
            least_s = std::min(least_s, bottleneck_s);
          }
          for (int64_t d = low; d <= top; ++d) {
            if (bound_s[d] != kNone<double>) bound_s[d] = std::max(bound_s[d], least_s * model.plan.pace(total, d));
          }
        }
        top = low - 1;
      }
      for (std::size_t p = lat.first_pair[all]; p < lat.first_pair[all + 1]; ++p) {
        model.poll();
        const std::size_t narrow = model.tab.narrow[p];
        const bool single = lat.inner[p] == 0;
        if (single != (s == 1) || narrow > q || (single && narrow != q) || !model.chunks_fit(p, total)) continue;
        // The first stage fits from the narrowest d at which it fits on: its memory never grows with d.
        const auto fits = [&](int64_t d) { return model.memory_bytes(p, total, total, d) <= hbm_bytes; };
        if (!fits(max_d)) continue;
        const int64_t narrowest = run_end(1, max_d - 1, [&](int64_t d) { return !fits(d); }) + 1;
        for (int64_t d = narrowest; d <= max_d; ++d) {
          if (bound_s[d] >= best.time_s) continue;  // no plan of s stages at d beats the best
          const std::size_t tier = pipeline_tier[d];
          const double first_load_s = model.load_s(p, tier, d, k);
          const double pace = model.plan.pace(total, d);
          if (first_load_s * pace >= best.time_s) continue;  // its time is at least the product
          const StageCost& first = model.tab.cost[p];
          const SyncKeys first_keys = model.plan.sync_keys(first.param_bytes, first.expert_param_bytes, d,
                                                           narrow != 0 ? narrow_sync[d] : wide_sync[d]);
          // The first stage's sync and step; its windows depend on the bottleneck only when bounded.
          auto first_end_s = [&](double bottleneck_s) {
            return model.plan.end_s(first_keys, model.plan.sync_windows_s(first, total, d, bottleneck_s));
          };
          const double own_end_s = first_end_s(first_load_s);
          if (single) {
            const double time_s = model.plan.pipeline_s(first_load_s, first.weight_grad_s, total, d) + own_end_s;
            if (time_s < best.time_s) best = {time_s, tier, p, s, q, d, k, -1};
            continue;
          }
          if (table_at[d] == nullptr) table_at[d] = &table_for(tier, total, d, k);
          const Frontier rest = frontier(model, *table_at[d], static_cast<std::size_t>(lat.inner[p]), s - 1, q - narrow,
                                         best.time_s);
          for (std::size_t i = 0; i < rest.size; ++i) {
            // Load ascending: no later point makes a time below the best either.
            if (rest[i].load_s * pace >= best.time_s) break;
            const double bottleneck_s = std::max(first_load_s, rest[i].load_s);
            const double grad_s = std::min(first.weight_grad_s, rest[i].grad_s);  // read under ZB-H1 alone
            const double first_s = in.bound_sync_windows ? first_end_s(bottleneck_s) : own_end_s;
            // The later stages' sync figures: their maxima, or those of their largest weights.
            const SyncKeys keys = experts ? rest[i].keys : model.plan.sync_keys(rest[i].weights, 0, d, wide_sync[d]);
            const double rest_end_s = model.plan.end_s(keys, model.plan.sync_windows_s(first, total, d, bottleneck_s));
            const double time_s =
                model.plan.pipeline_s(bottleneck_s, grad_s, total, d) + std::max(first_s, rest_end_s);
            if (time_s < best.time_s) best = {time_s, tier, p, s, q, d, k, static_cast<int32_t>(i)};
          }
        }
      }
    }
  }
  PlanResult out;
  out.t = t;
  if (best.d == 0) {  // no plan met
    if (incumbent_s < kNone<double>) return solve_variant(model, least_memory, known, plan);
    const auto [it, made] = least_memory.try_emplace(memory_key(model.variant, model.tab.t, model.plan.experts));
    if (made) {
      it->second.t = t;
      fill_infeasible(model, it->second, known, plan);
    }
    return it->second;
  }
  out.feasible = true;
  out.d = best.d;
  out.microbatches_per_pipeline = model.plan.microbatches_per_replica(best.d);
  out.time_per_batch_s = best.time_s;
  const auto total = static_cast<int64_t>(best.s);
  const auto pairs = best.s == 1 ? std::vector<std::size_t>{best.pair}
                                 : frontier_pairs(model, table_for(best.tier, total, best.d, best.k),
                                                  best.pair, best.s, best.q, best.point);
  plan = pairs;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    out.stage_layers.push_back(members(lat.stage[pairs[i]]));
    out.stage_devices.push_back(model.stage_devices(pairs[i]));
    out.stage_load_s.push_back(model.load_s(pairs[i], best.tier, best.d, best.k));
    out.stage_memory_bytes.push_back(model.memory_bytes(pairs[i], total - static_cast<int64_t>(i), total, best.d));
  }
  return out;
}

void check_input(const PlacementInput& in, const std::vector<Variant>& variants) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("placement input: " + what); };
  if (in.n < 1) fail("no layers");
  if (in.edge_bytes.size() != in.edges.size()) fail("edge and edge-byte counts differ");
  if (in.devices < 1 || in.microbatches < 1 || in.optimizer_factor < 2) fail("non-positive count");
  if (!(in.hbm_bytes_per_s >= 0.0)) fail("HBM bandwidth must be >= 0");
  if (in.tiers.empty() || in.tiers.back().group_size < in.devices) fail("no tier holds every device");
  for (const auto& tier : in.tiers) {
    if (tier.group_size < 1 || !(tier.bandwidth_bytes_per_s > 0.0) || !(tier.latency_s >= 0.0)) {
      fail("bad network tier");
    }
  }
  const auto n = static_cast<std::size_t>(in.n);
  for (const auto& f : in.widths) {
    if (f.t < 1 || f.t > in.devices) fail("tensor-parallel width outside 1..devices");
    for (const auto* v : {&f.forward_s, &f.backward_s}) {
      if (v->size() != n || std::any_of(v->begin(), v->end(), [](double x) { return !(x >= 0.0); })) {
        fail("latencies must be n values >= 0");
      }
    }
    if (f.weight_grad_s.size() != n) fail("weight-gradient latencies must be n values");
    for (std::size_t v = 0; v < n; ++v) {
      if (!(f.weight_grad_s[v] >= 0.0) || f.weight_grad_s[v] > f.backward_s[v]) {
        fail("weight-gradient latencies must be between 0 and the layer's backward latency");
      }
    }
    for (const auto* v : {&f.selective_s, &f.op_s}) {
      if (v->size() != n || std::any_of(v->begin(), v->end(), [](double x) { return !(x >= 0.0); })) {
        fail("selective and op recompute latencies must be n values >= 0");
      }
    }
    for (std::size_t v = 0; v < f.stash_bytes.size(); ++v) {
      if (v < f.selective_bytes.size() && f.selective_bytes[v] > f.stash_bytes[v]) {
        fail("selective bytes must not exceed stash bytes");
      }
      if (v < f.op_bytes.size() && f.op_bytes[v] > f.stash_bytes[v]) fail("op bytes must not exceed stash bytes");
    }
    for (const auto* v :
         {&f.param_bytes, &f.activation_bytes, &f.stash_bytes, &f.selective_bytes, &f.input_bytes, &f.op_bytes}) {
      if (v->size() != n || std::any_of(v->begin(), v->end(), [](int64_t x) { return x < 0; })) {
        fail("byte counts must be n values >= 0");
      }
    }
    if (f.tensor_parallel.size() != n) fail("tensor-parallel flags must be n values");
    if (f.block.size() != n) fail("block flags must be n values");
    if (f.expert_param_bytes.size() != n) fail("expert parameter bytes must be n values");
    for (std::size_t v = 0; v < n; ++v) {
      if (f.expert_param_bytes[v] < 0 || f.expert_param_bytes[v] > f.param_bytes[v]) {
        fail("expert parameter bytes must be between 0 and the layer's parameter bytes");
      }
    }
    if (f.gather_bytes.size() != n || f.expert_gather_bytes.size() != n) fail("gather bytes must be n values");
    for (std::size_t v = 0; v < n; ++v) {
      if (f.gather_bytes[v] < 0 || f.gather_bytes[v] > f.param_bytes[v] || f.expert_gather_bytes[v] < 0 ||
          f.expert_gather_bytes[v] > f.gather_bytes[v] || f.expert_gather_bytes[v] > f.expert_param_bytes[v]) {
        fail("gather bytes must be between 0 and the layer's parameter bytes, the experts' at most theirs");
      }
    }
    if (f.dummy_wgrad_bytes.size() != n) fail("dummy weight-gradient bytes must be n values");
    for (std::size_t v = 0; v < n; ++v) {
      if (f.dummy_wgrad_bytes[v] < 0 || f.dummy_wgrad_bytes[v] > f.param_bytes[v]) {
        fail("dummy weight-gradient bytes must be between 0 and the layer's parameter bytes");
      }
    }
  }
  if (std::any_of(in.edge_bytes.begin(), in.edge_bytes.end(), [](int64_t x) { return x < 0; })) {
    fail("edge bytes must be >= 0");
  }
  if (!(in.collective_share >= 0.0 && in.collective_share <= 1.0)) fail("collective share must be in [0, 1]");
  for (const auto& v : variants) {
    if (v.width_index < 0 || static_cast<std::size_t>(v.width_index) >= in.widths.size()) {
      fail("variant width index out of range");
    }
    if (v.settings.interleave < 1 || v.hbm_bytes < 1) fail("interleave and HBM bytes must be positive");
    if (v.settings.ep < 1) fail("the expert-parallel width must be positive");
    if (v.settings.recompute < 0 || v.settings.recompute > static_cast<int64_t>(Recompute::kBlock)) {
      fail("unknown recompute mode");
    }
    if (v.settings.recompute_layers < 1) fail("block recompute's blocks per model chunk must be positive");
    if (v.settings.zero_stage < 0 || v.settings.zero_stage > 3) fail("zero stage outside 0..3");
    if (v.settings.pipeline_schedule < 0 || v.settings.pipeline_schedule > static_cast<int64_t>(PipelineSchedule::kZbH1)) {
      fail("unknown pipeline schedule");
    }
    if (v.settings.pipeline_schedule == static_cast<int64_t>(PipelineSchedule::kZbH1) && v.settings.interleave != 1) {
      fail("ZB-H1 is not interleaved: interleave must be 1");
    }
    if (v.settings.cp < 1 || in.widths[v.width_index].t * v.settings.cp > in.devices) {
      fail("cp must be positive, and t x cp at most the devices");
    }
  }
}

/// Each stage of a plan as a node set, first stage first; throws std::invalid_argument unless the
/// stages are non-empty, hold each layer once and no edge runs from a later stage to an earlier one.
std::vector<NodeSet> plan_sets(const PlacementInput& in, const std::vector<std::vector<int32_t>>& stages) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("plan: " + what); };
  if (stages.empty()) fail("no stages");
  std::vector<std::size_t> stage_of(static_cast<std::size_t>(in.n), stages.size());
  std::vector<NodeSet> sets;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].empty()) fail("an empty stage");
    sets.emplace_back((static_cast<std::size_t>(in.n) + 63) / 64, 0);
    for (int32_t v : stages[i]) {
      if (v < 0 || v >= in.n || stage_of[v] != stages.size()) fail("a layer outside 0..n-1 or in two stages");
      stage_of[v] = i;
      sets.back()[v / 64] |= uint64_t{1} << (v % 64);
    }
  }
  if (std::count(stage_of.begin(), stage_of.end(), stages.size()) != 0) fail("a layer in no stage");
  for (const auto& [u, v] : in.edges) {
    if (stage_of[u] > stage_of[v]) fail("an edge runs back to an earlier stage");
  }
  return sets;
}

}  // namespace

std::size_t span_tier(const std::vector<NetworkTier>& tiers, int64_t first, int64_t last) {
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    if (first / tiers[i].group_size == last / tiers[i].group_size) return i;
  }
  return tiers.size() - 1;
}

namespace {

/// Members r k + j (r < d) of DP group j in node n (ids n g .. n g + g - 1), for n >= j / g.
int64_t node_members(int64_t n, int64_t g, int64_t d, int64_t k, int64_t j) {
  const int64_t first = (std::max<int64_t>(0, n * g - j) + k - 1) / k;
  const int64_t last = std::min(d - 1, ((n + 1) * g - 1 - j) / k);
  return last - first + 1;
}

/// The fewest members a node holds of any of the `width` DP groups that span several nodes of g ids.
/// With k >= g a node holds at most one member of a group. Otherwise a node's count depends only on
/// n g mod k, so the nodes before the last repeat with period k / gcd(g, k).
int64_t dp_rails(int64_t g, int64_t d, int64_t k, int64_t width) {
  if (k >= g) return 1;
  const int64_t period = k / std::gcd(g, k);
  int64_t fewest = d;
  for (int64_t j = 0; j < width; ++j) {
    const int64_t last = ((d - 1) * k + j) / g;
    if (last == j / g) continue;  // the whole group in one node
    for (int64_t n = 0; n < std::min(last, period); ++n) fewest = std::min(fewest, node_members(n, g, d, k, j));
    fewest = std::min(fewest, node_members(last, g, d, k, j));
  }
  return fewest;
}

}  // namespace

NetworkTier dp_sync_tier(const std::vector<NetworkTier>& tiers, int64_t d, int64_t k, int64_t width) {
  const std::size_t i = span_tier(tiers, 0, (d - 1) * k + width - 1);
  if (i == 0) return tiers[0];
  const int64_t rails = dp_rails(tiers[i - 1].group_size, d, k, width);
  NetworkTier out = tiers[i];
  out.bandwidth_bytes_per_s =
      std::min(static_cast<double>(rails) * tiers[i].bandwidth_bytes_per_s, tiers[i - 1].bandwidth_bytes_per_s);
  return out;
}

namespace {

/// The figures of one plan, its stages as node sets (`plan_sets`): `evaluate_plan` without the checks.
PlanFigures plan_figures(const PlacementInput& in, const LayerGraph& graph, const Variant& variant,
                         const std::vector<NodeSet>& sets, int64_t d) {
  const LayerFigures& f = in.widths[variant.width_index];
  const PlanModel plan{in, variant.settings, has_experts(f), f.t, weight_grad_share(f)};
  const std::size_t s = sets.size();
  const auto total = static_cast<int64_t>(s);

  PlanFigures out;
  out.t = f.t;
  out.d = d;
  out.stages.resize(s);
  NodeSet later((static_cast<std::size_t>(in.n) + 63) / 64, 0);
  std::vector<double> forward(in.n), backward(in.n), weight_grad(in.n);
  int64_t k = 0;
  for (std::size_t i = s; i-- > 0;) {
    NodeSet upto = later;
    for (std::size_t w = 0; w < later.size(); ++w) upto[w] |= sets[i][w];
    forward_finish(graph, f.forward_s, upto, forward.data());
    backward_finish(graph, f.backward_s, later, backward.data());
    backward_finish(graph, f.weight_grad_s, later, weight_grad.data());
    out.stages[i].cost = stage_cost(f, sets[i], incoming_bytes(graph, later, later), forward.data(), backward.data(),
                                    weight_grad.data(), plan.recomputed_blocks());
    later = std::move(upto);
    k += plan.stage_devices(out.stages[i].cost);
  }
  const int64_t m = plan.microbatches_per_replica(d);
  std::size_t pipeline_tier = 0;
  for (int64_t r = 0; r < d; ++r) pipeline_tier = std::max(pipeline_tier, span_tier(in.tiers, r * k, r * k + k - 1));
  std::size_t top = 0;
  double grad_s = kNone<double>;  // the stages' least weight-gradient time (ZB-H1's bubble)
  for (std::size_t i = 0; i < s; ++i) {
    PlanStage& stage = out.stages[i];
    grad_s = std::min(grad_s, stage.cost.weight_grad_s);
    const Recompute mode = plan.mode(i + 1 == s);
    stage.layers = members(sets[i]);
    stage.devices = plan.stage_devices(stage.cost);
    stage.recompute = static_cast<int64_t>(mode);
    stage.time = plan.time(stage.cost, mode, in.tiers[pipeline_tier], d,
                           plan.sync_tiers(in.tiers, d, k, std::min(stage.devices, k)));
    stage.memory = plan.memory(stage.cost, mode, total - static_cast<int64_t>(i), total, d);
    stage.load_s = stage.time.load_s();
    stage.memory_bytes = stage.memory.total_bytes();
    if (stage.load_s > out.stages[top].load_s) top = i;
  }
  const double bottleneck_s = out.stages[top].load_s;
  // The DP sync of the first stage runs on its own width's tier, every later one's on t's (at most k).
  const SyncTiers first_sync = plan.sync_tiers(in.tiers, d, k, out.stages[0].devices);
  const SyncTiers later_sync = plan.sync_tiers(in.tiers, d, k, std::min(f.t * variant.settings.cp, k));
  std::size_t last = 0;
  SyncTime last_sync;
  for (std::size_t i = 0; i < s; ++i) {
    const StageCost& c = out.stages[i].cost;
    const SyncKeys keys = plan.sync_keys(c.param_bytes, c.expert_param_bytes, d, i == 0 ? first_sync : later_sync);
    const SyncTime sync = plan.sync_time(keys, plan.sync_windows_s(out.stages[0].cost, total, d, bottleneck_s));
    out.stages[i].sync = sync;
    if (i == 0 || sync.end_s > last_sync.end_s) {
      last = i;
      last_sync = sync;
    }
  }
  out.microbatches_per_pipeline = m;
  out.time_per_batch_s = plan.pipeline_s(bottleneck_s, grad_s, total, d) + last_sync.end_s;
  out.fits_hbm = std::all_of(out.stages.begin(), out.stages.end(),
                             [&](const PlanStage& stage) { return stage.memory_bytes <= variant.hbm_bytes; });
  const StageTime& slowest = out.stages[top].time;
  const auto times_m = static_cast<double>(m);
  out.iteration = {static_cast<int64_t>(top), times_m * slowest.forward_s, times_m * slowest.backward_s,
                   times_m * slowest.recompute_s, times_m * slowest.p2p_s, times_m * slowest.shard_s,
                   plan.bubble_s(bottleneck_s, grad_s, total),
                   static_cast<int64_t>(last), last_sync.exposed_s, last_sync.step_s};
  return out;
}

/// A plan the DP found for a variant: the pairs of its stages, first stage first, and its data-parallel
/// width (0 for the plan a least-memory report splits).
struct FoundPlan {
  std::vector<std::size_t> pairs;
  int64_t d = 0;
  bool operator==(const FoundPlan& other) const { return d == other.d && pairs == other.pairs; }
};

/// The least time per batch under `variant` of the plans of `found` that are plans of it (kNone if none):
/// d at least 1 and at most the microbatches, its replicas on the devices there are, its expert-parallel
/// groups tiling its stages, interleaving able to cut each of several stages into chunks, every stage in
/// HBM at its position. The variant's optimum is at most that time.
double incumbent_s(const PlacementInput& in, const Lattice& lat, const Variant& variant,
                   const std::vector<FoundPlan>& found) {
  const PlanSettings& settings = variant.settings;
  const int64_t t = in.widths[variant.width_index].t;
  double least_s = kNone<double>;
  for (const FoundPlan& plan : found) {
    if (plan.d < 1 || plan.d > in.microbatches || (plan.d * t * settings.cp) % settings.ep != 0) continue;
    std::vector<NodeSet> sets;
    for (const std::size_t p : plan.pairs) sets.push_back(lat.stage[p]);
    const auto too_thin = [&](std::size_t p) {
      return lat.set_size[lat.outer[p]] - lat.set_size[lat.inner[p]] < settings.interleave;
    };
    if (sets.size() > 1 && std::any_of(plan.pairs.begin(), plan.pairs.end(), too_thin)) continue;
    const PlanFigures figures = plan_figures(in, lat.graph, variant, sets, plan.d);
    int64_t k = 0;
    for (const PlanStage& stage : figures.stages) k += stage.devices;
    if (figures.fits_hbm && k * plan.d <= in.devices) least_s = std::min(least_s, figures.time_per_batch_s);
  }
  return least_s;
}

}  // namespace

std::vector<PlanResult> solve_placements(const PlacementInput& in, const std::vector<Variant>& variants,
                                         std::function<bool()> cancelled) {
  check_input(in, variants);
  CancelPoll poll(std::move(cancelled));
  const Lattice lat = make_lattice(in);
  // The stage costs depend on neither HBM nor the settings but for the blocks block recompute reruns.
  std::map<std::pair<int32_t, int64_t>, StageTable> stage_tables;
  LeastMemory least_memory;
  // Per width: the last `kKeptPlans` distinct plans found, latest last, each timed under a later variant
  // for its incumbent (`incumbent_s`) and, with the plans that least-memory reports split, the start of
  // its report (`fill_infeasible`): the variants of a search come knob by knob, so the latest plans are
  // those of the most alike variants, and the cost of a variant's start stays bounded.
  constexpr std::size_t kKeptPlans = 32;
  std::map<int32_t, std::vector<FoundPlan>> found;
  std::vector<PlanResult> out;
  out.reserve(variants.size());
  for (const auto& v : variants) {
    const std::pair<int32_t, int64_t> key{v.width_index, PlanModel::recomputed_blocks_of(v.settings)};
    auto it = stage_tables.find(key);
    if (it == stage_tables.end()) {
      it = stage_tables.emplace(key, make_stage_table(lat, in.widths[v.width_index], key.second)).first;
    }
    poll();
    const LayerFigures& f = in.widths[v.width_index];
    const PlanModel plan{in, v.settings, has_experts(f), f.t, weight_grad_share(f)};
    std::vector<FoundPlan>& plans = found[v.width_index];
    PairPlans known;
    for (const FoundPlan& kept : plans) known.push_back(kept.pairs);
    FoundPlan plan_found;
    out.push_back(solve_variant(VariantModel{plan, lat, it->second, v, poll}, least_memory, known, plan_found.pairs,
                                incumbent_s(in, lat, v, plans)));
    if (!plan_found.pairs.empty()) {
      plan_found.d = out.back().feasible ? out.back().d : 0;
      const auto same = std::find(plans.begin(), plans.end(), plan_found);
      if (same != plans.end()) plans.erase(same);
      plans.push_back(std::move(plan_found));
      if (plans.size() > kKeptPlans) plans.erase(plans.begin());
    }
  }
  return out;
}

PlanFigures evaluate_plan(const PlacementInput& in, const Variant& variant,
                          const std::vector<std::vector<int32_t>>& stages, int64_t d) {
  check_input(in, {variant});
  if (d < 1) throw std::invalid_argument("plan: d must be >= 1");
  return plan_figures(in, make_layer_graph(in), variant, plan_sets(in, stages), d);
}


}  // namespace phazec
