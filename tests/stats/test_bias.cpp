#include "kcert_catch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "harness/stats/bias.hpp"
#include "harness/stats/welford.hpp"
#include "reference.hpp"

using kcert::stats::BiasThresholds;
using kcert::stats::BucketSample;
using kcert::stats::decide_bucket;
using kcert::stats::Verdict;

namespace {
// The method's starting floors, spelled out: these tests check the decision rule, not the
// suite-level defaults (test "the shipped floors" below checks those).
const BiasThresholds kDefaults{5.0, 0.2, 0.05};
constexpr double kUlp = 0.0078125;  // bf16 at scale 1
}  // namespace

TEST_CASE("bias decision computes z and the standardized and ULP effects", "[bias]") {
  // R = 1024, mean 0.0008, sd 0.002: z = 32·0.4 = 12.8, effect 0.4, 0.1024 ULP.
  const auto d = decide_bucket({1024, 0.0008, 0.002, kUlp}, kDefaults);
  CHECK(d.z == Approx(12.8).epsilon(1e-12));
  CHECK(d.effect == Approx(0.4).epsilon(1e-12));
  CHECK(d.ulp_effect == Approx(0.1024).epsilon(1e-12));
  CHECK(d.direction == +1);
  CHECK(d.significant);
  CHECK(d.verdict == Verdict::fail);
}

TEST_CASE("bias FAIL needs all three conditions, otherwise significant is WARN", "[bias]") {
  // Significant, effect 0.4 > 0.2, but 0.0003 < 0.05 ULP = 0.00039: under the ULP floor.
  const auto ulp_floor = decide_bucket({1024, -0.0003, 0.00075, kUlp}, kDefaults);
  CHECK(ulp_floor.significant);
  CHECK(ulp_floor.direction == -1);
  CHECK(ulp_floor.verdict == Verdict::warn);
  // Significant thanks to a large R (z = 31.6) but the effect 0.1 is under s_min.
  const auto effect_floor = decide_bucket({100000, 0.001, 0.01, kUlp}, kDefaults);
  CHECK(effect_floor.z == Approx(std::sqrt(1e5) * 0.1));
  CHECK(effect_floor.significant);
  CHECK(effect_floor.effect == Approx(0.1));
  CHECK(effect_floor.verdict == Verdict::warn);
  // Large effect and many ULP but not significant (R small): PASS.
  const auto not_significant = decide_bucket({4, 0.01, 0.01, kUlp}, kDefaults);
  CHECK(not_significant.z == Approx(2.0));
  CHECK_FALSE(not_significant.significant);
  CHECK(not_significant.verdict == Verdict::pass);
}

TEST_CASE("bias significance is strict: |z| = z* is not significant", "[bias]") {
  const auto d = decide_bucket({25, 1.0, 1.0, kUlp}, kDefaults);  // z = 5 exactly
  CHECK(d.z == 5.0);
  CHECK_FALSE(d.significant);
  CHECK(d.verdict == Verdict::pass);
}

TEST_CASE("bias gate treats s_g = 0 with zero difference as PASS", "[bias]") {
  const auto d = decide_bucket({1024, 0.0, 0.0, kUlp}, kDefaults);
  CHECK(d.verdict == Verdict::pass);
  CHECK(d.z == 0.0);
  CHECK_FALSE(d.significant);
}

TEST_CASE("bias gate treats s_g = 0 with non-zero difference as significant", "[bias]") {
  // Above the ULP floor: FAIL, with infinite z and effect and the right direction.
  const auto big = decide_bucket({1024, -0.001, 0.0, kUlp}, kDefaults);
  CHECK(std::isinf(big.z));
  CHECK(big.z < 0);
  CHECK(std::isinf(big.effect));
  CHECK(big.significant);
  CHECK(big.verdict == Verdict::fail);
  // Under the ULP floor: WARN, never skipped.
  const auto small = decide_bucket({1024, 1e-6, 0.0, kUlp}, kDefaults);
  CHECK(small.significant);
  CHECK(small.verdict == Verdict::warn);
}

