#include "kcert_catch.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "harness/stats/gpd.hpp"
#include "harness/stats/random.hpp"
#include "reference.hpp"

using kcert::stats::fit_gpd;
using kcert::stats::gpd_log_likelihood;
using kcert::stats::return_level;

namespace {
std::vector<double> as_vector(const nlohmann::json& j) { return j.get<std::vector<double>>(); }

bool close_rel(double a, double b, double rel, double abs_floor = 0.0) {
  return std::fabs(a - b) <= rel * std::fabs(b) + abs_floor;
}
}  // namespace

TEST_CASE("GPD MLE agrees with SciPy where SciPy's optimizer converges", "[gpd][scipy]") {
  const auto& fits = kcert::test::stats_reference().at("gpd_fits");
  REQUIRE(fits.size() >= 12);
  int compared = 0;
  for (const auto& f : fits) {
    if (!f.at("scipy_converged").get<bool>()) continue;
    const auto y = as_vector(f.at("y"));
    const auto fit = fit_gpd(y);
    const double xi = f.at("scipy_xi"), sigma = f.at("scipy_sigma");
    INFO(f.at("name").get<std::string>() << ": kcert xi=" << fit.xi << " sigma=" << fit.sigma
                                         << " scipy xi=" << xi << " sigma=" << sigma);
    // 1e-5 relative; ξ near 0 also gets a 1e-7 absolute floor (relative error is
    // meaningless at 0).
    CHECK(close_rel(fit.xi, xi, 1e-5, 1e-7));
    CHECK(close_rel(fit.sigma, sigma, 1e-5));
    CHECK_FALSE(fit.at_lower_bound);
    ++compared;
  }
  CHECK(compared >= 10);
}

TEST_CASE("GPD log-likelihood is never below SciPy's at SciPy's optimum", "[gpd][scipy]") {
  for (const auto& f : kcert::test::stats_reference().at("gpd_fits")) {
    const auto y = as_vector(f.at("y"));
    const double scipy_xi = f.at("scipy_xi");
    const auto fit = fit_gpd(y);
    INFO(f.at("name").get<std::string>() << ": kcert ll=" << fit.log_likelihood
                                         << " scipy ll=" << f.at("scipy_loglik").get<double>());
    if (scipy_xi >= -1.0) {
      // Our own likelihood code must reproduce SciPy's value at SciPy's parameters.
      CHECK(gpd_log_likelihood(y, scipy_xi, f.at("scipy_sigma")) ==
            Approx(f.at("scipy_loglik").get<double>()).epsilon(1e-10));
      CHECK(fit.log_likelihood >= f.at("scipy_loglik").get<double>() - 1e-9);
    } else {
      // SciPy wandered below ξ = -1 where the likelihood is unbounded; kcert stays at the
      // constraint and must be on it.
      CHECK(fit.xi >= -1.0);
    }
  }
}

TEST_CASE("GPD fit reports its log-likelihood at its own parameters", "[gpd]") {
  for (const auto& f : kcert::test::stats_reference().at("gpd_fits")) {
    const auto y = as_vector(f.at("y"));
    const auto fit = fit_gpd(y);
    INFO(f.at("name").get<std::string>());
    CHECK(gpd_log_likelihood(y, fit.xi, fit.sigma) == Approx(fit.log_likelihood).epsilon(1e-9));
  }
}

TEST_CASE("GPD fit at the xi = -1 boundary is the uniform up to max y", "[gpd]") {
  // Sample below the scipy-divergent case: many values at the maximum push ξ̂ under -1.
  std::vector<double> y(40, 1.0);
  for (int i = 0; i < 10; ++i) y.push_back(0.1 * (i + 1) / 11.0);
  const auto fit = fit_gpd(y);
  CHECK(fit.at_lower_bound);
  CHECK(fit.xi == -1.0);
  CHECK(fit.sigma == 1.0);
  CHECK(fit.log_likelihood == Approx(0.0).margin(1e-12));  // -n·ln(1)
}

TEST_CASE("clipped GPD fit is the exponential when the free optimum is positive", "[gpd][scipy]") {
  for (const auto& f : kcert::test::stats_reference().at("gpd_fits")) {
    if (!f.at("scipy_converged").get<bool>()) continue;
    const auto y = as_vector(f.at("y"));
    const auto clipped = fit_gpd(y, 0.0);
    INFO(f.at("name").get<std::string>());
    CHECK(clipped.xi <= 0.0);
    CHECK(close_rel(clipped.xi, f.at("clipped_xi"), 1e-5, 1e-7));
    CHECK(close_rel(clipped.sigma, f.at("clipped_sigma"), 1e-5));
    if (f.at("scipy_xi").get<double>() > 0.0) {
      double mean = 0;
      for (double v : y) mean += v;
      mean /= static_cast<double>(y.size());
      CHECK(clipped.xi == 0.0);
      CHECK(clipped.at_upper_bound);
      CHECK(clipped.sigma == Approx(mean).epsilon(1e-14));
    }
  }
}

