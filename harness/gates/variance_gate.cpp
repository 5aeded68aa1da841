#include "harness/gates/variance_gate.hpp"

#include <algorithm>
#include <limits>

#include "harness/stats/random.hpp"
#include "harness/stats/stopping.hpp"

namespace kcert::gates {

double k_hat(const ReplicateObservation& o, stats::FloatFormat working) {
  const double peak = std::min(o.peak, stats::max_finite(working));
  const double eps = stats::ulp_spacing(peak, working);
  if (o.e_prod <= eps) return 0.0;  // within one ULP of the oracle: trivially aligned
  if (o.same_as_reference) return 0.0;  // the reference's own output: nothing amplified
  if (o.e_ref == 0.0) return std::numeric_limits<double>::infinity();
  return (o.e_prod - eps) / o.e_ref;
}

VarianceGate::VarianceGate(const stats::VarianceSettings& settings, std::uint64_t replicates,
                           std::uint64_t max_replicates, stats::FloatFormat working)
    : settings_(settings), target_(replicates), max_replicates_(max_replicates), working_(working) {
  for (std::uint64_t r = replicates; r < max_replicates; r = std::min(r * 2, max_replicates)) ++possible_looks_;
}

stats::VarianceSettings VarianceGate::look_settings(std::size_t look) const {
  auto s = settings_;
  const double alpha = 1.0 - settings_.level;
  const double profile_ratio = (1.0 - settings_.profile_level) / alpha;
  const double share = possible_looks_ == 1 ? alpha
                       : look == 0          ? alpha / 2.0
                                            : alpha / (2.0 * static_cast<double>(possible_looks_ - 1));
  s.level = 1.0 - share;
  s.profile_level = 1.0 - share * profile_ratio;
  return s;
}

void VarianceGate::observe(const ReplicateBatch& batch) {
  if (batch.nonfinite) {
    nonfinite_reason_ = nonfinite_reason(*batch.nonfinite);
    stopped_ = true;
    return;
  }
  for (const auto& o : batch.replicates) {
    khat_.push_back(k_hat(o, working_));
    selection_ += o.selection;
  }
}

namespace {

VarianceEvidence evidence_of(const stats::TailAnalysis& t) {
  VarianceEvidence e;
  e.replicates = t.khat.count;
  e.events = t.khat.count - t.khat.zeros;
  e.exceedances = t.n_exc;
  const double declared = t.settings.horizon;
  e.unseen_event_horizon = static_cast<double>(t.khat.count) / 3.0;
  // A fit bounds r_T at T; a thin-tail FAIL (a maximum past fail_K, observed) reaches T; any
  // other thin verdict no further than its bound's supported horizon and R/3: the bound
  // extrapolates replicates that do not show the tail (issue 54), under a ξ <= 0 nothing has
  // tested (issue 52: a WARN read from the maximum says nothing of r_T <= fail_K on a heavy
  // tail). With no K̂ above 0 the sample supports R/3 (rule of three).
  // A fit whose verdict the maximum decided (a heavy-looking tail closing on an endpoint, or an
  // atom at a cap the fit read past)
  // reaches T only when that maximum FAILs, as a thin tail's: below, R/3.
  const bool fit_short = t.maximum_decides() && t.verdict != stats::Verdict::fail;  // fitted: only a fit has an endpoint
  e.horizon = fit_short                         ? e.unseen_event_horizon
              : t.mode == stats::TailMode::fitted ? declared
              : !t.thin                         ? e.unseen_event_horizon
              : t.verdict == stats::Verdict::fail ? t.thin->supported_horizon
                                                  : std::min(t.thin->supported_horizon, e.unseen_event_horizon);
  e.reaches_horizon = e.horizon >= declared;
  return e;
}

}  // namespace

std::uint64_t VarianceGate::wants_more(std::uint64_t done) {
  if (stopped_) return 0;
  if (done < target_) return target_ - done;
  const auto t0 = std::chrono::steady_clock::now();
  auto analysis = stats::analyze_tail(khat_, look_settings(result_.looks.size()));
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
    return r;
  }
  r.verdict = r.tail.verdict;
  r.reason = r.tail.reason + (r.unstable ? " (unstable: R_max reached)" : "");
  r.evidence = evidence_of(r.tail);
  if (r.verdict == Verdict::pass && r.evidence.replicates < settings_.min_replicates) {
    r.verdict = Verdict::inconclusive;
    r.reason += "; INCONCLUSIVE: a PASS on " + std::to_string(r.evidence.replicates) +
                " replicates, under the gate's minimum of " + std::to_string(settings_.min_replicates) +
                " (no excess in R replicates bounds its rate only by about 3/R); seeing one needs R >= " +
                std::to_string(settings_.min_replicates);
  }
  if (selection_.decisions > 0) {
    auto t = stats::test_selection_flips(selection_, settings_.selection_z, settings_.warn_k, settings_.fail_k);
    r.reason += "; " + t.reason;
    r.verdict = stats::worst(r.verdict, t.verdict);
    r.selection = std::move(t);
  }
  return r;
}

}  // namespace kcert::gates
