#include "kcert_catch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/stats/random.hpp"
#include "harness/stats/stopping.hpp"
#include "harness/stats/tail.hpp"
#include "reference.hpp"

using kcert::stats::analyze_tail;
using kcert::stats::TailMode;
using kcert::stats::VarianceSettings;
using kcert::stats::Verdict;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

VarianceSettings no_bootstrap() {
  VarianceSettings s;
  s.bootstrap = 0;
  return s;
}

double gpd_sample(kcert::stats::SplitMix64& rng, double xi, double sigma) {
  const double v = 1.0 - rng.uniform();
  return sigma * (xi == 0.0 ? -std::log(v) : std::expm1(-xi * std::log(v)) / xi);
}
}  // namespace

TEST_CASE("quantile uses NumPy's linear interpolation", "[tail][scipy]") {
  for (const auto& row : kcert::test::stats_reference().at("quantiles")) {
    const auto x = row.at("x").get<std::vector<double>>();
    const double q = row.at("q");
    INFO("n = " << x.size() << " q = " << q);
    CHECK(kcert::stats::quantile_sorted(x, q) == Approx(row.at("value").get<double>()).epsilon(1e-14));
  }
  CHECK_THROWS(kcert::stats::quantile_sorted(std::vector<double>{}, 0.5));
  CHECK_THROWS(kcert::stats::quantile_sorted(std::vector<double>{1.0}, 1.5));
}

TEST_CASE("peaks over threshold and return level agree with a SciPy pipeline", "[tail][scipy]") {
  for (const auto& t : kcert::test::stats_reference().at("tail_analyses")) {
    const auto k = t.at("khat").get<std::vector<double>>();
    const auto a = analyze_tail(k, no_bootstrap());
    INFO(t.at("name").get<std::string>());
    CHECK(a.mode == TailMode::fitted);
    CHECK(a.u == Approx(t.at("u").get<double>()).epsilon(1e-14));
    CHECK(a.n_exc == t.at("n_exc").get<std::size_t>());
    CHECK(a.zeta == Approx(t.at("zeta").get<double>()).epsilon(1e-14));
    CHECK(a.khat.q50 == Approx(t.at("quantiles").at("0.5").get<double>()).epsilon(1e-14));
    CHECK(a.khat.q99 == Approx(t.at("quantiles").at("0.99").get<double>()).epsilon(1e-14));
    REQUIRE(t.at("scipy_converged").get<bool>());
    CHECK(a.free_fit->xi == Approx(t.at("scipy_xi").get<double>()).epsilon(1e-5));
    CHECK(a.clipped_fit->sigma == Approx(t.at("clipped_sigma").get<double>()).epsilon(1e-5));
    CHECK(a.r_t == Approx(t.at("r_T").get<double>()).epsilon(1e-5));
    CHECK(a.se == 0.0);
    // U: the one-sided profile-likelihood bound, SciPy's own implementation of it.
    const auto bounds = t.at("profile_bounds_0.999").get<std::vector<double>>();
    CHECK(a.lower == Approx(bounds[0]).epsilon(1e-6));
    CHECK(a.U == Approx(bounds[1]).epsilon(1e-6));
    CHECK(a.U > a.r_t);
  }
}

TEST_CASE("bootstrap se agrees with a SciPy bootstrap up to Monte Carlo error", "[tail][scipy]") {
  // Independent resampling streams (NumPy vs SplitMix64), B = 400 each: the two estimates
  // of the same sd differ by ~5 % (1σ); 20 % is a 4σ band.
  for (const auto& t : kcert::test::stats_reference().at("tail_analyses")) {
    VarianceSettings s;
    s.bootstrap = 400;
    const auto a = analyze_tail(t.at("khat").get<std::vector<double>>(), s);
    INFO(t.at("name").get<std::string>() << ": kcert se " << a.se);
    CHECK(a.bootstrap_used == 400);
    CHECK(a.se == Approx(t.at("bootstrap_se_B400").get<double>()).epsilon(0.20));
    CHECK(a.U == analyze_tail(t.at("khat").get<std::vector<double>>(), no_bootstrap()).U);  // se is a diagnostic only
  }
}

