#pragma once
// The values a bucket statistic took over the replicates, while they are few (issue 52).
// A bucket of a few elements whose differences are 0 or ±1 ULP gives a statistic on a coarse
// lattice; there the t interval of the mean overstates its level (255x at R = 64 for one
// element), and the bias gate's equivalence statement takes an interval for bounded values
// instead (stats::equivalence_bucket). Which one depends on what the data are: once a bucket
// has shown more than `capacity` distinct values it is treated as continuous and its values
// are let go.
#include <cstddef>
#include <span>
#include <vector>

namespace kcert::stats {

// What equivalence_bucket needs to know about a bucket's values. distinct = 0: not known, or
// more than DistinctValues::capacity (the t interval is used).
struct ValueSupport {
  std::size_t distinct = 0;
  double lo = 0.0, hi = 0.0;  // the smallest and largest value seen
  double step = 0.0;          // the smallest gap between two distinct values; 0 for one value
};

class DistinctValues {
 public:
  // 16 elements of {0, +1} ULP give 17 values; a continuous statistic passes 24 distinct values
  // within a few dozen replicates, after which nothing more is kept.
  static constexpr std::size_t capacity = 24;

  void add(double x);
  bool many() const { return many_; }
  ValueSupport support() const;

 private:
  std::vector<double> values_;  // sorted, distinct; emptied once many_
  bool many_ = false;
};

// One per bucket, fed a replicate's row of bucket values at a time (as BucketMoments).
class BucketValues {
 public:
  explicit BucketValues(std::size_t buckets) : values_(buckets) {}
  // Throws std::invalid_argument when row.size() != buckets().
  void add_row(std::span<const double> row);
  std::size_t buckets() const { return values_.size(); }
  const DistinctValues& operator[](std::size_t g) const { return values_[g]; }

 private:
  std::vector<DistinctValues> values_;
};

}  // namespace kcert::stats
