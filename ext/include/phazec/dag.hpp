// Layer-graph utilities shared by the IR and the placement DP. Pure C++17, no Python.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace phazec {

using Edge = std::pair<int32_t, int32_t>;

/// A directed graph on nodes 0..n-1 stored as successor and predecessor lists.
struct Dag {
  int32_t n = 0;
  std::vector<std::vector<int32_t>> succ;
  std::vector<std::vector<int32_t>> pred;
};

/// Builds the graph; throws std::invalid_argument on a negative node count, an endpoint
/// outside 0..n-1, or a self-loop. Duplicate edges are kept once.
Dag make_dag(int32_t n, const std::vector<Edge>& edges);

/// The nodes of one directed cycle in order (first node not repeated), or empty if acyclic.
std::vector<int32_t> find_cycle(const Dag& g);

/// Kahn's order taking the smallest ready node first; throws std::invalid_argument on a cycle.
std::vector<int32_t> topological_order(const Dag& g);

/// A set of nodes as a bitset of 64-bit words.
using NodeSet = std::vector<uint64_t>;

/// Every successor-closed subset of the nodes (if v is in the set, so is every successor of v),
/// the empty set and the full set included, ordered by size and then by the sorted member list.
/// Throws std::length_error when there are more than `limit` of them.
std::vector<NodeSet> downsets(const Dag& g, std::size_t limit);

/// The sorted members of a node set.
std::vector<int32_t> members(const NodeSet& s);

}  // namespace phazec
