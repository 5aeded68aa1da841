#include "harness/gates/variance_gate.hpp"

#include <algorithm>
#include <limits>

#include "harness/gates/algebra_gate.hpp"
#include "harness/stats/stopping.hpp"

namespace kcert::gates {

double k_hat(const ReplicateObservation& o, stats::FloatFormat working) {
  const double peak = std::min(o.peak, stats::max_finite(working));
  const double eps = stats::ulp_spacing(peak, working);
  if (o.e_prod <= eps) return 0.0;  // within one ULP of the oracle: trivially aligned
  if (o.e_ref == 0.0) return std::numeric_limits<double>::infinity();
  return (o.e_prod - eps) / o.e_ref;
}

VarianceGate::VarianceGate(const stats::VarianceSettings& settings, std::uint64_t replicates,
                           std::uint64_t max_replicates, stats::FloatFormat working)
    : settings_(settings), target_(replicates), max_replicates_(max_replicates), working_(working) {}

void VarianceGate::observe(const ReplicateBatch& batch) {
  if (batch.nonfinite) {
    nonfinite_reason_ = "non-finite output (" + batch.nonfinite->value + ") from the " + batch.nonfinite->side + " at " +
                        location_text(batch.nonfinite->where);
    stopped_ = true;
    return;
  }
  for (const auto& o : batch.replicates) khat_.push_back(k_hat(o, working_));
}

std::uint64_t VarianceGate::wants_more(std::uint64_t done) {
  if (stopped_) return 0;
  if (done < target_) return target_ - done;
  const auto t0 = std::chrono::steady_clock::now();
  auto analysis = stats::analyze_tail(khat_, settings_);
  analysis_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto step = stats::next_sampling_step(analysis, done, max_replicates_);
  result_.looks.push_back(done);
  result_.tail = std::move(analysis);
  result_.stop = step.reason;
  result_.unstable = step.unstable;
  if (step.stop) {
    stopped_ = true;
    return 0;
  }
  target_ = step.next_replicates;
  return target_ - done;
}

VarianceResult VarianceGate::decide() const {
  VarianceResult r = result_;
  r.khat = khat_;
  if (!nonfinite_reason_.empty()) {
    r.verdict = Verdict::fail;
    r.reason = nonfinite_reason_;
  } else {
    r.verdict = r.tail.verdict;
    r.reason = r.tail.reason + (r.unstable ? " (unstable: R_max reached)" : "");
  }
  return r;
}

}  // namespace kcert::gates
