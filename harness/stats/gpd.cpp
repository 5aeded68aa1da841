#include "harness/stats/gpd.hpp"
#include "harness/stats/format.hpp"

#include <algorithm>
#include <boost/math/tools/minima.hpp>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace kcert::stats {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Grimshaw: with θ = ξ/σ fixed, the likelihood is maximized by ξ(θ) = mean log(1 + θy),
// leaving the profile ℓ(θ) = -n·(ln σ(θ) + ξ(θ) + 1), σ(θ) = ξ(θ)/θ. We walk the profile in
// λ = ln(1 + θ·max y) ∈ (-∞, ∞): λ → -∞ is the edge of the support (θ → -1/max y), λ = 0
// the exponential limit. This coordinate resolves both ends in double precision, where
// θ itself would round 1 + θ·max y to zero long before the likelihood stops changing.
class Profile {
 public:
  explicit Profile(std::span<const double> y) : n_(static_cast<double>(y.size())) {
    ymax_ = *std::max_element(y.begin(), y.end());
    double sum = 0.0;
    for (double v : y) sum += v;
    ybar_ = sum / n_;
    ratio_.reserve(y.size());
    gap_.reserve(y.size());
    for (double v : y) {
      ratio_.push_back(v / ymax_);
      gap_.push_back((ymax_ - v) / ymax_);  // 1 - r_i without cancellation
    }
  }

  struct Point {
    double lambda;
    double xi;
    double sigma;
    double loglik;
  };

  // ξ(λ) alone: increasing in λ, used to locate the constraint boundaries.
  double xi_at(double lambda) const { return sum_logs(lambda) / n_; }

  Point at(double lambda) const {
    if (lambda == 0.0) return {0.0, 0.0, ybar_, -n_ * (std::log(ybar_) + 1.0)};
    const double xi = xi_at(lambda);
    const double t = std::expm1(lambda);  // θ·max y
    const double sigma = xi * ymax_ / t;
    if (!(sigma > 0.0) || !std::isfinite(xi)) return {lambda, xi, sigma, kNegInf};
    return {lambda, xi, sigma, -n_ * (std::log(sigma) + xi + 1.0)};
  }

  double ymax() const { return ymax_; }
  double n() const { return n_; }

 private:
  double sum_logs(double lambda) const {
    double s = 0.0;
    if (lambda > 0.0) {
      const double t = std::expm1(lambda);
      for (double r : ratio_) s += std::log1p(t * r);
    } else if (lambda < 0.0) {
      const double q = std::exp(lambda);        // 1 + θ·max y
      const double one_minus_q = -std::expm1(lambda);
      if (one_minus_q < 0.5) {
        for (double r : ratio_) s += std::log1p(-one_minus_q * r);
      } else {
        // Near the support edge: 1 + θ y_i = (1 - r_i) + q·r_i, exact for the maximum.
        for (std::size_t i = 0; i < ratio_.size(); ++i) s += std::log(gap_[i] + q * ratio_[i]);
      }
    }
    return s;
  }

  double n_;
  double ymax_ = 0.0;
  double ybar_ = 0.0;
  std::vector<double> ratio_;
  std::vector<double> gap_;
};

// λ where ξ(λ) = target, by bisection on [lo, hi] (ξ is increasing in λ).
double solve_xi(const Profile& p, double target, double lo, double hi) {
  for (int i = 0; i < 200 && hi - lo > 1e-15 * std::max(1.0, std::fabs(lo)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (p.xi_at(mid) < target ? lo : hi) = mid;
  }
  return hi;
}

constexpr double kLambdaMin = -700.0;  // 1 + θ·max y = e^-700 ≈ 1e-304: the support edge
constexpr double kLambdaMax = 25.0;    // θ·max y ≈ 7e10: ξ ≈ 25 + mean ln(y/max y)

void validate_sample(std::span<const double> y) {
  if (y.size() < 2) {
    throw std::invalid_argument("fit_gpd: needs at least 2 exceedances, got " +
                                std::to_string(y.size()));
  }
  double ymax = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i]) || y[i] < 0.0) {
      throw std::invalid_argument("fit_gpd: exceedance y[" + std::to_string(i) +
                                  "] must be finite and >= 0, got " + format_number(y[i]));
    }
    ymax = std::max(ymax, y[i]);
  }
  if (!(ymax > 0.0)) throw std::invalid_argument("fit_gpd: all exceedances are zero");
}

}  // namespace

