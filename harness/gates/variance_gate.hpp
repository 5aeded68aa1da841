#pragma once
// Gate ③ (method.md §4-§5): error amplification against the fp64 oracle. Each replicate
// gives K̂ = max(0, (E_prod - ε)/E_ref); the gate fits the tail at every look and grows R
// by the verdict-stable rule (stats/stopping) up to R_max, each look at its share of α.
#include <chrono>

#include "harness/gates/gate.hpp"
#include "harness/gates/results.hpp"
#include "harness/stats/tail.hpp"

namespace kcert::gates {

// K̂ = max(0, (E_prod - ε)/E_ref) with ε one true ULP of W at the output peak; 0 when
// E_prod ≤ ε, +∞ when E_ref = 0 < E_prod - ε.
double k_hat(const ReplicateObservation& o, stats::FloatFormat working);

class VarianceGate final : public Gate {
 public:
  // `replicates`: the first look (the bias gate's R); `max_replicates`: R_max.
  VarianceGate(const stats::VarianceSettings& settings, std::uint64_t replicates, std::uint64_t max_replicates,
               stats::FloatFormat working);

  void observe(const ReplicateBatch& batch) override;
  // Takes a look when `done` has reached the current target: fits the tail and either
  // stops or names the next target (doubling, capped at R_max).
  std::uint64_t wants_more(std::uint64_t done) override;
  VarianceResult decide() const;
  // The settings of look `look` (0-based): the one-sided level 1 - α is spent over every look
  // the doubling rule can take from the first R to R_max (Bonferroni), half at the first look
  // and the rest evenly, so U at whichever look stops covers r_T at `level`; the profile's
  // χ² cut keeps its ratio to the level (α_profile = α_look / 10 by default).
  stats::VarianceSettings look_settings(std::size_t look) const;

  double analysis_seconds() const { return analysis_seconds_; }

 private:
  stats::VarianceSettings settings_;
  std::uint64_t target_, max_replicates_;
  stats::FloatFormat working_;
  bool stopped_ = false;
  std::size_t possible_looks_ = 1;
  std::vector<double> khat_;
  stats::SelectionCounts selection_;
  VarianceResult result_;
  std::string nonfinite_reason_;
  double analysis_seconds_ = 0.0;
};

}  // namespace kcert::gates
