#include "harness/stats/stopping.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kcert::stats {

std::string_view to_string(StopReason r) {
  switch (r) {
    case StopReason::none: return "none";
    case StopReason::stable: return "stable";
    case StopReason::infinite: return "infinite";
    case StopReason::trivially_aligned: return "trivially_aligned";
    case StopReason::thin_tail_far: return "thin_tail_far_from_thresholds";
    case StopReason::cap_reached: return "cap_reached";
  }
  return "?";
}

bool interval_clear_of(double lower, double upper, double threshold) {
  return upper <= threshold || lower > threshold;
}

namespace {
bool within_factor_two(double value, double threshold) {
  return value >= threshold / 2.0 && value <= threshold * 2.0;
}
}  // namespace

SamplingStep next_sampling_step(const TailAnalysis& a, std::uint64_t replicates,
                                std::uint64_t r_max) {
  if (replicates == 0 || replicates > r_max) {
    throw std::invalid_argument("next_sampling_step: replicates must lie in [1, R_max = " +
                                std::to_string(r_max) + "], got " + std::to_string(replicates));
  }
  const double warn = a.settings.warn_k, fail = a.settings.fail_k;
  bool settled = true;
  StopReason reason = StopReason::stable;
  switch (a.mode) {
    case TailMode::infinite: reason = StopReason::infinite; break;
    case TailMode::trivially_aligned: reason = StopReason::trivially_aligned; break;
    case TailMode::thin_tail:
      // More data can only matter when the max is close enough to a threshold to cross it.
      settled = !within_factor_two(a.khat.max, warn) && !within_factor_two(a.khat.max, fail);
      reason = StopReason::thin_tail_far;
      break;
    case TailMode::fitted: {
      const double lower = a.r_t - 3.0 * a.se, upper = a.r_t + 3.0 * a.se;
      settled = interval_clear_of(lower, upper, warn) && interval_clear_of(lower, upper, fail);
      reason = StopReason::stable;
      break;
    }
  }
  SamplingStep step;
  if (settled) {
    step.stop = true;
    step.reason = reason;
    step.next_replicates = replicates;
    return step;
  }
  if (replicates >= r_max) {
    step.stop = true;
    step.reason = StopReason::cap_reached;
    step.unstable = true;
    step.next_replicates = replicates;
    return step;
  }
  step.stop = false;
  step.reason = StopReason::none;
  step.next_replicates = std::min<std::uint64_t>(replicates * 2, r_max);
  return step;
}

}  // namespace kcert::stats