TEST_CASE("bias decision rejects unusable input by name", "[bias]") {
  CHECK_THROWS_WITH(decide_bucket({1, 0.1, 0.1, kUlp}, kDefaults), Catch::Contains("at least 2 replicates"));
  CHECK_THROWS_WITH(decide_bucket({10, 0.1, -1.0, kUlp}, kDefaults), Catch::Contains("sd"));
  CHECK_THROWS_WITH(decide_bucket({10, 0.1, 0.1, 0.0}, kDefaults), Catch::Contains("ulp"));
  CHECK_THROWS_WITH(decide_bucket({10, std::nan(""), 0.1, kUlp}, kDefaults), Catch::Contains("mean"));
  CHECK_THROWS_WITH(decide_bucket({10, 0.1, 0.1, kUlp}, BiasThresholds{5.0, -0.2, 0.05}),
                    Catch::Contains("s_min"));
}

TEST_CASE("false-alarm figures match SciPy's normal tail", "[bias][scipy]") {
  const auto& normal = kcert::test::stats_reference().at("normal");
  CHECK(kcert::stats::per_bucket_false_alarm(5.0) ==
        Approx(normal.at("two_sided_tail_z5").get<double>()).epsilon(1e-12));
  CHECK(kcert::stats::per_bucket_false_alarm(3.0) ==
        Approx(normal.at("two_sided_tail_z3").get<double>()).epsilon(1e-12));
  // 2GΦ(-5) for G = 4096 channel buckets.
  CHECK(kcert::stats::union_bound_false_alarm(4096, 5.0) ==
        Approx(4096 * normal.at("two_sided_tail_z5").get<double>()).epsilon(1e-12));
  CHECK(kcert::stats::union_bound_false_alarm(100000000, 3.0) == 1.0);  // capped
}

TEST_CASE("certified horizon: rho_min from the non-central t at the gate's cut", "[bias][scipy]") {
  // generate_nct_power.py: SciPy's nct solved for power 1 - beta at the Student-t cut.
  for (const auto& row : kcert::test::load_fixture("nct_power_reference.json").at("certified_horizon")) {
    const auto R = row.at("replicates").get<std::uint64_t>();
    const double cut = row.at("cut"), beta = row.at("beta");
    INFO("R = " << R << " cut = " << cut << " beta = " << beta);
    CHECK(kcert::stats::t_cut(R, row.at("z_star").get<double>()) == Approx(cut).epsilon(1e-9));
    const auto h = kcert::stats::certified_horizon(R, cut, beta);
    CHECK(h.rho_min == Approx(row.at("rho_min").get<double>()).epsilon(1e-7));
    CHECK(h.t_cert == Approx(1.0 / (h.rho_min * h.rho_min)).epsilon(1e-12));
  }
  CHECK_THROWS(kcert::stats::certified_horizon(1, 5.0));
  CHECK_THROWS(kcert::stats::certified_horizon(10, 5.0, 1.5));
  CHECK_THROWS(kcert::stats::certified_horizon(10, 0.0));
}

TEST_CASE("the shipped floors are z* 5, s_min 0.2, c 0.3 ULP", "[bias]") {
  const BiasThresholds shipped;
  CHECK(shipped.z_star == 5.0);
  CHECK(shipped.s_min == 0.2);
  CHECK(shipped.c == 0.3);
  // The positive #9 reads about 0.24 ULP (effect 5.6): significant but under the floor.
  CHECK(decide_bucket({1024, 0.24 * kUlp, 0.24 * kUlp / 5.6, kUlp}, shipped).verdict == Verdict::warn);
  // The Gemma offset defect N1 reads about 0.45 ULP (effect 9): FAIL.
  CHECK(decide_bucket({1024, 0.45 * kUlp, 0.45 * kUlp / 9.0, kUlp}, shipped).verdict == Verdict::fail);
}

TEST_CASE("the |z| cut is SciPy's Student-t quantile at the level 2 Phi(-z*)", "[bias][scipy]") {
  for (const auto& row : kcert::test::stats_reference().at("t_cuts")) {
    const auto R = row.at("replicates").get<std::uint64_t>();
    const double z = row.at("z_star");
    INFO("R = " << R << ", z* = " << z);
    CHECK(kcert::stats::t_cut(R, z) == Approx(row.at("cut").get<double>()).epsilon(1e-8));
    CHECK(kcert::stats::t_cut(R, z) > z);  // t has heavier tails than the normal
  }
  CHECK_THROWS(kcert::stats::t_cut(1, 5.0));
}

