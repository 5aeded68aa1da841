#pragma once
// The bias gate's accumulators: per-bucket Welford moments of Δ (signed) and M (magnitude)
// over replicates, and the bucket scales mean|oracle| for the ULP floor.
#include <span>
#include <vector>

#include "harness/gates/results.hpp"
#include "harness/stats/ulp.hpp"
#include "harness/stats/welford.hpp"

namespace kcert::gates {

class BiasAccumulator {
 public:
  explicit BiasAccumulator(std::size_t buckets);

  // One replicate: its bucket means of (prod - ref), of sign(ref)·(prod - ref), and of
  // |oracle|. Replicates must be added in replicate order for bit-reproducible results.
  void add(std::span<const double> delta, std::span<const double> magnitude, std::span<const double> abs_oracle_mean);

  std::uint64_t replicates() const { return signed_.count(); }
  std::size_t buckets() const { return signed_.buckets(); }

  // Decides the gate (method.md §3). `deciding` names the statistics that set the verdict.
  BiasResult decide(const stats::BiasThresholds& thresholds, const std::vector<stats::BiasStatistic>& deciding,
                    stats::FloatFormat working, const std::string& axis) const;

 private:
  stats::BucketMoments signed_;
  stats::BucketMoments magnitude_;
  std::vector<double> scale_sum_;
};

}  // namespace kcert::gates
