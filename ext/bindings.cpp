// The one nanobind bindings file: plain lists in, plain lists out, no IR objects.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include "phazec/dag.hpp"

namespace nb = nanobind;

namespace {

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

}  // namespace

NB_MODULE(_placement, m) {
  m.doc() = "phazec's C++ layer-graph utilities and placement DP (private; use phazec.solvers).";
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
}
