// The one nanobind bindings file: plain lists and numpy arrays in, plain values out, no IR objects.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "phazec/dag.hpp"
#include "phazec/list_schedule.hpp"
#include "phazec/placement.hpp"
#include "phazec/schedule_search.hpp"

namespace nb = nanobind;

namespace {

template <typename T>
using Vector = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Matrix = nb::ndarray<const T, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

std::vector<std::vector<int32_t>> downset_members(int32_t n, const std::vector<phazec::Edge>& edges,
                                                  std::size_t limit) {
  const phazec::Dag g = phazec::make_dag(n, edges);
  std::vector<phazec::NodeSet> sets;
  {
    nb::gil_scoped_release release;
    sets = phazec::downsets(g, limit);
  }
  std::vector<std::vector<int32_t>> out;
  out.reserve(sets.size());
  for (const auto& s : sets) out.push_back(phazec::members(s));
  return out;
}

template <typename T>
std::vector<T> to_vector(const Vector<T>& a) {
  return std::vector<T>(a.data(), a.data() + a.shape(0));
}

/// Row `row` of a [widths, layers] matrix, checking its shape.
template <typename T, typename Out = T>
std::vector<Out> matrix_row(const Matrix<T>& a, std::size_t row, std::size_t rows, std::size_t cols,
                            const char* name) {
  if (a.shape(0) != rows || a.shape(1) != cols) {
    throw std::invalid_argument(std::string(name) + " must have shape [widths, layers]");
  }
  const T* start = a.data() + row * cols;
  return std::vector<Out>(start, start + cols);
}

/// A plan's settings as a Python dict {name: int | bool}, one entry per PHAZEC_PLAN_SETTINGS line.
using Settings = nb::typed<nb::dict, nb::str, std::variant<int64_t, bool>>;
/// (width index, HBM bytes per device, settings).
using VariantArg = std::tuple<int32_t, int64_t, Settings>;

constexpr const char* kSettingNames[] = {
#define PHAZEC_SETTING_NAME(type, name, value) #name,
    PHAZEC_PLAN_SETTINGS(PHAZEC_SETTING_NAME)
#undef PHAZEC_SETTING_NAME
};

/// Reads setting `name` of `settings` into `field`: a Python bool for a bool, an int (not a bool)
/// otherwise; ValueError naming it when it is missing or of another type.
template <typename T>
void read_setting(const nb::dict& settings, const char* name, T& field) {
  if (!settings.contains(name)) throw std::invalid_argument(std::string("plan setting '") + name + "' is missing");
  const nb::object value = settings[name];
  const bool wrong_bool = !std::is_same_v<T, bool> && nb::isinstance<nb::bool_>(value);
  if (wrong_bool || !nb::try_cast(value, field, false)) {
    throw std::invalid_argument(std::string("plan setting '") + name + "' must be " +
                                (std::is_same_v<T, bool> ? "a bool" : "an int"));
  }
}

/// The variant a (width index, HBM bytes, settings) tuple names; ValueError on a missing, unknown
/// or mistyped setting. Needs the GIL.
phazec::Variant variant_of(const VariantArg& arg) {
  const auto& [width_index, hbm_bytes, settings] = arg;
  for (nb::handle key : settings.keys()) {
    const std::string name = nb::cast<std::string>(nb::str(key));
    if (std::find(std::begin(kSettingNames), std::end(kSettingNames), name) == std::end(kSettingNames)) {
      throw std::invalid_argument("unknown plan setting '" + name + "'");
    }
  }
  phazec::Variant out{width_index, hbm_bytes, {}};
#define PHAZEC_READ_SETTING(type, name, value) read_setting(settings, #name, out.settings.name);
  PHAZEC_PLAN_SETTINGS(PHAZEC_READ_SETTING)
#undef PHAZEC_READ_SETTING
  return out;
}

/// `body` as a bound function whose first arguments describe the problem (`def_taking_problem` names
/// them): it gets them as one PlacementInput, then its own `extra` arguments.
template <typename Result, typename... Extra>
auto taking_problem(Result (*body)(const phazec::PlacementInput&, Extra...)) {
  return [body](int32_t n, const std::vector<phazec::Edge>& edges, const Vector<int64_t>& edge_bytes,
                const Vector<int64_t>& t_values, const Matrix<double>& forward_s, const Matrix<double>& backward_s,
                const Matrix<double>& weight_grad_s, const Matrix<double>& selective_s, const Matrix<int64_t>& param_bytes,
                const Matrix<int64_t>& expert_param_bytes, const Matrix<int64_t>& gather_bytes,
                const Matrix<int64_t>& expert_gather_bytes, const Matrix<int64_t>& dummy_wgrad_bytes,
                const Matrix<int64_t>& activation_bytes,
                const Matrix<int64_t>& stash_bytes, const Matrix<int64_t>& selective_bytes,
                const Matrix<int64_t>& input_bytes, const Matrix<double>& op_s, const Matrix<int64_t>& op_bytes,
                const Matrix<bool>& tensor_parallel, const Matrix<bool>& block, int64_t devices, int64_t microbatches,
                const Vector<int64_t>& tier_group_sizes, const Vector<double>& tier_bandwidth_bytes_per_s,
                const Vector<double>& tier_latency_s, int64_t optimizer_factor, double hbm_bytes_per_s,
                double collective_share, bool bound_sync_windows, Extra... extra) {
    if (n < 0) throw std::invalid_argument("layer count must be >= 0");
    phazec::PlacementInput in;
    in.n = n;
    in.edges = edges;
    in.edge_bytes = to_vector(edge_bytes);
    in.devices = devices;
    in.microbatches = microbatches;
    in.optimizer_factor = optimizer_factor;
    in.hbm_bytes_per_s = hbm_bytes_per_s;
    in.collective_share = collective_share;
    in.bound_sync_windows = bound_sync_windows;
    const std::size_t tiers = tier_group_sizes.shape(0);
    if (tier_bandwidth_bytes_per_s.shape(0) != tiers || tier_latency_s.shape(0) != tiers) {
      throw std::invalid_argument("network tier arrays differ in length");
    }
    for (std::size_t i = 0; i < tiers; ++i) {
      in.tiers.push_back(
          {tier_group_sizes.data()[i], tier_bandwidth_bytes_per_s.data()[i], tier_latency_s.data()[i]});
    }
    const std::size_t widths = t_values.shape(0);
    const auto cols = static_cast<std::size_t>(n);
    for (std::size_t w = 0; w < widths; ++w) {
      phazec::LayerFigures f;
      f.t = t_values.data()[w];
      f.forward_s = matrix_row(forward_s, w, widths, cols, "forward_s");
      f.backward_s = matrix_row(backward_s, w, widths, cols, "backward_s");
      f.weight_grad_s = matrix_row(weight_grad_s, w, widths, cols, "weight_grad_s");
      f.selective_s = matrix_row(selective_s, w, widths, cols, "selective_s");
      f.param_bytes = matrix_row(param_bytes, w, widths, cols, "param_bytes");
      f.expert_param_bytes = matrix_row(expert_param_bytes, w, widths, cols, "expert_param_bytes");
      f.gather_bytes = matrix_row(gather_bytes, w, widths, cols, "gather_bytes");
      f.expert_gather_bytes = matrix_row(expert_gather_bytes, w, widths, cols, "expert_gather_bytes");
      f.dummy_wgrad_bytes = matrix_row(dummy_wgrad_bytes, w, widths, cols, "dummy_wgrad_bytes");
      f.activation_bytes = matrix_row(activation_bytes, w, widths, cols, "activation_bytes");
      f.stash_bytes = matrix_row(stash_bytes, w, widths, cols, "stash_bytes");
      f.selective_bytes = matrix_row(selective_bytes, w, widths, cols, "selective_bytes");
      f.input_bytes = matrix_row(input_bytes, w, widths, cols, "input_bytes");
      f.op_s = matrix_row(op_s, w, widths, cols, "op_s");
      f.op_bytes = matrix_row(op_bytes, w, widths, cols, "op_bytes");
      f.tensor_parallel = matrix_row<bool, uint8_t>(tensor_parallel, w, widths, cols, "tensor_parallel");
      f.block = matrix_row<bool, uint8_t>(block, w, widths, cols, "block");
      in.widths.push_back(std::move(f));
    }
    return body(in, std::forward<Extra>(extra)...);
  };
}

/// Defines `name` on `m`: `fn` taking the problem's arguments, then `extra` ones.
template <typename Fn, typename... Extra>
void def_taking_problem(nb::module_& m, const char* name, Fn fn, const char* doc, Extra... extra) {
  m.def(name, taking_problem(fn), nb::arg("n"), nb::arg("edges"), nb::arg("edge_bytes"), nb::arg("t_values"),
        nb::arg("forward_s"), nb::arg("backward_s"), nb::arg("weight_grad_s"), nb::arg("selective_s"), nb::arg("param_bytes"),
        nb::arg("expert_param_bytes"), nb::arg("gather_bytes"), nb::arg("expert_gather_bytes"),
        nb::arg("dummy_wgrad_bytes"), nb::arg("activation_bytes"), nb::arg("stash_bytes"),
        nb::arg("selective_bytes"), nb::arg("input_bytes"), nb::arg("op_s"), nb::arg("op_bytes"),
        nb::arg("tensor_parallel"), nb::arg("block"), nb::arg("devices"),
        nb::arg("microbatches"), nb::arg("tier_group_sizes"), nb::arg("tier_bandwidth_bytes_per_s"),
        nb::arg("tier_latency_s"), nb::arg("optimizer_factor"), nb::arg("hbm_bytes_per_s"),
        nb::arg("collective_share"), nb::arg("bound_sync_windows"), extra..., doc);
}

/// Solves with the GIL released, taking it back every few milliseconds to run Python's signal
/// handlers (`PyErr_CheckSignals`): a handler's exception (phazec's `Interrupted` on SIGINT or
/// SIGTERM, a KeyboardInterrupt) stops the solve and is raised from this call.
std::vector<phazec::PlanResult> solve_placements(const phazec::PlacementInput& in,
                                                 const std::vector<VariantArg>& variants) {
  std::vector<phazec::Variant> vs;
  for (const auto& v : variants) vs.push_back(variant_of(v));
  std::optional<nb::python_error> raised;
  auto signalled = [&raised]() {
    nb::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() == 0) return false;
    raised.emplace();  // takes the handler's exception
    return true;
  };
  try {
    nb::gil_scoped_release release;
    return phazec::solve_placements(in, vs, signalled);
  } catch (const phazec::Cancelled&) {
    throw *raised;
  }
}