TEST_CASE("equivalence: the (1 - 2Phi(-z*)) interval of the mean inside +-c ULP", "[bias][equivalence]") {
  const double cut = kcert::stats::t_cut(256, 5.0);
  // mean 0.1 ULP, sd 0.5 ULP at R 256: half-width cut * 0.5 / 16 ULP.
  const auto e = kcert::stats::equivalence_bucket({256, 0.1 * kUlp, 0.5 * kUlp, kUlp}, 0.3, cut, 5.0);
  const double half = cut * 0.5 / 16.0;
  CHECK_THAT(e.lower_ulp, Catch::Matchers::WithinRel(0.1 - half, 1e-12));
  CHECK_THAT(e.upper_ulp, Catch::Matchers::WithinRel(0.1 + half, 1e-12));
  CHECK_THAT(e.widest_ulp, Catch::Matchers::WithinRel(0.1 + half, 1e-12));
  CHECK(e.equivalent == (0.1 + half <= 0.3));
  CHECK(e.equivalent);
  // The same mean with four times the sd: the interval crosses the bound.
  CHECK_FALSE(kcert::stats::equivalence_bucket({256, 0.1 * kUlp, 2.0 * kUlp, kUlp}, 0.3, cut, 5.0).equivalent);
  // A bit-identical bucket is equivalent at any R; a constant difference at the bound is not.
  CHECK(kcert::stats::equivalence_bucket({2, 0.0, 0.0, kUlp}, 0.3, kcert::stats::t_cut(2, 5.0), 5.0).equivalent);
  CHECK_FALSE(kcert::stats::equivalence_bucket({64, 0.31 * kUlp, 0.0, kUlp}, 0.3, kcert::stats::t_cut(64, 5.0), 5.0).equivalent);
  CHECK_THROWS_AS(kcert::stats::equivalence_bucket({1, 0.0, 0.0, kUlp}, 0.3, cut, 5.0), std::invalid_argument);
}

TEST_CASE("equivalence: a bucket is blind at its floor when its interval is at least +-c wide", "[bias][equivalence]") {
  // half-width cut * sd / sqrt(R) in ULP; blind iff >= c: then a mean of exactly c has |z| <= cut.
  const double cut4 = kcert::stats::t_cut(4, 5.0);
  const auto wide = kcert::stats::equivalence_bucket({4, 0.5 * kUlp, 0.5 * kUlp, kUlp}, 0.3, cut4, 5.0);
  CHECK_THAT(wide.half_width_ulp, Catch::Matchers::WithinRel(cut4 * 0.5 / 2.0, 1e-12));
  CHECK(wide.blind);
  const auto d = kcert::stats::decide_bucket({4, 0.3 * kUlp, 0.5 * kUlp, kUlp}, {}, cut4);
  CHECK_FALSE(d.significant);  // what blind means
  const double cut = kcert::stats::t_cut(1024, 5.0);
  const double sd_edge = 0.3 * 32.0 / cut;  // half-width exactly c at R 1024
  CHECK(kcert::stats::equivalence_bucket({1024, 0.0, sd_edge * 1.0001 * kUlp, kUlp}, 0.3, cut, 5.0).blind);
  CHECK_FALSE(kcert::stats::equivalence_bucket({1024, 0.0, sd_edge * 0.9999 * kUlp, kUlp}, 0.3, cut, 5.0).blind);
  CHECK_FALSE(kcert::stats::equivalence_bucket({2, 0.0, 0.0, kUlp}, 0.3, kcert::stats::t_cut(2, 5.0), 5.0).blind);
}

