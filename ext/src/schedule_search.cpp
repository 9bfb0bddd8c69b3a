#include "phazec/schedule_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <deque>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace phazec {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// States kept per set of placed ops for the dominance test. 16 left the first layer's mask-and-rotary
// graph on 2 vector cores unproven after 60 million nodes: its nanosecond casts give each set of
// placed ops hundreds of fronts that differ by a few nanoseconds (issue 45).
constexpr std::size_t kRecentFronts = 256;

struct Placed {
  double start_s;
  double end_s;
  std::array<int32_t, kResources> use;
  int32_t op;
};

/// A piece of the busy profile after the last start: [from, to) with `use` units busy.
struct Segment {
  double from_s;
  double to_s;
  std::array<int32_t, kResources> use;
};

struct KeyHash {
  std::size_t operator()(const std::vector<int64_t>& key) const {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t v : key) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ULL;
    }
    return static_cast<std::size_t>(h);
  }
};

class Search {
 public:
  explicit Search(const ScheduleSearchInput& in) : in_(in), n_(static_cast<int32_t>(in.modes.size())) {
    succs_.resize(n_);
    for (int32_t i = 0; i < n_; ++i) {
      for (int32_t p : in_.preds[i]) succs_[p].push_back(i);
    }
    topo_ = topological_order();
    fastest_.assign(n_, kInf);
    std::array<double, kResources> none{};
    none.fill(kInf);
    work_.assign(n_, none);
    for (int32_t i = 0; i < n_; ++i) {
      for (const OpMode& m : in_.modes[i]) {
        fastest_[i] = std::min(fastest_[i], m.duration_s);
        for (int k = 0; k < kResources; ++k) work_[i][k] = std::min(work_[i][k], m.use[k] * m.duration_s);
      }
    }
    start_.assign(n_, -1.0);
    end_.assign(n_, 0.0);
    mode_.assign(n_, -1);
    est_.assign(n_, 0.0);
    placed_mask_.assign((n_ + 62) / 63, 0);
    options_.resize(n_ + 1);
    best_ = in_.upper_s;
  }

  ScheduleSearchResult run() {
    ScheduleSearchResult out;
    dfs(0.0, 0);
    out.complete = !aborted_;
    out.improved = !best_start_.empty();
    out.makespan_s = best_;
    out.start_s = best_start_;
    out.mode = best_mode_;
    out.nodes = nodes_;
    out.bound_s = in_.lower_s;
    if (out.complete) out.bound_s = std::max(in_.lower_s, std::min(best_, min_pruned_s_));
    return out;
  }

 private:
  std::vector<int32_t> topological_order() const {
    std::vector<int32_t> indegree(n_, 0), order;
    for (int32_t i = 0; i < n_; ++i) indegree[i] = static_cast<int32_t>(in_.preds[i].size());
    for (int32_t i = 0; i < n_; ++i) {
      if (indegree[i] == 0) order.push_back(i);
    }
    for (std::size_t k = 0; k < order.size(); ++k) {
      for (int32_t j : succs_[order[k]]) {
        if (--indegree[j] == 0) order.push_back(j);
      }
    }
    if (static_cast<int32_t>(order.size()) != n_) throw std::invalid_argument("dependencies have a cycle");
    return order;
  }

  double cutoff() const { return best_ * (1.0 - in_.rel_gap); }

  /// Records a bound that pruned part of the search: the proven bound is the least of them.
  bool pruned(double bound_s) {
    if (bound_s < cutoff()) return false;
    min_pruned_s_ = std::min(min_pruned_s_, bound_s);
    return true;
  }

  /// The busy profile from `t_s` on, from the placed ops still running after it, into `segs_`.
  void profile(double t_s) {
    live_.clear();
    times_.assign(1, t_s);
    for (const Placed& p : placed_) {
      if (p.end_s <= t_s) continue;
      live_.push_back(&p);
      if (p.start_s > t_s) times_.push_back(p.start_s);
      times_.push_back(p.end_s);
    }
    std::sort(times_.begin(), times_.end());
    times_.erase(std::unique(times_.begin(), times_.end()), times_.end());
    segs_.clear();
    for (std::size_t k = 0; k < times_.size(); ++k) {
      Segment s{times_[k], k + 1 < times_.size() ? times_[k + 1] : kInf, {}};
      for (const Placed* p : live_) {
        if (p->start_s <= s.from_s && p->end_s > s.from_s) {
          for (int r = 0; r < kResources; ++r) s.use[r] += p->use[r];
        }
      }
      segs_.push_back(s);
    }
  }