phazec::PlanFigures evaluate_plan(const phazec::PlacementInput& in, const VariantArg& variant,
                                  const std::vector<std::vector<int32_t>>& stages, int64_t d) {
  const phazec::Variant v = variant_of(variant);
  nb::gil_scoped_release release;
  return phazec::evaluate_plan(in, v, stages, d);
}

std::vector<std::vector<phazec::OpMode>> op_modes(
    const std::vector<std::vector<std::pair<double, std::array<int32_t, phazec::kResources>>>>& modes) {
  std::vector<std::vector<phazec::OpMode>> out;
  for (const auto& op : modes) {
    std::vector<phazec::OpMode> own;
    for (const auto& [duration_s, use] : op) own.push_back({duration_s, use});
    out.push_back(std::move(own));
  }
  return out;
}

phazec::ScheduleSearchResult search_schedule(
    const std::vector<std::vector<std::pair<double, std::array<int32_t, phazec::kResources>>>>& modes,
    const std::vector<std::vector<int32_t>>& preds, const std::array<int32_t, phazec::kResources>& capacity,
    const std::vector<double>& tail_s, double upper_s, double lower_s, double rel_gap, int64_t node_limit) {
  phazec::ScheduleSearchInput in;
  in.modes = op_modes(modes);
  in.preds = preds;
  in.capacity = capacity;
  in.tail_s = tail_s;
  in.upper_s = upper_s;
  in.lower_s = lower_s;
  in.rel_gap = rel_gap;
  in.node_limit = node_limit;
  nb::gil_scoped_release release;
  return phazec::search_schedule(in);
}

