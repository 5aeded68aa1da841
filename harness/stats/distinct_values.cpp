#include "harness/stats/distinct_values.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kcert::stats {

void DistinctValues::add(double x) {
  if (many_) return;
  const auto at = std::lower_bound(values_.begin(), values_.end(), x);
  if (at != values_.end() && *at == x) return;
  if (values_.size() == capacity) {
    many_ = true;
    std::vector<double>().swap(values_);  // let the memory go: this bucket takes the t interval
    return;
  }
  values_.insert(at, x);
}

ValueSupport DistinctValues::support() const {
  ValueSupport s;
  if (many_ || values_.empty()) return s;
  s.distinct = values_.size();
  s.lo = values_.front();
  s.hi = values_.back();
  for (std::size_t i = 1; i < values_.size(); ++i) {
    const double gap = values_[i] - values_[i - 1];
    if (s.step == 0.0 || gap < s.step) s.step = gap;
  }
  return s;
}

void BucketValues::add_row(std::span<const double> row) {
  if (row.size() != values_.size()) {
    throw std::invalid_argument("BucketValues::add_row: expected " + std::to_string(values_.size()) +
                                " bucket values, got " + std::to_string(row.size()));
  }
  for (std::size_t g = 0; g < row.size(); ++g) values_[g].add(row[g]);
}

}  // namespace kcert::stats