TEST_CASE("bootstrap is reproducible from its seed", "[tail]") {
  const auto k = kcert::test::stats_reference().at("tail_analyses").at(0).at("khat").get<std::vector<double>>();
  VarianceSettings s;
  const auto a = analyze_tail(k, s);
  const auto b = analyze_tail(k, s);
  CHECK(a.se == b.se);  // bit-identical
  s.seed += 1;
  const auto c = analyze_tail(k, s);
  CHECK(c.se != a.se);
  CHECK(c.se == Approx(a.se).epsilon(0.3));
}

TEST_CASE("full bootstrap resamples u and zeta as well", "[tail]") {
  const auto k = kcert::test::stats_reference().at("tail_analyses").at(0).at("khat").get<std::vector<double>>();
  VarianceSettings s;
  const auto exc = analyze_tail(k, s);
  s.bootstrap_kind = kcert::stats::BootstrapKind::full;
  const auto full = analyze_tail(k, s);
  CHECK(full.r_t == exc.r_t);  // the point estimate does not depend on the bootstrap
  CHECK(full.se > 0.0);
  CHECK(full.se != exc.se);
  CHECK(full.bootstrap_used == 200);
}

TEST_CASE("an infinite K-hat fails the variance gate at once", "[tail]") {
  std::vector<double> k(100, 1.0);
  k[17] = kInf;
  const auto a = analyze_tail(k, VarianceSettings{});
  CHECK(a.mode == TailMode::infinite);
  CHECK(a.verdict == Verdict::fail);
  CHECK(std::isinf(a.U));
  CHECK(a.khat.infinite == 1);
  CHECK_THAT(a.reason, Catch::Contains("+inf"));
}

TEST_CASE("all-zero K-hat is PASS trivially aligned", "[tail]") {
  const std::vector<double> k(1024, 0.0);
  const auto a = analyze_tail(k, VarianceSettings{});
  CHECK(a.mode == TailMode::trivially_aligned);
  CHECK(a.verdict == Verdict::pass);
  CHECK(a.khat.zero_fraction == 1.0);
  CHECK_FALSE(a.free_fit);
}

TEST_CASE("thin tail: the exponential bound over the positive K-hat is judged", "[tail]") {
  // 1000 zeros and 60 positive values: q0.9 of the positives leaves 6 exceedances < 50.
  std::vector<double> k(1000, 0.0);
  for (int i = 1; i <= 60; ++i) k.push_back(0.05 * i);  // max 3.0, mean 1.525
  const auto a = analyze_tail(k, VarianceSettings{});
  CHECK(a.mode == TailMode::thin_tail);
  CHECK(a.n_exc == 6);
  REQUIRE(a.thin);
  CHECK(a.thin->u == Approx(2.705));  // q0.9 of 0.05 .. 3.0
  CHECK(a.thin->exceedances == 6);
  CHECK(a.thin->mean_excess == Approx(0.17));  // 2.75 .. 3.0 over 2.705
  CHECK(a.U == a.thin->U);
  CHECK(a.U > 3.0);  // six exceedances extrapolated to T reach past the maximum: about 8.8
  CHECK(a.U < 10.0);
  CHECK(a.lower == 3.0);
  CHECK(a.verdict == Verdict::warn);
  CHECK_FALSE(a.clipped_fit);
  CHECK_THAT(a.reason, Catch::Contains("thin tail") && Catch::Contains("exponential bound"));
  CHECK(a.zeta == Approx(6.0 / 1060.0));
}