std::tuple<std::vector<double>, std::vector<int32_t>> list_schedule(
    const std::vector<std::vector<std::pair<double, std::array<int32_t, phazec::kResources>>>>& modes,
    const std::vector<std::vector<int32_t>>& preds, const std::array<int32_t, phazec::kResources>& capacity,
    const std::vector<double>& priority, bool first_start) {
  const auto own = op_modes(modes);
  nb::gil_scoped_release release;
  auto result = phazec::list_schedule(own, preds, capacity, priority, first_start);
  return {std::move(result.start_s), std::move(result.mode)};
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() =
      "phazec's C++ layer-graph utilities, placement DP and exact schedule search (private; imported by "
      "phazec.solvers.core alone).";
  m.def(
      "find_cycle",
      [](int32_t n, const std::vector<phazec::Edge>& edges) {
        return phazec::find_cycle(phazec::make_dag(n, edges));
      },
      nb::arg("n"), nb::arg("edges"), "The nodes of one directed cycle, or [] if the graph is acyclic.");
  m.def(
      "topological_order",
      [](int32_t n, const std::vector<phazec::Edge>& edges) {
        return phazec::topological_order(phazec::make_dag(n, edges));
      },
      nb::arg("n"), nb::arg("edges"), "Kahn's order, smallest ready node first; ValueError on a cycle.");
  m.def("downsets", &downset_members, nb::arg("n"), nb::arg("edges"), nb::arg("limit"),
        "Every successor-closed node set, by size then members; ValueError past `limit`.");

  using phazec::PlanResult;
  nb::class_<PlanResult>(m, "PlanResult", "The optimum of one variant, or the least memory any plan needs.")
      .def_ro("feasible", &PlanResult::feasible)
      .def_ro("t", &PlanResult::t)
      .def_ro("d", &PlanResult::d)
      .def_ro("microbatches_per_pipeline", &PlanResult::microbatches_per_pipeline)
      .def_ro("time_per_batch_s", &PlanResult::time_per_batch_s)
      .def_ro("stage_layers", &PlanResult::stage_layers)
      .def_ro("stage_devices", &PlanResult::stage_devices)
      .def_ro("stage_load_s", &PlanResult::stage_load_s)
      .def_ro("stage_memory_bytes", &PlanResult::stage_memory_bytes)
      .def_ro("min_memory_bytes", &PlanResult::min_memory_bytes)
      .def_ro("parameter_bytes", &PlanResult::parameter_bytes)
      .def_ro("activation_bytes", &PlanResult::activation_bytes)
      .def_ro("stash_bytes", &PlanResult::stash_bytes);
  def_taking_problem(m, "solve_placements", &solve_placements,
                     "Solves each (width index, HBM bytes, settings) variant with the GIL released; settings "
                     "holds every plan setting by name (recompute: 0/1/2/3/4 for none/selective/full/op/block; pipeline_schedule: 0/1 for 1f1b/zb_h1). ValueError "
                     "on bad input; a signal handler's exception (run every 20 ms) stops the solve and is raised.",
                     nb::arg("variants"));

  using phazec::StageCost;
  nb::class_<StageCost>(m, "StageCost", "A stage's figures that depend on neither d, its position nor the settings.")
      .def_ro("forward_s", &StageCost::forward_s)
      .def_ro("backward_s", &StageCost::backward_s)
      .def_ro("weight_grad_s", &StageCost::weight_grad_s)
      .def_ro("selective_s", &StageCost::selective_s)
      .def_ro("param_bytes", &StageCost::param_bytes)
      .def_ro("expert_param_bytes", &StageCost::expert_param_bytes)
      .def_ro("largest_layer_bytes", &StageCost::largest_layer_bytes)
      .def_ro("gather_bytes", &StageCost::gather_bytes)
      .def_ro("expert_gather_bytes", &StageCost::expert_gather_bytes)
      .def_ro("largest_gather_bytes", &StageCost::largest_gather_bytes)
      .def_ro("largest_dummy_wgrad_bytes", &StageCost::largest_dummy_wgrad_bytes)
      .def_ro("stash_bytes", &StageCost::stash_bytes)
      .def_ro("selective_bytes", &StageCost::selective_bytes)
      .def_ro("input_bytes", &StageCost::input_bytes)
      .def_ro("selective_working_bytes", &StageCost::selective_working_bytes)
      .def_ro("full_working_bytes", &StageCost::full_working_bytes)
      .def_ro("op_s", &StageCost::op_s)
      .def_ro("op_bytes", &StageCost::op_bytes)
      .def_ro("op_working_bytes", &StageCost::op_working_bytes)
      .def_ro("block_layers", &StageCost::block_layers)
      .def_ro("block_s", &StageCost::block_s)
      .def_ro("block_bytes", &StageCost::block_bytes)
      .def_ro("block_working_bytes", &StageCost::block_working_bytes)
      .def_ro("cut_bytes", &StageCost::cut_bytes)
      .def_ro("devices", &StageCost::devices);
  using phazec::StageTime;
  nb::class_<StageTime>(m, "StageTime", "Time per microbatch of one stage, in parts.")
      .def_ro("forward_s", &StageTime::forward_s)
      .def_ro("backward_s", &StageTime::backward_s)
      .def_ro("recompute_s", &StageTime::recompute_s)
      .def_ro("p2p_s", &StageTime::p2p_s)
      .def_ro("shard_s", &StageTime::shard_s);
  using phazec::StageMemory;
  nb::class_<StageMemory>(m, "StageMemory", "Bytes on one device of one stage, in parts.")
      .def_ro("weights_bytes", &StageMemory::weights_bytes)
      .def_ro("gradients_bytes", &StageMemory::gradients_bytes)
      .def_ro("optimizer_state_bytes", &StageMemory::optimizer_state_bytes)
      .def_ro("stash_bytes", &StageMemory::stash_bytes)
      .def_ro("working_bytes", &StageMemory::working_bytes)
      .def_ro("in_flight", &StageMemory::in_flight);
  using phazec::SyncTime;
  nb::class_<SyncTime>(m, "SyncTime", "What a stage adds after the pipeline's flush.")
      .def_ro("exposed_s", &SyncTime::exposed_s)
      .def_ro("step_s", &SyncTime::step_s);
  using phazec::PlanStage;
  nb::class_<PlanStage>(m, "PlanStage", "One stage of an evaluated plan.")
      .def_ro("layers", &PlanStage::layers)
      .def_ro("devices", &PlanStage::devices)
      .def_ro("load_s", &PlanStage::load_s)
      .def_ro("memory_bytes", &PlanStage::memory_bytes)
      .def_ro("recompute", &PlanStage::recompute)
      .def_ro("cost", &PlanStage::cost)
      .def_ro("time", &PlanStage::time)
      .def_ro("memory", &PlanStage::memory)
      .def_ro("sync", &PlanStage::sync);
  using phazec::IterationTime;
  nb::class_<IterationTime>(m, "IterationTime", "One iteration in parts.")
      .def_ro("bottleneck_stage", &IterationTime::bottleneck_stage)
      .def_ro("forward_s", &IterationTime::forward_s)
      .def_ro("backward_s", &IterationTime::backward_s)
      .def_ro("recompute_s", &IterationTime::recompute_s)
      .def_ro("p2p_s", &IterationTime::p2p_s)
      .def_ro("shard_s", &IterationTime::shard_s)
      .def_ro("bubble_s", &IterationTime::bubble_s)
      .def_ro("dp_sync_stage", &IterationTime::dp_sync_stage)
      .def_ro("dp_sync_s", &IterationTime::dp_sync_s)
      .def_ro("optimizer_s", &IterationTime::optimizer_s);
  using phazec::PlanFigures;
  nb::class_<PlanFigures>(m, "PlanFigures", "Every figure of one plan.")
      .def_ro("t", &PlanFigures::t)
      .def_ro("d", &PlanFigures::d)
      .def_ro("microbatches_per_pipeline", &PlanFigures::microbatches_per_pipeline)
      .def_ro("time_per_batch_s", &PlanFigures::time_per_batch_s)
      .def_ro("fits_hbm", &PlanFigures::fits_hbm)
      .def_ro("stages", &PlanFigures::stages)
      .def_ro("iteration", &PlanFigures::iteration);
  def_taking_problem(m, "evaluate_plan", &evaluate_plan,
                     "The figures of one plan (layer ids per stage, first stage first) of a (width index, HBM "
                     "bytes, settings) variant at data-parallel width d, with the GIL released; ValueError on "
                     "bad input.",
                     nb::arg("variant"), nb::arg("stages"), nb::arg("d"));

  using phazec::ScheduleSearchResult;
  nb::class_<ScheduleSearchResult>(m, "ScheduleSearchResult", "The outcome of the exact schedule search.")
      .def_ro("complete", &ScheduleSearchResult::complete)
      .def_ro("improved", &ScheduleSearchResult::improved)
      .def_ro("makespan_s", &ScheduleSearchResult::makespan_s)
      .def_ro("bound_s", &ScheduleSearchResult::bound_s)
      .def_ro("start_s", &ScheduleSearchResult::start_s)
      .def_ro("mode", &ScheduleSearchResult::mode)
      .def_ro("nodes", &ScheduleSearchResult::nodes);
  m.def("search_schedule", &search_schedule, nb::arg("modes"), nb::arg("preds"), nb::arg("capacity"),
        nb::arg("tail_s"), nb::arg("upper_s"), nb::arg("lower_s"), nb::arg("rel_gap"), nb::arg("node_limit"),
        "Exact branch and bound for one operator schedule, GIL released; ValueError on bad input.");
  m.def("list_schedule", &list_schedule, nb::arg("modes"), nb::arg("preds"), nb::arg("capacity"),
        nb::arg("priority"), nb::arg("first_start"),
        "One serial schedule-generation run: (start times, mode indices), GIL released; ValueError on "
        "bad input.");
}
