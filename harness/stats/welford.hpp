#pragma once
// Mergeable running mean/variance (Welford's update, Chan et al.'s pairwise combination).
// The bias gate keeps one per bucket; shards and batches combine with merge().
#include <cstdint>
#include <span>
#include <vector>

namespace kcert::stats {

class RunningMoments {
 public:
  RunningMoments() = default;

  void add(double x);
  // Chan, Golub & LeVeque (1979): combines two disjoint samples' moments without revisiting
  // the data; the result equals the moments of the concatenated sample up to rounding.
  void merge(const RunningMoments& other);

  std::uint64_t count() const { return n_; }
  double mean() const { return mean_; }
  // Sum of squared deviations from the mean.
  double m2() const { return m2_; }
  // Sample variance (n - 1 denominator); NaN when count() < 2.
  double variance() const;
  // Sample standard deviation; NaN when count() < 2.
  double sd() const;

 private:
  std::uint64_t n_ = 0;
  double mean_ = 0.0;
  double m2_ = 0.0;
};

// One accumulator per bucket, fed one replicate (a row of bucket values) at a time.
class BucketMoments {
 public:
  explicit BucketMoments(std::size_t buckets) : moments_(buckets) {}

  // Throws std::invalid_argument when row.size() != buckets().
  void add_row(std::span<const double> row);
  // Throws std::invalid_argument when the bucket counts differ.
  void merge(const BucketMoments& other);

  std::size_t buckets() const { return moments_.size(); }
  const RunningMoments& operator[](std::size_t g) const { return moments_[g]; }
  std::uint64_t count() const { return moments_.empty() ? 0 : moments_.front().count(); }

 private:
  std::vector<RunningMoments> moments_;
};

}  // namespace kcert::stats