TEST_CASE("thin tail: a small maximum among many zeros is not a PASS at the horizon", "[tail]") {
  // Issue 36: 80 % zeros at R = 128 put a maximum near 0.45 on a tail whose r_T is 2.6; the
  // maximum alone PASSed it at T. Three exceedances cannot bound r_T below warn_K at T: the
  // PASS reaches only the horizon where the exponential bound meets warn_K.
  std::vector<double> k(102, 0.0);
  for (int i = 1; i <= 26; ++i) k.push_back(0.45 * i / 26.0);  // max 0.45
  const auto settings = no_bootstrap();
  const auto a = analyze_tail(k, settings);
  REQUIRE(a.thin);
  CHECK(a.thin->exceedances == 3);
  CHECK(a.U > 2.0);
  CHECK(a.verdict == Verdict::pass);
  CHECK(a.thin->supported_horizon < settings.horizon);
  CHECK(a.thin->supported_horizon > 128.0 / 3.0);
  // The bound at T' is warn_K: u + σ_U·ln(T'·ζ_U).
  CHECK(a.thin->u + a.thin->sigma_upper * std::log(a.thin->supported_horizon * a.thin->zeta_upper) ==
        Approx(settings.warn_k).epsilon(1e-9));
  CHECK(a.reason.find("PASS short of the horizon") != std::string::npos);
  // ... and against an unseen event of unknown rate, R/3 (issue 54), which is shorter here.
  CHECK(a.thin->unseen_event_horizon == Approx(128.0 / 3.0));
  CHECK_THAT(a.reason, Catch::Contains("shown up to R/3 = 42.67 of T = 6.25e+05 (rule of three; the bound alone shows r <= warn up to T' = "));
  // Issue 52: 3 exceedances of u test nothing about xi; the reason says so, with the R at which
  // 50 would come (26 positive K-hat in 128, a tenth of them over u: 50 / (0.1 * 26 / 128)).
  CHECK_THAT(a.reason, Catch::Contains("; the tail's heaviness is untested: 3 exceedance(s) < 50, and the bound assumes xi <= 0 "
                                       "(a fit and its heavy-tail test need about R = 2462)"));
  // The maximum past warn_K decides WARN whatever the bound.
  k.back() = 2.5;
  const auto w = analyze_tail(k, settings);
  CHECK(w.verdict == Verdict::warn);
  CHECK(w.thin->supported_horizon == settings.horizon);
  CHECK_THAT(w.reason, Catch::Contains("the tail's heaviness is untested"));
  // A FAIL read from the maximum needs no such caveat: more data cannot clear it.
  k.back() = 25.0;
  const auto f = analyze_tail(k, settings);
  CHECK(f.verdict == Verdict::fail);
  CHECK_THAT(f.reason, !Catch::Contains("heaviness is untested"));
  // One positive K-hat: no exceedance of u (= that value); it is the exceedance of 0.
  std::vector<double> one(1023, 0.0);
  one.push_back(0.01);
  const auto b = analyze_tail(one, no_bootstrap());
  REQUIRE(b.thin);
  CHECK(b.thin->u == 0.0);
  CHECK(b.thin->exceedances == 1);
  CHECK(b.U > 0.01);
}

TEST_CASE("thin-tail bound agrees with SciPy's chi-squared quantiles", "[tail][scipy]") {
  // generate_thin_tail_bound.py
  const auto fixture = kcert::test::load_fixture("thin_tail_bound_reference.json");
  for (const auto& row : fixture.at("bounds")) {
    const auto excesses = row.at("excesses").get<std::vector<double>>();
    const auto R = row.at("replicates").get<std::size_t>();
    INFO("n = " << excesses.size() << " R = " << R);
    const auto b = kcert::stats::thin_tail_bound(excesses, row.at("u"), row.at("max_khat"), R, row.at("level"), row.at("horizon"));
    CHECK(b.sigma_upper == Approx(row.at("sigma_upper").get<double>()).epsilon(1e-9));
    CHECK(b.zeta_upper == Approx(row.at("zeta_upper").get<double>()).epsilon(1e-9));
    CHECK(b.U == Approx(row.at("U").get<double>()).epsilon(1e-9));
  }
  // SciPy ran the thin-tail path on zero-inflated exponential and GPD(-0.3) laws: U covers r_T at least at its level.
  for (const auto& row : fixture.at("coverage")) CHECK(row.at("coverage").get<double>() >= row.at("level").get<double>());
  CHECK_THROWS(kcert::stats::thin_tail_bound(std::vector<double>{}, 0.0, 1.0, 10, 0.99, 1e5));
  CHECK_THROWS(kcert::stats::thin_tail_bound(std::vector<double>{1.0, 2.0}, 0.0, 2.0, 1, 0.99, 1e5));
}

