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
    case TailMode::thin_tail: {
      // More data matters when the max is close enough to a threshold to cross it, or when
      // the tail would reach the exceedances a fit needs within R_max: then U bounds the
      // return level instead of the maximum standing in for it.
      const bool near = within_factor_two(a.khat.max, warn) || within_factor_two(a.khat.max, fail);
      // A maximum already above fail_K is a FAIL that more data cannot clear: no growth for it.
      // Growth for evidence alone is bounded at two doublings (4 R): past that a fit costs more
      // than a nightly can spend on one control (docs/statistics.md).
      const double reach = std::min(static_cast<double>(r_max), 4.0 * static_cast<double>(replicates));
      const bool fit_reachable = a.verdict != Verdict::fail && a.n_exc > 0 &&
                                 static_cast<double>(a.n_exc) * reach / static_cast<double>(replicates) >=
                                     static_cast<double>(a.settings.min_exceedances);
      settled = !near && !fit_reachable;
      reason = StopReason::thin_tail_far;
      break;
    }
    case TailMode::fitted: {
      // The profile-likelihood interval [lower, U] (one-sided bounds at the stated level).
      const auto& h = a.heavy;
      if (h.unresolved()) {
        // A heavy-looking tail grows unless the clipped bound, the smaller, already FAILs: more
        // data either shows a bounded tail above a higher threshold (a capped K̂ whose
        // exceedances mix two scales needs ~50 over q0.99) or keeps the WARN-or-worse verdict.
        settled = h.U_clipped > fail;
      } else {
        settled = interval_clear_of(a.lower, a.U, warn) && interval_clear_of(a.lower, a.U, fail);
      }
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
