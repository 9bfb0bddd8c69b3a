#include "phazec/dag.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace phazec {

Dag make_dag(int32_t n, const std::vector<Edge>& edges) {
  if (n < 0) throw std::invalid_argument("node count must be >= 0, got " + std::to_string(n));
  Dag g;
  g.n = n;
  g.succ.assign(n, {});
  g.pred.assign(n, {});
  for (const auto& [u, v] : edges) {
    if (u < 0 || u >= n || v < 0 || v >= n) {
      throw std::invalid_argument("edge (" + std::to_string(u) + ", " + std::to_string(v) +
                                  ") has an endpoint outside 0.." + std::to_string(n - 1));
    }
    if (u == v) throw std::invalid_argument("self-loop on node " + std::to_string(u));
    g.succ[u].push_back(v);
    g.pred[v].push_back(u);
  }
  for (int32_t v = 0; v < n; ++v) {
    for (auto* adj : {&g.succ[v], &g.pred[v]}) {
      std::sort(adj->begin(), adj->end());
      adj->erase(std::unique(adj->begin(), adj->end()), adj->end());
    }
  }
  return g;
}

std::vector<int32_t> find_cycle(const Dag& g) {
  enum Colour : uint8_t { kWhite, kGrey, kBlack };
  std::vector<Colour> colour(g.n, kWhite);
  std::vector<int32_t> parent(g.n, -1);
  // Iterative DFS: (node, index of the next successor to visit).
  std::vector<std::pair<int32_t, std::size_t>> stack;
  for (int32_t root = 0; root < g.n; ++root) {
    if (colour[root] != kWhite) continue;
    stack.emplace_back(root, 0);
    colour[root] = kGrey;
    while (!stack.empty()) {
      auto& [v, i] = stack.back();
      if (i == g.succ[v].size()) {
        colour[v] = kBlack;
        stack.pop_back();
        continue;
      }
      const int32_t w = g.succ[v][i++];
      if (colour[w] == kGrey) {
        std::vector<int32_t> cycle{w};
        for (int32_t x = v; x != w; x = parent[x]) cycle.push_back(x);
        std::reverse(cycle.begin() + 1, cycle.end());
        return cycle;
      }
      if (colour[w] == kWhite) {
        colour[w] = kGrey;
        parent[w] = v;
        stack.emplace_back(w, 0);
      }
    }
  }
  return {};
}

std::vector<int32_t> topological_order(const Dag& g) {
  std::vector<std::size_t> indegree(g.n);
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready;
  for (int32_t v = 0; v < g.n; ++v) {
    indegree[v] = g.pred[v].size();
    if (indegree[v] == 0) ready.push(v);
  }
  std::vector<int32_t> order;
  order.reserve(g.n);
  while (!ready.empty()) {
    const int32_t v = ready.top();
    ready.pop();
    order.push_back(v);
    for (int32_t w : g.succ[v]) {
      if (--indegree[w] == 0) ready.push(w);
    }
  }
  if (static_cast<int32_t>(order.size()) != g.n) {
    throw std::invalid_argument("the graph has a cycle");
  }
  return order;
}

namespace {

struct NodeSetHash {
  std::size_t operator()(const NodeSet& s) const noexcept {
    std::size_t h = 1469598103934665603ULL;
    for (uint64_t w : s) h = (h ^ w) * 1099511628211ULL;
    return h;
  }
};

bool contains(const NodeSet& s, int32_t v) { return (s[v / 64] >> (v % 64)) & 1U; }

}  // namespace

std::vector<int32_t> members(const NodeSet& s) {
  std::vector<int32_t> out;
  for (std::size_t w = 0; w < s.size(); ++w) {
    for (uint64_t bits = s[w]; bits != 0; bits &= bits - 1) {
      out.push_back(static_cast<int32_t>(w * 64 + __builtin_ctzll(bits)));
    }
  }
  return out;
}

std::vector<NodeSet> downsets(const Dag& g, std::size_t limit) {
  topological_order(g);  // rejects cycles
  const std::size_t words = (static_cast<std::size_t>(g.n) + 63) / 64;
  std::vector<NodeSet> found{NodeSet(words, 0)};
  std::unordered_set<NodeSet, NodeSetHash> seen(found.begin(), found.end());
  // Breadth-first by size: a node may join a downset once all its successors are in it.
  for (std::size_t next = 0; next < found.size(); ++next) {
    for (int32_t v = 0; v < g.n; ++v) {
      if (contains(found[next], v)) continue;
      const bool ready = std::all_of(g.succ[v].begin(), g.succ[v].end(),
                                     [&](int32_t w) { return contains(found[next], w); });
      if (!ready) continue;
      NodeSet grown = found[next];
      grown[v / 64] |= uint64_t{1} << (v % 64);
      if (seen.insert(grown).second) {
        if (found.size() == limit) {
          throw std::length_error("the graph has more than " + std::to_string(limit) + " downsets");
        }
        found.push_back(std::move(grown));
      }
    }
  }
  std::vector<std::pair<std::vector<int32_t>, std::size_t>> keyed;
  keyed.reserve(found.size());
  for (std::size_t i = 0; i < found.size(); ++i) keyed.emplace_back(members(found[i]), i);
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    return a.first.size() != b.first.size() ? a.first.size() < b.first.size() : a.first < b.first;
  });
  std::vector<NodeSet> out;
  out.reserve(found.size());
  for (const auto& [_, i] : keyed) out.push_back(std::move(found[i]));
  return out;
}

}  // namespace phazec