TEST_CASE("the endpoint test agrees with SciPy's F quantiles and keeps its level", "[tail][scipy][endpoint]") {
  // generate_endpoint_test.py
  const auto fixture = kcert::test::load_fixture("endpoint_test_reference.json");
  for (const auto& row : fixture.at("cases")) {
    INFO(row.at("name").get<std::string>());
    const auto y = row.at("exceedances").get<std::vector<double>>();
    const auto e = kcert::stats::endpoint_test(y, row.at("level"));
    const auto& want = row.at("result");
    REQUIRE(e.has_value() == !want.is_null());
    if (!e) continue;
    CHECK(e->top == want.at("top").get<std::size_t>());
    CHECK(e->ratio == Approx(want.at("ratio").get<double>()).epsilon(1e-9).margin(1e-15));
    CHECK(e->cut == Approx(want.at("cut").get<double>()).epsilon(1e-9));
    CHECK(e->level == Approx(want.at("level").get<double>()).epsilon(1e-12));
  }
  // SciPy's simulation: on exponential and GPD(+0.3) exceedances the test rejects at most at
  // its alpha (within 3 standard errors of 4000 runs).
  for (const auto& row : fixture.at("level")) {
    const double alpha = row.at("alpha"), runs = row.at("runs");
    CHECK(row.at("rejected").get<double>() <= alpha + 3.0 * std::sqrt(alpha * (1.0 - alpha) / runs));
  }
}

TEST_CASE("the endpoint test reads ties at a cap as an endpoint and skips splits without spread", "[tail][endpoint]") {
  // Five K-hat tie at the cap 1.0: the split m = 2 has no spread below (skipped), m = 3 rejects.
  std::vector<double> y{0.1, 0.2, 0.3, 0.4, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0};
  const auto e = kcert::stats::endpoint_test(y, 0.99);
  REQUIRE(e);
  CHECK(e->top == 6);
  CHECK(e->ratio == 0.0);
  // Exponential quantiles (the null itself, spacings as expected): no endpoint.
  std::vector<double> q;
  for (int i = 0; i < 100; ++i) q.push_back(-std::log(1.0 - (i + 0.5) / 100.0));
  CHECK_FALSE(kcert::stats::endpoint_test(q, 0.99));
  // Fewer than five exceedances: no split fits.
  CHECK_FALSE(kcert::stats::endpoint_test(std::vector<double>{0.1, 0.2, 0.3, 0.4}, 0.99));
}

TEST_CASE("a capped K-hat read as heavy at u with too few exceedances above q0.95: the maximum decides (issue 54)", "[tail][heavy][endpoint]") {
  // The two-scale law of the refit test below, but 500 replicates: 50 exceedances over q0.9,
  // 25 over q0.95, too few for the refit. Over u the tail reads heavy; its top six are the
  // cluster at the cap. Before the endpoint test the verdict was WARN at least on the bound over
  // xi up to 1; the largest K-hat, 0.96, is far under warn_K.
  kcert::stats::SplitMix64 rng(5);
  std::vector<double> k(500);
  for (auto& v : k) v = rng.uniform() < 0.012 ? 0.9 + 0.057 * rng.uniform() : gpd_sample(rng, 0.0, 0.05);
  const auto a = analyze_tail(k, no_bootstrap());
  INFO(a.reason);
  REQUIRE(a.mode == TailMode::fitted);
  CHECK(a.heavy.rejected);
  CHECK_FALSE(a.heavy.bounded_q);
  REQUIRE(a.heavy.endpoint);
  CHECK(a.maximum_decides());
  CHECK_FALSE(a.heavy.unresolved());
  CHECK(a.U == a.heavy.U_clipped);
  CHECK(a.khat.max < 1.0);
  CHECK(a.verdict == Verdict::pass);
  CHECK_THAT(a.reason, Catch::Contains("closes on an endpoint"));
  // Read from the maximum, the PASS is short of the horizon; where the bound over xi <= 0 passes
  // warn_K the stopping rule grows it as it grows a thin PASS: [max K-hat, U] straddles warn_K.
  CHECK_THAT(a.reason, Catch::Contains("PASS short of the horizon: read from the maximum"));
  CHECK(kcert::stats::next_sampling_step(a, 500, 8192).stop == (a.U <= 2.0));
  // The same sample scaled so that the cap lies past warn_K (2.25-2.39): both tests are scale-free,
  // so the same rejection and the same endpoint; WARN, read from the maximum.
  auto past = k;
  for (auto& v : past) v *= 2.5;
  const auto b = analyze_tail(past, no_bootstrap());
  INFO(b.reason);
  REQUIRE(b.maximum_decides());
  CHECK(b.khat.max > 2.0);
  CHECK(b.verdict == Verdict::warn);
  CHECK_THAT(b.reason, Catch::Contains("WARN short of the horizon: read from the maximum"));
  // From R = T/20 on the maximum is no floor: the bound over xi <= 0 decides, and says so.
  auto far = no_bootstrap();
  far.horizon = 5000.0;  // R = 500 >= T/20 = 250
  const auto c = analyze_tail(k, far);
  INFO(c.reason);
  REQUIRE(c.heavy.endpoint);  // the tests do not depend on T
  CHECK_FALSE(c.maximum_decides());
  CHECK(c.verdict == kcert::stats::threshold_verdict(c.U, 2.0, 10.0));
  CHECK_THAT(c.reason, Catch::Contains("the bound over xi <= 0 decides (R >= T/20)"));
}