TEST_CASE("equivalence: the R a bucket needs is the smallest whose interval fits, by brute force", "[bias][equivalence]") {
  for (const auto& [mean, sd] : std::vector<std::pair<double, double>>{{0.0, 1.0}, {0.15, 1.0}, {0.0, 0.25}, {0.29, 0.1}, {0.1, 3.0}}) {
    const auto need = kcert::stats::replicates_for_equivalence(mean, sd, 0.3, 5.0);
    INFO("mean " << mean << " sd " << sd << " -> " << need);
    REQUIRE(need >= 2);
    const auto fits = [&](std::uint64_t r) { return mean + kcert::stats::t_cut(r, 5.0) * sd / std::sqrt(double(r)) <= 0.3; };
    CHECK(fits(need));
    if (need > 2) CHECK_FALSE(fits(need - 1));
  }
  CHECK(kcert::stats::replicates_for_equivalence(0.3, 1.0, 0.3, 5.0) == 0);  // at the bound: no R
  CHECK(kcert::stats::replicates_for_equivalence(0.0, 0.0, 0.3, 5.0) == 2);
  CHECK(kcert::stats::replicates_for_equivalence(0.2999, 10.0, 0.3, 5.0, 1000) == 1001);  // beyond the cap
}

TEST_CASE("equivalence on few distinct values: the bounded interval, against SciPy", "[bias][equivalence][lattice]") {
  // tests/stats/fixtures/generate_lattice_interval.py: Clopper-Pearson on [lo, hi] widened by
  // q·step (scipy's exact binomial interval, beta quantiles for a fractional count).
  const auto doc = kcert::test::load_fixture("lattice_interval_reference.json");
  REQUIRE(doc.at("cases").size() >= 10);
  for (const auto& c : doc.at("cases")) {
    INFO(c.at("name").get<std::string>());
    kcert::stats::RunningMoments m;
    kcert::stats::DistinctValues values;
    for (double x : c.at("values").get<std::vector<double>>()) {
      m.add(x);
      values.add(x);
    }
    const double z = c.at("z_star").get<double>();
    const double ulp = c.at("ulp").get<double>();
    const kcert::stats::BucketSample b{m.count(), m.mean(), m.sd(), ulp, values.support()};
    REQUIRE(b.support.distinct > 0);
    const auto e = kcert::stats::equivalence_bucket(b, 0.3, kcert::stats::t_cut(m.count(), z), z);
    CHECK(e.lattice);
    CHECK_THAT(e.lower_ulp * ulp, Catch::Matchers::WithinAbs(c.at("lower").get<double>(), 1e-9 * ulp));
    CHECK_THAT(e.upper_ulp * ulp, Catch::Matchers::WithinAbs(c.at("upper").get<double>(), 1e-9 * ulp));
    CHECK(e.equivalent == (std::max(std::fabs(e.lower_ulp), std::fabs(e.upper_ulp)) <= 0.3));
  }
}

