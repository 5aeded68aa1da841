#include "harness/gates/algebra_gate.hpp"
#include "harness/stats/format.hpp"

#include <algorithm>
#include <string>


namespace kcert::gates {

std::uint64_t AlgebraGate::fp64_replicates(std::uint64_t first, std::uint64_t count) const {
  return first < wanted_ ? std::min(wanted_ - first, count) : 0;
}

void AlgebraGate::observe(const ReplicateBatch& batch) {
  for (const auto& o : batch.algebra) {
    // The first pattern mismatch is what the reason names; later replicates cannot move it.
    if (o.mismatch && !pattern_mismatch_) {
      pattern_mismatch_ = true;
      where_ = *o.mismatch;
    }
    if (o.discrepancy > worst_ || replicates_ == 0) {
      if (!pattern_mismatch_) where_ = o.worst;
      worst_ = std::max(worst_, o.discrepancy);
    }
    ++replicates_;
  }
}

AlgebraResult AlgebraGate::decide() const {
  AlgebraResult r;
  r.replicates = replicates_;
  r.tolerance = tolerance_;
  r.worst_discrepancy = worst_;
  r.worst = where_;
  if (!structural_.empty()) {
    // Seen at W, on the production's own output: the check ran whatever the exact mode.
    r.verdict = Verdict::fail;
    r.reason = structural_;
    return r;
  }
  if (!not_applicable_.empty()) {
    r.applicable = false;
    r.verdict = Verdict::pass;
    r.reason = "not applicable: " + not_applicable_;
  } else if (pattern_mismatch_) {
    r.verdict = Verdict::fail;
    r.reason = "NaN/Inf patterns differ under the fp64 policy at " + location_text(where_);
  } else if (worst_ > tolerance_) {
    r.verdict = Verdict::fail;
    r.reason = "different real functions: max relative discrepancy " + stats::format_number(worst_) + " > " +
               stats::format_number(tolerance_) + " at " + location_text(where_);
  } else {
    r.verdict = Verdict::pass;
    r.reason = "same function on " + std::to_string(replicates_) + " fp64 replicates (max discrepancy " +
               stats::format_number(worst_) + ")";
  }
  if (r.verdict == Verdict::fail && own_forward_ >= 0) {
    r.reason += own_forward_ > tolerance_
                    ? "; the production's backward is not the VJP of its own forward either (it differs from "
                      "autograd of that forward by " + std::to_string(own_forward_) + "): a wrong backward"
                    : "; the production's backward is the VJP of its own forward: the backward of a different function";
  }
  return r;
}

}  // namespace kcert::gates