TEST_CASE("variance verdict is PASS up to warn_K and WARN up to fail_K and FAIL above", "[tail]") {
  using kcert::stats::threshold_verdict;
  CHECK(threshold_verdict(2.0, 2.0, 10.0) == Verdict::pass);
  CHECK(threshold_verdict(std::nextafter(2.0, 3.0), 2.0, 10.0) == Verdict::warn);
  CHECK(threshold_verdict(10.0, 2.0, 10.0) == Verdict::warn);
  CHECK(threshold_verdict(10.5, 2.0, 10.0) == Verdict::fail);
  CHECK(threshold_verdict(kInf, 2.0, 10.0) == Verdict::fail);
}

TEST_CASE("an amplifying production kernel fails through its return level", "[tail]") {
  // K-hat around 6 with an exponential tail: U far above fail_K = 10.
  kcert::stats::SplitMix64 rng(5);
  std::vector<double> k(1024);
  for (auto& v : k) v = 6.0 - std::log(1.0 - rng.uniform());
  const auto a = analyze_tail(k, VarianceSettings{});
  CHECK(a.mode == TailMode::fitted);
  CHECK(a.r_t > 10.0);
  CHECK(a.verdict == Verdict::fail);
}

TEST_CASE("tail analysis rejects negative or NaN or empty samples by index", "[tail]") {
  CHECK_THROWS_WITH(analyze_tail(std::vector<double>{}, VarianceSettings{}), Catch::Contains("empty"));
  CHECK_THROWS_WITH(analyze_tail(std::vector<double>{1.0, -1.0}, VarianceSettings{}), Catch::Contains("K-hat[1]"));
  CHECK_THROWS_WITH(analyze_tail(std::vector<double>{std::nan("")}, VarianceSettings{}), Catch::Contains("K-hat[0]"));
  VarianceSettings bad;
  bad.fail_k = 1.0;
  CHECK_THROWS_WITH(analyze_tail(std::vector<double>{1.0}, bad), Catch::Contains("fail_k"));
}

TEST_CASE("a heavy tail is flagged by the LR test and bounded without the clip", "[tail][heavy]") {
  // GPD(+0.3) K-hat, 4000 replicates: 400 exceedances, free xi-hat well above 0.
  kcert::stats::SplitMix64 rng(7);
  std::vector<double> k(4000);
  for (auto& v : k) v = gpd_sample(rng, 0.3, 0.05);
  const auto a = analyze_tail(k, no_bootstrap());
  REQUIRE(a.mode == TailMode::fitted);
  CHECK(a.heavy.tested);
  CHECK(a.heavy.rejected);
  CHECK(a.heavy.cut == Approx(5.411894431054).epsilon(1e-9));  // scipy.stats.chi2.ppf(0.98, 1)
  CHECK(a.heavy.lr > a.heavy.cut);
  CHECK_FALSE(a.heavy.bounded_q);
  CHECK_FALSE(a.heavy.endpoint);  // a heavy top spreads out: no endpoint
  REQUIRE(a.heavy.U_unclipped);
  CHECK(a.U == *a.heavy.U_unclipped);
  CHECK(a.verdict != Verdict::pass);  // WARN at least
  CHECK_THAT(a.reason, Catch::Contains("heavy tail"));
}

