#include "phazec/list_schedule.hpp"

#include <algorithm>
#include <cstddef>
#include <set>
#include <stdexcept>
#include <tuple>

namespace phazec {
namespace {

/// An op placed on a resource: [start, end) holding `units` of it.
struct Held {
  double start_s;
  double end_s;
  int32_t units;
};

using Profile = std::array<std::vector<Held>, kResources>;

/// Whether `need` more units fit under `cap` everywhere in [lo, hi); usage peaks at lo or a start.
bool fits(const std::vector<Held>& held, double lo, double hi, int32_t need, int32_t cap) {
  auto fits_at = [&](double x) {
    int64_t used = need;
    for (const Held& h : held) {
      if (h.start_s <= x && x < h.end_s) used += h.units;
    }
    return used <= cap;
  };
  if (!fits_at(lo)) return false;
  for (const Held& h : held) {
    if (lo < h.start_s && h.start_s < hi && !fits_at(h.start_s)) return false;
  }
  return true;
}

/// The earliest t >= ready with the mode's units free over [t, t + duration): `ready` or the end of
/// a placed interval on one of its resources, since usage only changes at starts and ends.
double earliest(const Profile& profile, const std::array<int32_t, kResources>& capacity, double ready,
                const OpMode& mode) {
  if (mode.duration_s == 0) return ready;
  std::set<double> times{ready};
  for (int r = 0; r < kResources; ++r) {
    if (mode.use[r] == 0) continue;
    for (const Held& h : profile[r]) {
      if (h.end_s > ready) times.insert(h.end_s);
    }
  }
  for (double t : times) {
    bool free = true;
    for (int r = 0; r < kResources && free; ++r) {
      if (mode.use[r] > 0) free = fits(profile[r], t, t + mode.duration_s, mode.use[r], capacity[r]);
    }
    if (free) return t;
  }
  throw std::logic_error("the last end always fits");
}

struct Choice {
  double start_s;
  double end_s;
  int32_t mode;
};

void check(const std::vector<std::vector<OpMode>>& modes, const std::vector<std::vector<int32_t>>& preds,
           const std::array<int32_t, kResources>& capacity, const std::vector<double>& priority) {
  const std::size_t n = modes.size();
  if (preds.size() != n || priority.size() != n) {
    throw std::invalid_argument("modes, preds and priority must have one entry per op");
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (modes[i].empty()) throw std::invalid_argument("every op needs a mode");
    for (const OpMode& m : modes[i]) {
      if (!(m.duration_s >= 0)) throw std::invalid_argument("durations must be >= 0");
      for (int r = 0; r < kResources; ++r) {
        if (m.use[r] < 0 || m.use[r] > capacity[r]) {
          throw std::invalid_argument("a mode holds more units of a resource than it has");
        }
      }
    }
    for (int32_t p : preds[i]) {
      if (p < 0 || static_cast<std::size_t>(p) >= n) throw std::invalid_argument("a predecessor is out of range");
    }
  }
}

}  // namespace

ListScheduleResult list_schedule(const std::vector<std::vector<OpMode>>& modes,
                                 const std::vector<std::vector<int32_t>>& preds,
                                 const std::array<int32_t, kResources>& capacity,
                                 const std::vector<double>& priority, bool first_start) {
  check(modes, preds, capacity, priority);
  const std::size_t n = modes.size();
  ListScheduleResult out{std::vector<double>(n, 0.0), std::vector<int32_t>(n, 0)};
  std::vector<double> end(n, 0.0);
  std::vector<bool> placed(n, false);
  Profile profile;

  auto place = [&](std::size_t i) {
    double ready = 0.0;
    for (int32_t p : preds[i]) ready = std::max(ready, end[p]);
    Choice best{0.0, 0.0, -1};
    for (std::size_t m = 0; m < modes[i].size(); ++m) {
      const double t = earliest(profile, capacity, ready, modes[i][m]);
      const Choice option{t, t + modes[i][m].duration_s, static_cast<int32_t>(m)};
      if (best.mode < 0 || std::tie(option.end_s, option.start_s) < std::tie(best.end_s, best.start_s)) {
        best = option;
      }
    }
    return best;
  };
  auto is_ready = [&](std::size_t k) {
    return !placed[k] && std::all_of(preds[k].begin(), preds[k].end(), [&](int32_t p) { return placed[p]; });
  };

  for (std::size_t count = 0; count < n; ++count) {
    std::size_t chosen = n;
    Choice where{};
    for (std::size_t k = 0; k < n; ++k) {
      if (!is_ready(k)) continue;
      if (first_start) {
        const Choice here = place(k);
        if (chosen == n || std::make_tuple(here.start_s, -priority[k]) < std::make_tuple(where.start_s, -priority[chosen])) {
          chosen = k;
          where = here;
        }
      } else if (chosen == n || -priority[k] < -priority[chosen]) {
        chosen = k;
      }
    }
    if (chosen == n) throw std::invalid_argument("dependencies have a cycle");
    if (!first_start) where = place(chosen);
    out.start_s[chosen] = where.start_s;
    out.mode[chosen] = where.mode;
    end[chosen] = where.end_s;
    placed[chosen] = true;
    if (where.end_s > where.start_s) {
      const OpMode& mode = modes[chosen][where.mode];
      for (int r = 0; r < kResources; ++r) {
        if (mode.use[r] > 0) profile[r].push_back({where.start_s, where.end_s, mode.use[r]});
      }
    }
  }
  return out;
}

}  // namespace phazec