TEST_CASE("return level matches SciPy's GPD quantile at the horizon", "[gpd][scipy]") {
  const auto& ref = kcert::test::stats_reference();
  const double T = ref.at("horizon");
  for (const auto& f : ref.at("gpd_fits")) {
    if (!f.at("scipy_converged").get<bool>()) continue;
    const double level = return_level(1.0, f.at("clipped_sigma"), f.at("clipped_xi"), 0.1, T);
    INFO(f.at("name").get<std::string>());
    CHECK(level == Approx(f.at("return_level_u1_zeta0.1").get<double>()).epsilon(1e-10));
  }
}

TEST_CASE("return level formulas for xi < 0 and xi = 0 and the T·zeta > 1 check", "[gpd]") {
  // ξ = 0: u + σ ln(Tζ).
  CHECK(return_level(1.0, 0.5, 0.0, 0.1, 1000.0) == Approx(1.0 + 0.5 * std::log(100.0)));
  // ξ = -0.5: u + σ/ξ ((Tζ)^ξ - 1) = 1 + 0.5/(-0.5)·(0.1 - 1) = 1.9.
  CHECK(return_level(1.0, 0.5, -0.5, 0.1, 1000.0) == Approx(1.9));
  // Continuous at ξ → 0.
  CHECK(return_level(1.0, 0.5, -1e-12, 0.1, 1000.0) == Approx(return_level(1.0, 0.5, 0.0, 0.1, 1000.0)));
  CHECK_THROWS_WITH(return_level(1.0, 0.5, -0.1, 0.001, 1000.0), Catch::Contains("does not reach"));
  CHECK_THROWS_AS(return_level(1.0, 0.5, -0.1, 0.0005, 1000.0), std::domain_error);
}

TEST_CASE("GPD fit recovers known parameters from a large simulated sample", "[gpd]") {
  // Inverse-CDF draws from GPD(ξ = -0.25, σ = 0.3).
  kcert::stats::SplitMix64 rng(11);
  std::vector<double> y(20000);
  for (auto& v : y) v = 0.3 / -0.25 * (std::pow(1.0 - rng.uniform(), 0.25) - 1.0);
  const auto fit = fit_gpd(y);
  CHECK(fit.xi == Approx(-0.25).margin(0.02));
  CHECK(fit.sigma == Approx(0.3).epsilon(0.03));
}

TEST_CASE("GPD fit rejects unusable samples by index", "[gpd]") {
  CHECK_THROWS_WITH(fit_gpd(std::vector<double>{1.0}), Catch::Contains("at least 2"));
  CHECK_THROWS_WITH(fit_gpd(std::vector<double>{1.0, -0.5}), Catch::Contains("y[1]"));
  CHECK_THROWS_WITH(fit_gpd(std::vector<double>{1.0, std::nan("")}), Catch::Contains("y[1]"));
  CHECK_THROWS_WITH(fit_gpd(std::vector<double>{0.0, 0.0}), Catch::Contains("all exceedances are zero"));
  CHECK_THROWS(gpd_log_likelihood(std::vector<double>{1.0}, 0.1, 0.0));
}

TEST_CASE("GPD log-likelihood is -inf outside the support", "[gpd]") {
  const std::vector<double> y{0.5, 1.5};
  CHECK(gpd_log_likelihood(y, -1.0, 1.0) == -std::numeric_limits<double>::infinity());
  CHECK(gpd_log_likelihood(y, -0.5, 3.0) > -std::numeric_limits<double>::infinity());
  CHECK(gpd_log_likelihood(y, -1.0, 1.5) == Approx(-2.0 * std::log(1.5)));  // edge included
}

TEST_CASE("the GPD's survival function and quantile agree with SciPy's genpareto", "[gpd][scipy]") {
  // tests/stats/fixtures/generate_gpd_functions.py: sf and ppf over xi in [-1, 1] (|xi| of 1e-13
  // on either side of the exponential), y below 0 and past a bounded tail's endpoint, p from 0
  // to 1 - 1e-9. The report draws its fitted curve and QQ plot with these.
  int checked = 0;
  const auto fixture = kcert::test::load_fixture("gpd_functions_reference.json");
  for (const auto& row : fixture.at("rows")) {
    const double xi = row.at("xi"), sigma = row.at("sigma");
    if (row.contains("sf")) {
      const double y = row.at("y"), want = row.at("sf");
      INFO("sf y " << y << " xi " << xi << " sigma " << sigma);
      CHECK(kcert::stats::gpd_survival(y, xi, sigma) == Approx(want).epsilon(1e-12).margin(1e-300));
    } else {
      const double p = row.at("p"), want = row.at("ppf");
      INFO("ppf p " << p << " xi " << xi << " sigma " << sigma);
      CHECK(kcert::stats::gpd_quantile(p, xi, sigma) == Approx(want).epsilon(1e-12).margin(1e-300));
    }
    ++checked;
  }
  CHECK(checked == 9 * 3 * (8 + 7));
  CHECK_THROWS_AS(kcert::stats::gpd_survival(1.0, 0.1, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(kcert::stats::gpd_quantile(1.0, 0.1, 1.0), std::invalid_argument);
}