TEST_CASE("an on-model thin tail passes the bounded-tail check", "[tail][heavy]") {
  kcert::stats::SplitMix64 rng(11);
  std::vector<double> k(4000);
  for (auto& v : k) v = gpd_sample(rng, -0.3, 0.1);
  const auto a = analyze_tail(k, no_bootstrap());
  REQUIRE(a.mode == TailMode::fitted);
  CHECK_FALSE(a.heavy.rejected);
  CHECK(a.heavy.lr <= a.heavy.cut);
  CHECK(a.tail_q == 0.9);
  CHECK(a.verdict == Verdict::pass);
  // 400 exceedances of a xi = -0.3 tail: the profile's xi range stays below 0, so dropping the
  // clip changes nothing and no caveat is given.
  REQUIRE(a.heavy.U_unclipped);
  CHECK(*a.heavy.U_unclipped == Approx(a.heavy.U_clipped).epsilon(1e-6));
  CHECK_FALSE(a.heavy.model_matters);
  CHECK_THAT(a.reason, !Catch::Contains("bounded-tail assumption"));
}

TEST_CASE("an atom at the maximum that the fit reads past: the maximum decides (issue 54)", "[tail][heavy][atom]") {
  // min(Exp(cap/4), cap): an exponential body capped by construction, e^-4 = 1.8 % of K-hat at
  // the cap 1.9 (under warn_K). 500 replicates: 50 exceedances over q0.9, about nine of them at
  // the cap. The LR test does not reject (the tail is light), and the fit over xi <= 0, which
  // reads the cap as part of a tail, puts U past warn_K on many such samples: WARN for a true
  // PASS (52 % at 50 exceedances before this rule). Three replicates at exactly the largest
  // K-hat cannot come from a continuous tail: the maximum decides.
  const double cap = 1.9;
  auto capped_sample = [&](std::uint64_t seed) {
    kcert::stats::SplitMix64 rng(seed);
    std::vector<double> k(500);
    for (auto& v : k) v = std::min(gpd_sample(rng, 0.0, cap / 4.0), cap);
    return k;
  };
  const auto settings = no_bootstrap();
  int cases = 0, warn_cases = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const auto k = capped_sample(seed);
    const auto a = analyze_tail(k, settings);
    REQUIRE(a.mode == TailMode::fitted);
    INFO("seed " << seed << ": " << a.reason);
    // The rule's preconditions, read from the sample itself; on every seed the rule applies
    // exactly where they hold.
    const bool atom = !a.heavy.rejected && a.heavy.tied_at_maximum >= kcert::stats::kAtomTies &&
                      a.heavy.U_clipped > 2.0 && a.khat.max <= 2.0;
    CHECK(a.heavy.atom == atom);
    CHECK(a.heavy.tied_at_maximum == static_cast<std::size_t>(std::count(k.begin(), k.end(), cap)));
    if (!atom) continue;
    ++cases;
    CHECK(a.khat.max == cap);
    CHECK_FALSE(a.heavy.endpoint);
    CHECK(a.maximum_decides());
    CHECK_FALSE(a.heavy.unresolved());
    CHECK_FALSE(a.heavy.model_matters);
    CHECK(a.U == a.heavy.U_clipped);
    CHECK(a.verdict == Verdict::pass);
    CHECK_THAT(a.reason, Catch::Contains("but the maximum is an atom (") &&
                             Catch::Contains("replicates at exactly 1.9, no replicate past it: a cap reached in R replicates)") &&
                             Catch::Contains("PASS short of the horizon: read from the maximum"));
    // [max K-hat, U] straddles warn_K: the stopping rule grows it, as a thin PASS.
    CHECK_FALSE(kcert::stats::next_sampling_step(a, 500, 8192).stop);
    // The same sample with its ties broken (each K-hat at the cap nudged apart, the largest
    // unique): a continuous top, and the fit decides as before.
    auto broken = k;
    double nudge = 0.0;
    for (auto& v : broken)
      if (v == cap) v = cap - (nudge += 1e-9);
    const auto b = analyze_tail(broken, settings);
    INFO(b.reason);
    CHECK(b.heavy.tied_at_maximum == 1);
    CHECK_FALSE(b.heavy.atom);
    CHECK(b.verdict == kcert::stats::threshold_verdict(b.U, 2.0, 10.0));
    // From R = T/20 on the maximum is no floor: the rule does not apply.
    auto far = settings;
    far.horizon = 5000.0;  // R = 500 >= T/20 = 250
    CHECK_FALSE(analyze_tail(k, far).heavy.atom);
    // The same sample times 5 (the fit is scale-equivariant, ties stay ties): the cap at 9.5 is
    // past warn_K and under fail_K; where the bound then reads past fail_K, the atom gives WARN,
    // read from the maximum and short of the horizon, not the bound's FAIL.
    auto scaled = k;
    for (auto& v : scaled) v *= 5.0;
    const auto d = analyze_tail(scaled, settings);
    INFO(d.reason);
    if (d.heavy.U_clipped > 10.0) {
      ++warn_cases;
      CHECK(d.heavy.atom);
      CHECK(d.verdict == Verdict::warn);
      CHECK_THAT(d.reason, Catch::Contains("WARN short of the horizon: read from the maximum"));
    }
  }
  CHECK(cases >= 5);  // at 50 exceedances about half of such samples read past the cap
  CHECK(warn_cases >= 1);
  // An atom the bound does not read past (a cap of 0.4, U far under warn_K): nothing to resolve.
  kcert::stats::SplitMix64 rng(3);
  std::vector<double> low(500);
  for (auto& v : low) v = std::min(gpd_sample(rng, 0.0, 0.1), 0.4);
  const auto c = analyze_tail(low, settings);
  INFO(c.reason);
  REQUIRE(c.mode == TailMode::fitted);
  REQUIRE_FALSE(c.heavy.rejected);
  REQUIRE(c.heavy.tied_at_maximum >= kcert::stats::kAtomTies);
  CHECK(c.heavy.U_clipped <= 2.0);
  CHECK_FALSE(c.heavy.atom);
  CHECK(c.verdict == Verdict::pass);
  CHECK(kcert::stats::tied_at_maximum(std::vector<double>{0.1, 0.4, 0.4}) == 2);
  CHECK(kcert::stats::tied_at_maximum(std::vector<double>{}) == 0);
}