  /// The earliest start >= `ready_s` at which `m` fits in the profile for its whole duration.
  double earliest(const std::vector<Segment>& segs, const OpMode& m, double ready_s) const {
    bool holds = false;
    for (int r = 0; r < kResources; ++r) holds = holds || (m.use[r] > 0);
    if (!holds) return ready_s;
    if (m.duration_s == 0.0) return instant(m, ready_s);
    // The candidates: `ready_s`, then each segment's start after it, in order; past the last one
    // nothing is busy.
    if (fits(segs, m, ready_s)) return ready_s;
    double last_s = ready_s;
    for (const Segment& s : segs) {
      if (s.from_s <= ready_s) continue;
      last_s = s.from_s;
      if (fits(segs, m, last_s)) return last_s;
    }
    return last_s;
  }

  /// Whether `m` started at `t_s` fits in the profile `segs` for its whole duration.
  bool fits(const std::vector<Segment>& segs, const OpMode& m, double t_s) const {
    for (const Segment& s : segs) {
      if (s.to_s <= t_s || s.from_s >= t_s + m.duration_s) continue;
      for (int r = 0; r < kResources; ++r) {
        if (s.use[r] + m.use[r] > in_.capacity[r]) return false;
      }
    }
    return true;
  }

  /// The earliest instant >= `ready_s` that no placed op holding units `m` needs spans (starts before
  /// and ends after): where an op of no duration that holds units can run (a barrier).
  double instant(const OpMode& m, double ready_s) const {
    std::vector<double> candidates{ready_s};
    for (const Placed& p : placed_) {
      if (p.end_s > ready_s) candidates.push_back(p.end_s);
    }
    std::sort(candidates.begin(), candidates.end());
    for (double t : candidates) {
      std::array<int32_t, kResources> use = m.use;
      for (const Placed& p : placed_) {
        if (p.start_s < t && t < p.end_s) {
          for (int r = 0; r < kResources; ++r) use[r] += p.use[r];
        }
      }
      bool fits = true;
      for (int r = 0; r < kResources; ++r) fits = fits && use[r] <= in_.capacity[r];
      if (fits) return t;
    }
    return candidates.back();
  }

  /// Where the free capacity of one resource after `from_s` absorbs core-time: asked for ever more
  /// core-time from the same `from_s`, it goes on from the segment where the last answer lay, with the
  /// core-time absorbed before it, summed in the same order as from the start.
  struct Absorber {
    const std::vector<Segment>& segs;
    int32_t capacity;
    int r;
    double from_s;
    std::size_t k = 0;  // segments before k end by from_s or absorb less than asked so far
    double done = 0.0;  // core-time the segments before k absorb after from_s

    /// Time after `from_s` at which the free capacity has absorbed `work` core-seconds: `work` no less
    /// than at the last call.
    double at(double work) {
      for (; k < segs.size(); ++k) {
        const Segment& s = segs[k];
        if (s.to_s <= from_s) continue;
        const double a = std::max(s.from_s, from_s);
        const double free = capacity - s.use[r];
        if (free <= 0) continue;
        if (s.to_s == kInf || done + free * (s.to_s - a) >= work) return a + (work - done) / free;
        done += free * (s.to_s - a);
      }
      return kInf;
    }
  };

  /// A lower bound on every completion of the current partial schedule (last start `t_s`).
  double lower_bound(double t_s, const std::vector<Segment>& segs, double stop_s) {
    double lb = 0.0;
    open_.clear();
    for (int32_t i : topo_) {
      if (start_[i] >= 0) {
        lb = std::max(lb, end_[i]);
        continue;
      }
      double e = t_s;
      for (int32_t p : in_.preds[i]) e = std::max(e, start_[p] >= 0 ? end_[p] : est_[p] + fastest_[p]);
      est_[i] = e;
      lb = std::max(lb, e + fastest_[i] + in_.tail_s[i]);
      open_.push_back(i);
    }
    if (lb >= stop_s) return lb;
    for (int r = 0; r < kResources; ++r) {
      ops_.clear();
      for (int32_t i : open_) {
        if (work_[i][r] > 0) ops_.push_back(i);
      }
      std::sort(ops_.begin(), ops_.end(), [&](int32_t a, int32_t b) { return in_.tail_s[a] > in_.tail_s[b]; });
      // The sorted ops' earliest starts, core-times and tails side by side, and their distinct starts.
      late_.clear();
      heads_.clear();
      for (int32_t i : ops_) {
        late_.push_back({est_[i], work_[i][r], in_.tail_s[i]});
        heads_.push_back(est_[i]);
      }
      std::sort(heads_.begin(), heads_.end());
      heads_.erase(std::unique(heads_.begin(), heads_.end()), heads_.end());
      if (r == kHbm && !heads_.empty()) heads_.resize(1);  // every op: cheap, as every on-chip op is on it
      // The heads ascend, so the ops starting at each head or later are those of the last head's
      // that start at it or later: `late_` keeps them, by descending tail, from head to head.
      for (double h : heads_) {
        late_.erase(std::remove_if(late_.begin(), late_.end(), [h](const Late& o) { return o.est_s < h; }),
                    late_.end());
        // Each prefix ending where the tail drops needs its core-time after h, and then its least tail.
        Absorber absorber{segs, in_.capacity[r], r, h};
        double work = 0.0;
        for (std::size_t k = 0; k < late_.size(); ++k) {
          work += late_[k].work;
          const double tail = late_[k].tail_s;
          if (k + 1 < late_.size() && late_[k + 1].tail_s == tail) continue;
          lb = std::max(lb, absorber.at(work) + tail);
          if (lb >= stop_s) return lb;
        }
      }
    }
    return lb;
  }

