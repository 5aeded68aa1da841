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
    case StopReason::cap_reached: return "cap_reached";
  }
  return "?";
}

bool interval_clear_of(double lower, double upper, double threshold) {
  return upper <= threshold || lower > threshold;
}

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
      // [max K̂, U]: the sample maximum below, the exponential bound above (tail.hpp). More
      // data narrows U (more events: a smaller χ² factor, then a fit); a maximum already above
      // fail_K is a FAIL that more data cannot clear.
      settled = interval_clear_of(a.lower, a.U, warn) && interval_clear_of(a.lower, a.U, fail);
      reason = StopReason::stable;
      break;
    case TailMode::fitted: {
      // The profile-likelihood interval [lower, U] (one-sided bounds at the stated level).
      const auto& h = a.heavy;
      if (h.unresolved()) {
        // A heavy-looking tail grows unless the clipped bound, the smaller, already FAILs: more
        // data either shows a bounded tail above a higher threshold (a capped K̂ whose
        // exceedances mix two scales needs ~50 over q0.99) or keeps the WARN-or-worse verdict.
        settled = h.U_clipped > fail || a.khat.max > fail;
      } else if (a.maximum_decides()) {
        // [max K̂, U over ξ ≤ 0], as on the thin route: the maximum decides the verdict (a top
        // closing on an endpoint, or an atom at a cap), and more data narrows U, shows the
        // bounded tail above a higher threshold, or lets the fit see the cap.
        settled = interval_clear_of(a.khat.max, a.U, warn) && interval_clear_of(a.khat.max, a.U, fail);
      } else {
        // The sample maximum is a floor as on the thin route: a K̂ past fail_K is a FAIL that
        // more data cannot clear (tail.cpp).
        const double lower = maximum_is_a_floor(a.khat.count, a.settings.horizon) ? std::max(a.lower, a.khat.max) : a.lower;
        settled = interval_clear_of(lower, a.U, warn) && interval_clear_of(lower, a.U, fail);
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