double gpd_log_likelihood(std::span<const double> y, double xi, double sigma) {
  if (!(sigma > 0.0) || !std::isfinite(sigma) || !std::isfinite(xi)) {
    throw std::invalid_argument("gpd_log_likelihood: needs finite xi and sigma > 0, got xi=" +
                                format_number(xi) + " sigma=" + format_number(sigma));
  }
  const double n = static_cast<double>(y.size());
  if (xi == 0.0) {
    double s = 0.0;
    for (double v : y) {
      if (v < 0.0) return kNegInf;
      s += v;
    }
    return -n * std::log(sigma) - s / sigma;
  }
  const double power = 1.0 + 1.0 / xi;
  double s = 0.0;
  for (double v : y) {
    if (v < 0.0) return kNegInf;
    const double t = xi * v / sigma;  // 1 + t is the support term; log1p keeps it exact
    if (t < -1.0) return kNegInf;
    // ξ = -1 makes the density flat (power 0) up to and including the edge t = -1. At the
    // edge the density is 0 for -1 < ξ < 0 and unbounded for ξ < -1 (why ξ ≥ -1 is imposed).
    if (power != 0.0) {
      if (t == -1.0) return power < 0.0 ? kNegInf : std::numeric_limits<double>::infinity();
      s += std::log1p(t);
    }
  }
  return -n * std::log(sigma) - power * s;
}

GpdFit fit_gpd(std::span<const double> y, double xi_max) {
  validate_sample(y);
  if (!(xi_max >= -1.0)) {
    throw std::invalid_argument("fit_gpd: xi_max must be >= -1, got " + format_number(xi_max));
  }
  const Profile profile(y);

  // Feasible λ interval: ξ(λ) ≥ -1 and ξ(λ) ≤ xi_max.
  double lo = kLambdaMin;
  if (profile.xi_at(lo) < -1.0) lo = solve_xi(profile, -1.0, kLambdaMin, 0.0);
  double hi = kLambdaMax;
  if (xi_max == 0.0) {
    hi = 0.0;  // ξ(λ) has the sign of λ
  } else if (xi_max < 0.0) {
    hi = solve_xi(profile, xi_max, lo, 0.0);
  } else if (std::isfinite(xi_max) && profile.xi_at(hi) > xi_max) {
    hi = solve_xi(profile, xi_max, 0.0, kLambdaMax);
  }

  // A coarse grid, geometric in |λ| on both sides of 0, finds the global maximum's basin;
  // Brent's method then polishes it between the neighbouring grid points.
  std::vector<double> grid;
  grid.push_back(lo);
  for (double k = 6.56; k >= -28.0; k -= 0.35) {
    const double lambda = -std::exp(k);
    if (lambda > lo && lambda < hi) grid.push_back(lambda);
  }
  if (lo < 0.0 && hi > 0.0) grid.push_back(0.0);
  for (double k = -28.0; k <= 3.3; k += 0.35) {
    const double lambda = std::exp(k);
    if (lambda > lo && lambda < hi) grid.push_back(lambda);
  }
  grid.push_back(hi);

  std::size_t best = 0;
  double best_ll = kNegInf;
  for (std::size_t i = 0; i < grid.size(); ++i) {
    const double ll = profile.at(grid[i]).loglik;
    if (ll > best_ll) {
      best_ll = ll;
      best = i;
    }
  }

  Profile::Point opt = profile.at(grid[best]);
  const double a = grid[best == 0 ? 0 : best - 1];
  const double b = grid[std::min(best + 1, grid.size() - 1)];
  if (b > a) {
    auto negative_loglik = [&](double lambda) {
      const double ll = profile.at(lambda).loglik;
      return std::isfinite(ll) ? -ll : std::numeric_limits<double>::max();
    };
    std::uintmax_t iterations = 200;
    const auto [lambda, value] = boost::math::tools::brent_find_minima(
        negative_loglik, a, b, std::numeric_limits<double>::digits / 2, iterations);
    const Profile::Point polished = profile.at(lambda);
    if (polished.loglik > opt.loglik) opt = polished;
  }

  GpdFit fit;
  fit.n = y.size();
  fit.xi = opt.xi;
  fit.sigma = opt.sigma;
  fit.log_likelihood = opt.loglik;
  fit.at_upper_bound = std::isfinite(xi_max) && opt.lambda >= hi;

  // With ξ pinned at -1 the likelihood is -n·ln σ over σ ≥ max y: the uniform on
  // [0, max y]. It beats every profile point with ξ(λ) < -1 that the interval excludes.
  const double boundary_ll = -profile.n() * std::log(profile.ymax());
  if (boundary_ll > fit.log_likelihood) {
    fit.xi = -1.0;
    fit.sigma = profile.ymax();
    fit.log_likelihood = boundary_ll;
    fit.at_lower_bound = true;
    fit.at_upper_bound = false;
  }
  if (fit.at_upper_bound) fit.xi = xi_max;  // remove bisection noise at an active bound
  return fit;
}