  /// What the future of a state depends on besides its placed ops, for the dominance test.
  struct Front {
    double t_s;                 // last start: later ops start no earlier
    std::vector<Segment> segs;  // busy profile from t_s on
    std::vector<std::pair<int32_t, double>> releases;  // (op, end) of placed ops with unplaced successors
  };

  Front front(double t_s, const std::vector<Segment>& segs) const {
    Front f{t_s, segs, {}};
    for (const Placed& p : placed_) {
      bool releases = false;
      for (int32_t j : succs_[p.op]) releases = releases || start_[j] < 0;
      if (releases && p.end_s > t_s) f.releases.emplace_back(p.op, p.end_s);
    }
    return f;
  }

  /// The segment of `segs` that holds `x_s`, or null where nothing is busy.
  static const Segment* segment_at(const std::vector<Segment>& segs, double x_s) {
    for (const Segment& s : segs) {
      if (s.from_s <= x_s && x_s < s.to_s) return &s;
    }
    return nullptr;
  }

  /// Whether `a` holds no more units of any resource than `b` at `x_s`.
  static bool no_busier(const std::vector<Segment>& a, const std::vector<Segment>& b, double x_s) {
    const Segment* sa = segment_at(a, x_s);
    if (sa == nullptr) return true;
    const Segment* sb = segment_at(b, x_s);
    for (int r = 0; r < kResources; ++r) {
      if (sa->use[r] > (sb == nullptr ? 0 : sb->use[r])) return false;
    }
    return true;
  }

  /// Whether every completion of a state with front `b` completes one with front `a` (same placed
  /// ops) at no greater makespan: `a` started last no later, releases every successor no later, and
  /// is nowhere busier from `b`'s last start on.
  static bool dominates(const Front& a, const Front& b) {
    if (a.t_s > b.t_s) return false;
    for (const auto& [op, end] : a.releases) {
      if (end <= b.t_s) continue;
      bool later = false;
      for (const auto& [other, other_end] : b.releases) later = later || (other == op && other_end >= end);
      if (!later) return false;
    }
    // Both profiles are constant between the starts of their segments.
    if (!no_busier(a.segs, b.segs, b.t_s)) return false;
    for (const auto* segs : {&a.segs, &b.segs}) {
      for (const Segment& s : *segs) {
        if (s.from_s > b.t_s && !no_busier(a.segs, b.segs, s.from_s)) return false;
      }
    }
    return true;
  }

  /// Whether a recent state with the same placed ops dominates this one; records this one.
  bool dominated(Front current) {
    std::deque<Front>& recent = fronts_[placed_mask_];
    for (const Front& f : recent) {
      if (dominates(f, current)) return true;
    }
    recent.push_back(std::move(current));
    if (recent.size() > kRecentFronts) recent.pop_front();
    return false;
  }

  void place(int32_t i, int32_t m, double t_s) {
    const OpMode& mode = in_.modes[i][m];
    start_[i] = t_s;
    end_[i] = t_s + mode.duration_s;
    mode_[i] = m;
    placed_.push_back({t_s, end_[i], mode.use, i});
    placed_mask_[i / 63] |= int64_t{1} << (i % 63);
  }

  void unplace(int32_t i) {
    placed_.pop_back();
    placed_mask_[i / 63] &= ~(int64_t{1} << (i % 63));
    start_[i] = -1.0;
    mode_[i] = -1;
  }

  /// An op placeable now: its mode, earliest start, end, and the bound of starting it there.
  struct Option {
    double start_s;
    double end_s;
    double bound_s;
    int32_t op;
    int32_t mode;
  };

  /// Whether another op could start before `t_s` and end by then. Starting an op at `t_s` is then
  /// dominated: every completion keeps its makespan with that op moved there (everything placed
  /// later starts at `t_s` or after), and the move makes the start times lexicographically smaller,
  /// so some optimal schedule avoids this choice.
  static bool fills_before(const std::vector<Option>& options, int32_t op, double t_s) {
    for (const Option& o : options) {
      if (o.op != op && o.start_s < t_s && o.end_s <= t_s) return true;
    }
    return false;
  }

