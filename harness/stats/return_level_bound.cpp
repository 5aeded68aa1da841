#include "harness/stats/return_level_bound.hpp"
#include "harness/stats/format.hpp"

#include <algorithm>
#include <boost/math/distributions/chi_squared.hpp>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/stats/gpd.hpp"

namespace kcert::stats {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

class ProfileInReturnLevel {
 public:
  ProfileInReturnLevel(std::span<const double> y, double log_lambda, double xi_max)
      : y_(y.begin(), y.end()), log_lambda_(log_lambda), xi_max_(xi_max) {
    ymax_ = *std::max_element(y_.begin(), y_.end());
    for (double v : y_) sum_ += v;
  }

  // ℓ(ξ, σ) with σ tied to the return level by d = r_T - u.
  double loglik(double xi, double d) const {
    const double n = static_cast<double>(y_.size());
    if (std::fabs(xi) < 1e-9) {
      const double sigma = d / log_lambda_;
      return -n * std::log(sigma) - sum_ / sigma;
    }
    const double sigma = d * xi / std::expm1(xi * log_lambda_);
    if (!(sigma > 0.0)) return kNegInf;
    const double theta = xi / sigma;
    if (xi <= -1.0) return ymax_ <= sigma ? -n * std::log(sigma) : kNegInf;  // uniform on [0, σ]
    if (1.0 + theta * ymax_ <= 0.0) return kNegInf;                         // y beyond the support
    double s = 0.0;
    for (double v : y_) s += std::log1p(theta * v);
    return -n * std::log(sigma) - (1.0 + 1.0 / xi) * s;
  }

  // max over ξ in [-1, ξ_max]: a grid, then golden-section search around its best point.
  double profile(double d) const {
    constexpr int kGrid = 24;
    const double lo = -1.0, hi = xi_max_;
    const double step = (hi - lo) / kGrid;
    int best = 0;
    double best_ll = kNegInf;
    for (int i = 0; i <= kGrid; ++i) {
      const double ll = loglik(lo + step * i, d);
      if (ll > best_ll) {
        best_ll = ll;
        best = i;
      }
    }
    if (best_ll == kNegInf) return kNegInf;
    double a = std::max(lo, lo + step * (best - 1)), b = std::min(hi, lo + step * (best + 1));
    const double g = 0.5 * (std::sqrt(5.0) - 1.0);
    double c = b - g * (b - a), e = a + g * (b - a);
    double fc = loglik(c, d), fe = loglik(e, d);
    for (int it = 0; it < 40 && b - a > 1e-7; ++it) {
      if (fc >= fe) {
        b = e, e = c, fe = fc;
        c = b - g * (b - a), fc = loglik(c, d);
      } else {
        a = c, c = e, fc = fe;
        e = a + g * (b - a), fe = loglik(e, d);
      }
    }
    return std::max({best_ll, fc, fe});
  }

 private:
  std::vector<double> y_;
  double log_lambda_, xi_max_, ymax_ = 0.0, sum_ = 0.0;
};

// The d where profile(d) crosses `target`, between d_in (inside: profile ≥ target) and d_out.
template <class Profile>
double crossing(const Profile& p, double d_in, double d_out, double target) {
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (d_in + d_out);
    (p.profile(mid) >= target ? d_in : d_out) = mid;
    if (std::fabs(d_out - d_in) <= 1e-9 * std::fabs(d_in)) break;
  }
  return d_in;
}

}  // namespace

ReturnLevelInterval profile_return_level(std::span<const double> y, double u, double zeta, double horizon, double level,
                                         double xi_max) {
  if (!(level > 0.5 && level < 1.0)) {
    throw std::invalid_argument("profile_return_level: level must lie in (0.5, 1), got " + format_number(level));
  }
  if (!(xi_max >= -1.0)) throw std::invalid_argument("profile_return_level: xi_max must be >= -1");
  const GpdFit fit = fit_gpd(y, xi_max);
  ReturnLevelInterval out;
  out.estimate = return_level(u, fit.sigma, fit.xi, zeta, horizon);  // throws when Tζ <= 1
  out.xi_hat = fit.xi;
  out.at_lower_bound = fit.at_lower_bound;
  const ProfileInReturnLevel p(y, std::log(horizon * zeta), xi_max);
  const double d_hat = out.estimate - u;
  const double l_hat = std::max(fit.log_likelihood, p.profile(d_hat));
  // One-sided level: the two-sided χ²₁ interval at 1 - 2α has α in each tail.
  const boost::math::chi_squared_distribution<double> chi2(1.0);
  const double target = l_hat - 0.5 * boost::math::quantile(chi2, 2.0 * level - 1.0);

  double d_out = 2.0 * d_hat;
  int doublings = 0;
  while (p.profile(d_out) >= target && doublings < 60) d_out *= 2.0, ++doublings;
  out.upper = doublings == 60 ? std::numeric_limits<double>::infinity() : u + crossing(p, d_hat, d_out, target);
  // Below r̂ the profile may never fall to the target before d reaches 0 (r_T = u).
  const double d_low = 1e-12 * d_hat;
  out.lower = p.profile(d_low) >= target ? u : u + crossing(p, d_hat, d_low, target);
  return out;
}

}  // namespace kcert::stats
