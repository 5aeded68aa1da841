#include "kcert_catch.hpp"

#include <cmath>
#include <vector>

#include "harness/stats/random.hpp"
#include "harness/stats/welford.hpp"

using kcert::stats::BucketMoments;
using kcert::stats::RunningMoments;

namespace {
// Two-pass reference in long double.
void two_pass(const std::vector<double>& x, double& mean, double& var) {
  long double s = 0;
  for (double v : x) s += v;
  const long double m = s / x.size();
  long double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  mean = static_cast<double>(m);
  var = static_cast<double>(ss / (x.size() - 1));
}

std::vector<double> shifted_sample(std::size_t n, double shift) {
  kcert::stats::SplitMix64 rng(42);
  std::vector<double> x(n);
  for (auto& v : x) v = shift + (rng.uniform() - 0.5) * 1e-3;
  return x;
}
}  // namespace

TEST_CASE("running moments match a two-pass computation on a large offset", "[welford]") {
  // A naive sum-of-squares would lose every digit here (offset 1e6, spread 1e-3).
  const auto x = shifted_sample(10000, 1e6);
  RunningMoments m;
  for (double v : x) m.add(v);
  double mean = 0, var = 0;
  two_pass(x, mean, var);
  CHECK(m.count() == 10000);
  CHECK(m.mean() == Approx(mean).epsilon(1e-15));
  CHECK(m.variance() == Approx(var).epsilon(1e-7));
}

TEST_CASE("merging shards equals accumulating the concatenation", "[welford]") {
  const auto x = shifted_sample(1000, 3.0);
  RunningMoments all, a, b, c;
  for (std::size_t i = 0; i < x.size(); ++i) {
    all.add(x[i]);
    (i < 137 ? a : i < 600 ? b : c).add(x[i]);
  }
  RunningMoments merged = a;
  merged.merge(b);
  merged.merge(c);
  CHECK(merged.count() == all.count());
  CHECK(merged.mean() == Approx(all.mean()).epsilon(1e-14));
  CHECK(merged.variance() == Approx(all.variance()).epsilon(1e-10));
  // Merging in another order gives the same moments.
  RunningMoments other = c;
  other.merge(a);
  other.merge(b);
  CHECK(other.variance() == Approx(all.variance()).epsilon(1e-10));
}

TEST_CASE("merging with an empty accumulator is the identity", "[welford]") {
  RunningMoments a, empty;
  a.add(1.0);
  a.add(3.0);
  a.merge(empty);
  CHECK(a.count() == 2);
  CHECK(a.mean() == 2.0);
  empty.merge(a);
  CHECK(empty.count() == 2);
  CHECK(empty.variance() == 2.0);
}

TEST_CASE("a constant sample has exactly zero variance", "[welford]") {
  RunningMoments m;
  for (int i = 0; i < 100; ++i) m.add(0.1);
  CHECK(m.mean() == 0.1);
  CHECK(m.m2() == 0.0);
  CHECK(m.sd() == 0.0);
}

TEST_CASE("variance is undefined below two observations", "[welford]") {
  RunningMoments m;
  CHECK(std::isnan(m.variance()));
  m.add(5.0);
  CHECK(std::isnan(m.sd()));
}

TEST_CASE("bucket moments accumulate per bucket and check shapes", "[welford]") {
  BucketMoments b(3);
  const std::vector<double> r1{1, 10, 100}, r2{3, 30, 300};
  b.add_row(r1);
  b.add_row(r2);
  CHECK(b.count() == 2);
  CHECK(b[0].mean() == 2.0);
  CHECK(b[2].mean() == 200.0);
  CHECK(b[1].variance() == 200.0);
  const std::vector<double> wrong{1, 2};
  CHECK_THROWS_WITH(b.add_row(wrong), Catch::Contains("expected 3 bucket values, got 2"));
  BucketMoments other(3);
  other.add_row(r1);
  b.merge(other);
  CHECK(b[0].count() == 3);
  CHECK(b[0].mean() == Approx(5.0 / 3.0));
  CHECK_THROWS(b.merge(BucketMoments(4)));
}