  void dfs(double t_s, int32_t count) {
    if (aborted_ || done_) return;
    if (++nodes_ > in_.node_limit) {
      aborted_ = true;
      return;
    }
    if (count == n_) {
      double makespan = 0.0;
      for (int32_t i = 0; i < n_; ++i) makespan = std::max(makespan, end_[i]);
      if (makespan < best_) {
        best_ = makespan;
        best_start_ = start_;
        best_mode_ = mode_;
        done_ = best_ <= in_.lower_s * (1.0 + in_.rel_gap);
      }
      return;
    }
    profile(t_s);
    const std::vector<Segment>& segs = segs_;  // this node's until its options are listed
    if (pruned(lower_bound(t_s, segs, cutoff()))) return;
    if (dominated(front(t_s, segs))) return;
    std::vector<Option>& options = options_[count];
    options.clear();
    for (int32_t i = 0; i < n_; ++i) {
      if (start_[i] >= 0) continue;
      double ready = t_s;
      bool eligible = true;
      for (int32_t p : in_.preds[i]) {
        eligible = eligible && start_[p] >= 0;
        if (start_[p] >= 0) ready = std::max(ready, end_[p]);
      }
      if (!eligible) continue;
      for (int32_t m = 0; m < static_cast<int32_t>(in_.modes[i].size()); ++m) {
        const double t = earliest(segs, in_.modes[i][m], ready);
        const double end = t + in_.modes[i][m].duration_s;
        options.push_back({t, end, end + in_.tail_s[i], i, m});
      }
    }
    // Earliest start first, then the most critical.
    std::sort(options.begin(), options.end(), [](const Option& a, const Option& b) {
      return std::tie(a.start_s, b.bound_s, a.op, a.mode) < std::tie(b.start_s, a.bound_s, b.op, b.mode);
    });
    for (const Option& o : options) {
      if (pruned(o.bound_s) || fills_before(options, o.op, o.start_s)) continue;
      place(o.op, o.mode, o.start_s);
      dfs(o.start_s, count + 1);
      unplace(o.op);
      if (aborted_ || done_) return;
    }
  }

  const ScheduleSearchInput& in_;
  const int32_t n_;
  std::vector<std::vector<int32_t>> succs_;
  std::vector<int32_t> topo_;
  std::vector<double> fastest_;
  std::vector<std::array<double, kResources>> work_;
  std::vector<double> start_, end_, est_;
  std::vector<int32_t> mode_;
  std::vector<Placed> placed_;
  std::vector<int64_t> placed_mask_;  // bit i: op i is placed
  std::unordered_map<std::vector<int64_t>, std::deque<Front>, KeyHash> fronts_;  // placed ops -> recent
  // Scratch space, reused from node to node: the profile, lower_bound's lists, each depth's options.
  std::vector<double> times_;
  std::vector<const Placed*> live_;
  std::vector<Segment> segs_;
  std::vector<int32_t> open_, ops_;
  struct Late {
    double est_s;
    double work;
    double tail_s;
  };
  std::vector<Late> late_;
  std::vector<double> heads_;
  std::vector<std::vector<Option>> options_;
  double best_ = kInf;
  std::vector<double> best_start_;
  std::vector<int32_t> best_mode_;
  double min_pruned_s_ = kInf;
  int64_t nodes_ = 0;
  bool aborted_ = false;
  bool done_ = false;
};

void validate(const ScheduleSearchInput& in) {
  const std::size_t n = in.modes.size();
  if (in.preds.size() != n || in.tail_s.size() != n) {
    throw std::invalid_argument("modes, preds and tail_s must have one entry per op");
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (in.modes[i].empty() || in.modes[i].size() > 2) throw std::invalid_argument("every op needs 1 or 2 modes");
    for (const OpMode& m : in.modes[i]) {
      if (!(m.duration_s >= 0) || !std::isfinite(m.duration_s)) {
        throw std::invalid_argument("durations must be finite and >= 0");
      }
      for (int r = 0; r < kResources; ++r) {
        if (m.use[r] < 0 || m.use[r] > in.capacity[r]) {
          throw std::invalid_argument("a mode holds more units of a resource than it has");
        }
      }
    }
    for (int32_t p : in.preds[i]) {
      if (p < 0 || static_cast<std::size_t>(p) >= n || static_cast<std::size_t>(p) == i) {
        throw std::invalid_argument("predecessors must be other op indices");
      }
    }
    if (!(in.tail_s[i] >= 0)) throw std::invalid_argument("tails must be >= 0");
  }
  if (!(in.upper_s >= 0) || !std::isfinite(in.upper_s)) throw std::invalid_argument("upper_s must be finite");
  if (in.node_limit < 1) throw std::invalid_argument("node_limit must be >= 1");
}

}  // namespace

ScheduleSearchResult search_schedule(const ScheduleSearchInput& in) {
  validate(in);
  return Search(in).run();
}

}  // namespace phazec
