#pragma once
// Generalized Pareto maximum likelihood (method.md §4) by Grimshaw's (1993) reduction of
// the two-parameter problem to a one-dimensional profile likelihood.
//
// Parametrization (the same sign convention as SciPy's genpareto `c`, and the notes):
//   F(y) = 1 - (1 + ξ y/σ)^(-1/ξ),  y ≥ 0, σ > 0;  ξ > 0 heavy tail, ξ = 0 exponential,
//   ξ < 0 bounded support y ≤ σ/|ξ|; ξ = -1 is the uniform distribution on [0, σ].
#include <cstddef>
#include <limits>
#include <span>

namespace kcert::stats {

struct GpdFit {
  double xi = 0.0;
  double sigma = 0.0;
  double log_likelihood = 0.0;
  bool at_lower_bound = false;  // ξ = -1 (constraint active: uniform on [0, max y])
  bool at_upper_bound = false;  // ξ = xi_max (constraint active, e.g. the ξ ≤ 0 clip)
  std::size_t n = 0;
};

// Log-likelihood of the sample under GPD(ξ, σ); -inf outside the support.
// Throws std::invalid_argument for σ ≤ 0 or a non-finite parameter.
double gpd_log_likelihood(std::span<const double> y, double xi, double sigma);

// Maximum likelihood over -1 ≤ ξ ≤ xi_max, σ > 0. With xi_max = 0 this is the constrained
// refit the variance gate uses (the notes' ξ ≤ 0 clip): it returns the exponential fit
// (σ = mean y) when the likelihood keeps rising towards positive ξ.
// Requires at least 2 finite values y ≥ 0 with max y > 0 (throws std::invalid_argument
// otherwise, naming the offending index).
GpdFit fit_gpd(std::span<const double> y,
               double xi_max = std::numeric_limits<double>::infinity());

// The survival function P(Y > y) = (1 + ξ y/σ)^(-1/ξ), exp(-y/σ) at ξ = 0: 1 for y < 0, and 0
// past a bounded tail's endpoint σ/|ξ| (SciPy: genpareto.sf(y, ξ, scale=σ)). Throws
// std::invalid_argument for σ ≤ 0.
double gpd_survival(double y, double xi, double sigma);

// The quantile: the y with P(Y ≤ y) = p, σ/ξ·((1 - p)^(-ξ) - 1), -σ·ln(1 - p) at ξ = 0
// (SciPy: genpareto.ppf). Throws std::invalid_argument for σ ≤ 0 or p outside [0, 1).
double gpd_quantile(double p, double xi, double sigma);

// Return level at horizon T for a tail above u with exceedance rate ζ: the value exceeded
// once in T replicates, r_T = u + σ/ξ·((Tζ)^ξ - 1) (ξ ≠ 0) or u + σ·ln(Tζ) (ξ = 0).
// Throws std::domain_error when Tζ ≤ 1 (the horizon does not reach the tail).
double return_level(double u, double sigma, double xi, double zeta, double horizon);

}  // namespace kcert::stats