TEST_CASE("a fit with xi-hat <= 0 whose profile still reaches xi > 0 says the bound rests on the clip (issue 52)", "[tail][heavy]") {
  // An exponential tail, 100 exceedances, scaled so the clipped bound PASSes: xi-hat lands on
  // either side of 0, and the profile over xi up to 1 often reaches a tail heavy enough to pass
  // warn_K at T. Before issue 52 the caveat was given only where xi-hat > 0, so a GPD(+0.1) tail
  // whose sample read xi-hat <= 0 was lenient with no word of the assumption.
  int cases = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    kcert::stats::SplitMix64 rng(seed);
    std::vector<double> k(1000);
    for (auto& v : k) v = gpd_sample(rng, 0.0, 0.09);
    const auto a = analyze_tail(k, no_bootstrap());
    REQUIRE(a.mode == TailMode::fitted);
    INFO("seed " << seed << ": " << a.reason);
    REQUIRE(a.heavy.U_unclipped);  // on every fit
    // The caveat is given exactly where the unclipped bound reads stricter (no rejection, the
    // maximum under warn_K).
    if (a.heavy.rejected || a.khat.max > 2.0) continue;
    const bool stricter = kcert::stats::threshold_verdict(*a.heavy.U_unclipped, 2.0, 10.0) >
                          kcert::stats::threshold_verdict(a.heavy.U_clipped, 2.0, 10.0);
    CHECK(a.heavy.model_matters == stricter);
    CHECK(a.U == a.heavy.U_clipped);  // a caveat, not a verdict
    if (!(stricter && a.heavy.xi_free <= 0.0 && a.verdict == Verdict::pass)) continue;
    ++cases;
    CHECK_THAT(a.reason, Catch::Contains("bounded-tail assumption not shown by the data") &&
                             Catch::Contains("<= 0, but the profile does not exclude xi > 0"));
  }
  CHECK(cases >= 3);
}

