#pragma once
// A confidence bound for the return level r_T that covers at its stated level (method.md
// §4, revised): the profile likelihood of r_T. The GPD is reparametrized by (r_T, ξ):
//   σ(ξ; r_T) = (r_T - u)·ξ / ((Tζ)^ξ - 1)   (ξ ≠ 0),   (r_T - u) / ln(Tζ)   (ξ = 0),
// the profile ℓ_p(r) = max over ξ in [-1, ξ_max] of ℓ(ξ, σ(ξ; r)), and the one-sided bound at
// level 1 - α is the largest r with 2·(ℓ̂ - ℓ_p(r)) ≤ χ²₁(1 - 2α) (the smallest, for the lower
// bound). docs/statistics.md gives the coverage measured on GPD tails with known r_T.
#include <cstddef>
#include <span>

namespace kcert::stats {

struct ReturnLevelInterval {
  double estimate = 0.0;  // r̂_T at the constrained MLE
  double lower = 0.0;     // one-sided lower bound at `level` (never below u)
  double upper = 0.0;     // one-sided upper bound at `level`; +inf when the profile never drops enough
  double xi_hat = 0.0;    // the constrained MLE of ξ
  bool at_lower_bound = false;  // ξ̂ = -1: the fit sits on the boundary (uniform tail)
};

// y: exceedances over u (at least 2, max > 0); zeta: exceedance rate; horizon: T (Tζ > 1);
// level: one-sided confidence, e.g. 0.99; xi_max: the shape's upper constraint (0: the
// method's ξ ≤ 0 clip). Throws std::invalid_argument / std::domain_error like fit_gpd and
// return_level.
ReturnLevelInterval profile_return_level(std::span<const double> y, double u, double zeta, double horizon, double level,
                                         double xi_max = 0.0);

}  // namespace kcert::stats
