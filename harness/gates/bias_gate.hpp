#pragma once
// Gate ② (method.md §3): a coherent first moment per bucket. Per-bucket Welford moments
// of Δ (signed) and M (magnitude) over the pre-declared R replicates, the bucket scales
// mean|oracle| for the ULP floor, and the three-part decision (z, standardized effect,
// ULP effect) for each statistic.
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/gates/gate.hpp"
#include "harness/gates/results.hpp"
#include "harness/stats/distinct_values.hpp"
#include "harness/stats/ulp.hpp"
#include "harness/stats/welford.hpp"

namespace kcert::gates {

class BiasAccumulator {
 public:
  explicit BiasAccumulator(std::size_t buckets);

  // Each side's bucket means of its error against the oracle, signed and as sign(ref)·error
  // (ReplicateObservation's ref_error... fields): what the attribution needs.
  struct SideErrors {
    std::span<const double> ref, ref_magnitude, prod, prod_magnitude;
  };

  // One replicate: its bucket means of (prod - ref), of sign(ref)·(prod - ref), and of
  // |oracle|, and its output peak max|oracle|. Replicates must be added in replicate order
  // for bit-reproducible results. Without `errors` (on any replicate) no bucket is
  // attributed: the gate judges prod - ref alone, as before issue 30.
  void add(std::span<const double> delta, std::span<const double> magnitude, std::span<const double> abs_oracle_mean,
           double peak, const SideErrors* errors = nullptr);

  std::uint64_t replicates() const { return signed_.count(); }
  std::size_t buckets() const { return signed_.buckets(); }

  // Decides the gate (method.md §3). `deciding` names the statistics that set the verdict.
  BiasResult decide(const stats::BiasThresholds& thresholds, const std::vector<stats::BiasStatistic>& deciding,
                    stats::FloatFormat working, const std::string& axis) const;

  // e_r, e_p, e_r + e_p and e_r - e_p of one statistic (stats::AttributionSample).
  struct SideMoments {
    explicit SideMoments(std::size_t buckets) : ref(buckets), prod(buckets), sum(buckets), gap(buckets) {}
    stats::BucketMoments ref, prod, sum, gap;
    void add(std::span<const double> ref_row, std::span<const double> prod_row);
  };


 private:
  stats::BucketMoments signed_;
  stats::BucketMoments magnitude_;
  // The values each bucket took while few: the equivalence interval on lattice buckets.
  stats::BucketValues signed_values_, magnitude_values_;
  SideMoments signed_sides_, magnitude_sides_;
  bool attributable_ = true;  // every replicate carried SideErrors
  std::vector<double> scale_sum_;
  double peak_sum_ = 0.0;
};

// What a bias PASS rests on, in words (issue 32): "equivalent within signed ±0.3 ULP, ..."
// or "not shown equivalent: signed interval up to ±0.41 ULP at bucket 29 against ±0.3
// (equivalence would need R ≈ 2900)".
std::string equivalence_words(const BiasResult& result);
// Why a PASS is INCONCLUSIVE (issue 32), "" when no deciding statistic is blind at its floor:
// "INCONCLUSIVE at R = 4 (|z| cut 156.7): an effect at the floor could not be significant
// (signed: the typical channel bucket's interval is ±8.4 ULP, not inside its floor ±0.3
// ULP); seeing one needs R >= 9".
std::string blind_words(const BiasResult& result);

struct BiasSettings {
  std::uint64_t replicates = 1024;  // R, declared before any data is seen
  stats::BiasThresholds thresholds;
  std::vector<stats::BiasStatistic> deciding{stats::BiasStatistic::signed_difference, stats::BiasStatistic::magnitude};
  std::string axis;                 // the bucket axis, for reasons and results
  bool attribution = true;          // judge which side the oracle agrees with (TestCase's bias_attribution)
};

class BiasGate final : public Gate {
 public:
  BiasGate(BiasSettings settings, stats::FloatFormat working) : settings_(std::move(settings)), working_(working) {}

  // Takes replicates below R only: the variance gate may grow R, the bias gate's R is fixed.
  void observe(const ReplicateBatch& batch) override;
  std::uint64_t wants_more(std::uint64_t done) override {
    return done < settings_.replicates ? settings_.replicates - done : 0;
  }
  BiasResult decide() const;

 private:
  BiasSettings settings_;
  stats::FloatFormat working_;
  std::optional<BiasAccumulator> moments_;  // sized by the first replicate's bucket count
  std::string nonfinite_reason_;
};

}  // namespace kcert::gates