TEST_CASE("on a fitted tail the maximum decides WARN and FAIL where the bound reads lower (issue 54)", "[tail]") {
  // The on-model tail above (a PASS) with one replicate of a rare defect, K-hat = 50: the fit
  // took it as one more exceedance and U stayed under fail_K (it read WARN). An amplification
  // seen in a replicate is a FAIL, as on the thin route; the stopping rule stops on it.
  kcert::stats::SplitMix64 rng(11);
  std::vector<double> k(4000);
  for (auto& v : k) v = gpd_sample(rng, -0.3, 0.1);
  k[1234] = 50.0;
  const auto a = analyze_tail(k, no_bootstrap());
  INFO(a.reason);
  REQUIRE(a.mode == TailMode::fitted);
  CHECK(a.U < 50.0);
  CHECK(a.verdict == Verdict::fail);
  CHECK_THAT(a.reason, Catch::Contains("max K-hat = 50 is past fail: an amplification observed in a replicate"));
  CHECK(kcert::stats::next_sampling_step(a, 4000, 8192).stop);
  // A maximum past warn only: WARN, not FAIL.
  k[1234] = 3.0;
  CHECK(analyze_tail(k, no_bootstrap()).verdict == Verdict::warn);
}

TEST_CASE("a bounded K-hat whose exceedances mix two scales is refitted above a higher threshold", "[tail][heavy]") {
  // 98.8 % Exp(0.05) and 1.2 % uniform on [0.9, 0.957] (a bounded amplification, the shape
  // of real_router_softmax_dtype_float's K-hat): over the q0.9 threshold the exceedances mix
  // the exponential's tail with a far cluster and look heavy; above q0.99 the tail is the
  // cluster alone, bounded.
  kcert::stats::SplitMix64 rng(5);
  std::vector<double> k(8192);
  for (auto& v : k) v = rng.uniform() < 0.012 ? 0.9 + 0.057 * rng.uniform() : gpd_sample(rng, 0.0, 0.05);
  const auto a = analyze_tail(k, no_bootstrap());
  REQUIRE(a.mode == TailMode::fitted);
  INFO(a.reason);
  CHECK(a.heavy.rejected);
  REQUIRE(a.heavy.bounded_q);
  CHECK(*a.heavy.bounded_q > 0.9);
  CHECK(a.tail_q == *a.heavy.bounded_q);
  CHECK(a.heavy.bounded_xi < 0.0);
  CHECK(a.U >= a.khat.max);
  CHECK(a.U < 2.0);
  CHECK(a.verdict == Verdict::pass);
  CHECK_THAT(a.reason, Catch::Contains("bounded above"));
  CHECK_FALSE(a.heavy.model_matters);  // a rejection resolved above has its own words, not the caveat
}

TEST_CASE("a fit on the xi = -1 boundary keeps the profile bound, never below the maximum", "[tail]") {
  // Uniform exceedances: xi-hat sits on -1.
  std::vector<double> k;
  for (int i = 0; i < 1000; ++i) k.push_back(1.0 + 0.001 * (i % 100));
  for (int i = 0; i < 120; ++i) k.push_back(1.1 + 0.5 * (i + 0.5) / 120.0);
  const auto a = analyze_tail(k, no_bootstrap());
  REQUIRE(a.mode == TailMode::fitted);
  CHECK(a.boundary_fit);
  CHECK(a.U >= a.khat.max);
  CHECK_THAT(a.reason, Catch::Contains("boundary"));
}
