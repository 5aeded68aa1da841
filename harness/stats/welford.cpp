#include "harness/stats/welford.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace kcert::stats {

void RunningMoments::add(double x) {
  ++n_;
  const double delta = x - mean_;
  mean_ += delta / static_cast<double>(n_);
  // Uses the updated mean: (x - old_mean) * (x - new_mean) keeps m2 >= 0 in floating point.
  m2_ += delta * (x - mean_);
}

void RunningMoments::merge(const RunningMoments& other) {
  if (other.n_ == 0) return;
  if (n_ == 0) {
    *this = other;
    return;
  }
  const double na = static_cast<double>(n_);
  const double nb = static_cast<double>(other.n_);
  const double n = na + nb;
  const double delta = other.mean_ - mean_;
  mean_ += delta * (nb / n);
  m2_ += other.m2_ + delta * delta * (na * nb / n);
  n_ += other.n_;
}

double RunningMoments::variance() const {
  if (n_ < 2) return std::numeric_limits<double>::quiet_NaN();
  return m2_ / static_cast<double>(n_ - 1);
}

double RunningMoments::sd() const { return std::sqrt(variance()); }

void BucketMoments::add_row(std::span<const double> row) {
  if (row.size() != moments_.size()) {
    throw std::invalid_argument("BucketMoments::add_row: expected " +
                                std::to_string(moments_.size()) + " bucket values, got " +
                                std::to_string(row.size()));
  }
  for (std::size_t g = 0; g < row.size(); ++g) moments_[g].add(row[g]);
}

void BucketMoments::merge(const BucketMoments& other) {
  if (other.moments_.size() != moments_.size()) {
    throw std::invalid_argument("BucketMoments::merge: bucket counts differ (" +
                                std::to_string(moments_.size()) + " vs " +
                                std::to_string(other.moments_.size()) + ")");
  }
  for (std::size_t g = 0; g < moments_.size(); ++g) moments_[g].merge(other.moments_[g]);
}

}  // namespace kcert::stats
