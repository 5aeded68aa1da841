#include "kcert_catch.hpp"

#include "harness/stats/selection.hpp"
#include "reference.hpp"

using kcert::stats::SelectionCounts;
using kcert::stats::test_selection_flips;
using kcert::stats::Verdict;

TEST_CASE("the flip test's binomial tail is SciPy's binom.sf(k - 1, n, 1/2)", "[selection][scipy]") {
  for (const auto& row : kcert::test::stats_reference().at("binomial_half")) {
    const auto k = row.at("k").get<std::int64_t>(), n = row.at("n").get<std::int64_t>();
    INFO("k = " << k << ", n = " << n);
    CHECK(kcert::stats::binomial_half_upper_tail(k, n) == Approx(row.at("upper_tail").get<double>()).epsilon(1e-10));
  }
  CHECK_THROWS(kcert::stats::binomial_half_upper_tail(5, 4));
}

TEST_CASE("the flip test's level is one-sided Phi(-z*)", "[selection][scipy]") {
  const auto t = test_selection_flips({}, 5.0, 2.0, 10.0);
  CHECK(t.p_cut == Approx(kcert::test::stats_reference().at("one_sided_tail_z5").get<double>()).epsilon(1e-10));
  CHECK(t.verdict == Verdict::pass);  // no decisions, nothing to test
}

TEST_CASE("production flipping as often as the reference passes", "[selection]") {
  // Both sides flip on the same hard decisions and a few on their own: no direction.
  SelectionCounts c{1'000'000, 12, 400, 380, 40, 20};
  const auto t = test_selection_flips(c, 5.0, 2.0, 10.0);
  CHECK_FALSE(t.significant);
  CHECK(t.verdict == Verdict::pass);
  CHECK(t.ratio == Approx(400.0 / 380.0));
}

TEST_CASE("production flipping far more often fails, moderately more warns", "[selection]") {
  // A TF32 or bf16 router GEMM: hundreds of decisions the reference gets right.
  const auto fail = test_selection_flips({1'000'000, 0, 900, 30, 880, 10}, 5.0, 2.0, 10.0);
  CHECK(fail.significant);
  CHECK(fail.ratio == Approx(30.0));
  CHECK(fail.verdict == Verdict::fail);
  const auto warn = test_selection_flips({1'000'000, 0, 300, 100, 250, 50}, 5.0, 2.0, 10.0);
  CHECK(warn.significant);
  CHECK(warn.verdict == Verdict::warn);
  // A large ratio on a handful of decisions is not evidence: 3 of 3 discordant has p 1/8.
  const auto few = test_selection_flips({1'000'000, 0, 3, 0, 3, 0}, 5.0, 2.0, 10.0);
  CHECK(few.ratio == Approx(3.0));
  CHECK_FALSE(few.significant);
  CHECK(few.verdict == Verdict::pass);
  // The reference flipping more is not production's defect.
  CHECK(test_selection_flips({1'000'000, 0, 10, 900, 5, 895}, 5.0, 2.0, 10.0).verdict == Verdict::pass);
}

TEST_CASE("the exact null rate of the flip test stays under its level", "[selection]") {
  // Discordant decisions split by a fair coin: the rate of p < cut must not exceed the cut.
  // With z* = 2 (cut 0.0228) the rate is measurable in 20000 draws of n = 50.
  std::uint64_t state = 12345;
  const auto coin = [&]() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 63) != 0;
  };
  int rejections = 0;
  const int draws = 20000;
  for (int d = 0; d < draws; ++d) {
    std::int64_t prod_only = 0;
    for (int i = 0; i < 50; ++i) prod_only += coin() ? 1 : 0;
    const auto t = test_selection_flips({100, 0, prod_only, 50 - prod_only, prod_only, 50 - prod_only}, 2.0, 0.0, 1e9);
    rejections += t.significant ? 1 : 0;
  }
  const double rate = static_cast<double>(rejections) / draws;
  // The exact test is conservative on a lattice: P(X >= 33 | 50) = 0.0164 <= 0.0228.
  CHECK(rate < 0.0228);
  CHECK(rate > 0.010);  // and not vacuous: it does reject at about its attainable level
}