// Both in log1p/expm1 form: the power forms (1 + ξ y/σ)^(-1/ξ) and ((1 - p)^(-ξ) - 1)/ξ lose
// their digits to cancellation as ξ -> 0 or p -> 0; these keep them, and reach the exponential
// smoothly (ξ = 0 exactly is its own case only because of the division).
double gpd_survival(double y, double xi, double sigma) {
  if (!(sigma > 0.0)) throw std::invalid_argument("gpd_survival: sigma must be positive, got " + format_number(sigma));
  if (y < 0) return 1.0;
  if (xi == 0.0) return std::exp(-y / sigma);
  const double z = xi * (y / sigma);  // y/σ first, as SciPy scales: xi·y alone can underflow
  if (z <= -1.0) return 0.0;  // at or past a bounded tail's endpoint σ/|ξ|
  return std::exp(-std::log1p(z) / xi);
}

double gpd_quantile(double p, double xi, double sigma) {
  if (!(sigma > 0.0)) throw std::invalid_argument("gpd_quantile: sigma must be positive, got " + format_number(sigma));
  if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("gpd_quantile: p must lie in [0, 1), got " + format_number(p));
  if (p == 0.0) return 0.0;  // +0, as SciPy (not -0 from p = -0)
  const double log_tail = std::log1p(-p);  // ln(1 - p)
  if (xi == 0.0) return -sigma * log_tail;
  return sigma * std::expm1(-xi * log_tail) / xi;
}

double return_level(double u, double sigma, double xi, double zeta, double horizon) {
  const double m = horizon * zeta;
  if (!(m > 1.0)) {
    throw std::domain_error("return_level: the horizon does not reach the tail (T·zeta = " +
                            format_number(m) + " <= 1)");
  }
  if (!(sigma > 0.0)) {
    throw std::invalid_argument("return_level: sigma must be positive, got " +
                                format_number(sigma));
  }
  const double log_m = std::log(m);
  if (xi == 0.0) return u + sigma * log_m;
  // expm1 keeps the ξ → 0 limit σ·ln(Tζ) accurate.
  return u + sigma * std::expm1(xi * log_m) / xi;
}

}  // namespace kcert::stats