TEST_CASE("equivalence on few distinct values: what decides the route", "[bias][equivalence][lattice]") {
  // A bucket that passed DistinctValues::capacity distinct values is continuous: the t interval.
  kcert::stats::DistinctValues many;
  for (std::size_t i = 0; i <= kcert::stats::DistinctValues::capacity; ++i) many.add(0.01 * static_cast<double>(i));
  CHECK(many.many());
  CHECK(many.support().distinct == 0);
  kcert::stats::DistinctValues few;
  for (int r = 0; r < 100; ++r) few.add(r % 3 == 0 ? 1.0 : 0.0);
  const auto s = few.support();
  CHECK(s.distinct == 2);
  CHECK(s.lo == 0.0);
  CHECK(s.hi == 1.0);
  CHECK(s.step == 1.0);
  // One element of {0, +1} at the boundary mean c = 0.3, R = 1024: the t interval shows it
  // equivalent for a sample a little below c (its size is 4x the stated level there); the
  // bounded interval does not.
  const std::uint64_t R = 1024;
  const double k = 230;  // 0.225 ULP: t upper 0.290, bounded upper 0.309
  const double mean = k / R, sd = std::sqrt(k * (R - k) / (R * (R - 1.0)));
  const double cut = kcert::stats::t_cut(R, 5.0);
  CHECK(kcert::stats::equivalence_bucket({R, mean, sd, 1.0}, 0.3, cut, 5.0).equivalent);
  const auto lattice = kcert::stats::equivalence_bucket({R, mean, sd, 1.0, {2, 0.0, 1.0, 1.0}}, 0.3, cut, 5.0);
  CHECK(lattice.lattice);
  CHECK_FALSE(lattice.equivalent);
  // Values that do not repeat are not a lattice, however few: 16 distinct values in 16
  // replicates take the t interval (found in review: as a lattice on their own range with a step
  // near 0, a continuous bucket at small R would be shown equivalent far too often).
  kcert::stats::RunningMoments g;
  kcert::stats::DistinctValues gv;
  for (int r = 0; r < 16; ++r) {
    const double x = 0.05 * std::sin(1.0 + r);  // 16 distinct values
    g.add(x);
    gv.add(x);
  }
  REQUIRE(gv.support().distinct == 16);
  const kcert::stats::BucketSample continuous{16, g.mean(), g.sd(), 1.0, gv.support()};
  const auto ct = kcert::stats::equivalence_bucket(continuous, 0.3, kcert::stats::t_cut(16, 5.0), 5.0);
  CHECK_FALSE(ct.lattice);
  CHECK(ct.upper_ulp - g.mean() == Approx(ct.half_width_ulp));
  // The same values each twice (32 replicates, 16 distinct): they repeat, a lattice.
  CHECK(kcert::stats::equivalence_bucket({32, g.mean(), g.sd(), 1.0, gv.support()}, 0.3, kcert::stats::t_cut(32, 5.0), 5.0).lattice);
  // The significance test's resolution (what INCONCLUSIVE reads) is the t half-width either way.
  CHECK(lattice.half_width_ulp == kcert::stats::equivalence_bucket({R, mean, sd, 1.0}, 0.3, cut, 5.0).half_width_ulp);
  // A bit-identical bucket: equivalent at R = 1024 (±0.015 ULP), not within ±0.2 at R = 64
  // (±0.21 ULP: a one-ULP flip at rate 0.2 is missed by 64 replicates with probability 6e-7).
  CHECK(kcert::stats::equivalence_bucket({1024, 0.0, 0.0, 1.0, {1, 0.0, 0.0, 0.0}}, 0.2, cut, 5.0).equivalent);
  CHECK_FALSE(kcert::stats::equivalence_bucket({64, 0.0, 0.0, 1.0, {1, 0.0, 0.0, 0.0}}, 0.2, kcert::stats::t_cut(64, 5.0), 5.0).equivalent);
  CHECK(kcert::stats::equivalence_bucket({64, 0.0, 0.0, 1.0, {1, 0.0, 0.0, 0.0}}, 0.3, kcert::stats::t_cut(64, 5.0), 5.0).equivalent);
}

TEST_CASE("equivalence on few distinct values: the R it needs, by brute force", "[bias][equivalence][lattice]") {
  // A bit-identical bucket: ln(Phi(-5)) / ln(1 - c) replicates, 68 at c = 0.2 and 43 at 0.3.
  const kcert::stats::BucketSample zero{64, 0.0, 0.0, 1.0, {1, 0.0, 0.0, 0.0}};
  CHECK(kcert::stats::replicates_for_lattice_equivalence(zero, 0.2, 5.0) == 68);
  CHECK(kcert::stats::replicates_for_lattice_equivalence(zero, 0.3, 5.0) == 43);
  // One element of {0, +1} at 5 % ones; and a bucket at or past the bound: no R.
  const kcert::stats::BucketSample few{256, 0.05, std::sqrt(0.05 * 0.95 * 256 / 255), 1.0, {2, 0.0, 1.0, 1.0}};
  const auto need = kcert::stats::replicates_for_lattice_equivalence(few, 0.3, 5.0);
  REQUIRE(need > 2);
  const auto equivalent_at = [&](std::uint64_t r) {
    auto b = few;
    b.replicates = r;
    return kcert::stats::equivalence_bucket(b, 0.3, kcert::stats::t_cut(r, 5.0), 5.0).equivalent;
  };
  CHECK(equivalent_at(need));
  CHECK_FALSE(equivalent_at(need - 1));
  for (std::uint64_t r : {need * 2, need * 8}) CHECK(equivalent_at(r));
  CHECK(kcert::stats::replicates_for_lattice_equivalence({64, 0.3, 0.4, 1.0, {2, 0.0, 1.0, 1.0}}, 0.3, 5.0) == 0);
  CHECK_THROWS_AS(kcert::stats::replicates_for_lattice_equivalence({64, 0.0, 0.0, 1.0}, 0.3, 5.0), std::invalid_argument);
}
