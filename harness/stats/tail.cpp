#include "harness/stats/tail.hpp"

#include "harness/stats/format.hpp"

#include <algorithm>
#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/fisher_f.hpp>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "harness/stats/random.hpp"
#include "harness/stats/return_level_bound.hpp"

namespace kcert::stats {

std::string_view to_string(BootstrapKind k) {
  return k == BootstrapKind::exceedances ? "exceedances" : "full";
}

std::string_view to_string(TailMode m) {
  switch (m) {
    case TailMode::infinite: return "infinite";
    case TailMode::trivially_aligned: return "trivially_aligned";
    case TailMode::thin_tail: return "thin_tail";
    case TailMode::fitted: return "fitted";
  }
  return "?";
}

void validate(const VarianceSettings& s) {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("variance settings: " + what);
  };
  if (!(s.tail_q > 0.0 && s.tail_q < 1.0)) fail("tail_q must lie in (0, 1), got " + format_number(s.tail_q));
  if (!(s.horizon > 1.0) || !std::isfinite(s.horizon)) fail("horizon must be a finite number > 1, got " + format_number(s.horizon));
  if (!(s.warn_k > 0.0) || !std::isfinite(s.warn_k)) fail("warn_k must be positive, got " + format_number(s.warn_k));
  if (!(s.fail_k >= s.warn_k) || !std::isfinite(s.fail_k)) fail("fail_k must be finite and >= warn_k, got " + format_number(s.fail_k));
  if (s.bootstrap < 0) fail("bootstrap must be >= 0, got " + std::to_string(s.bootstrap));
  if (s.min_replicates < 2) fail("min_replicates must be >= 2, got " + std::to_string(s.min_replicates));
  if (s.min_exceedances < 2) fail("min_exceedances must be >= 2, got " + std::to_string(s.min_exceedances));
  if (!(s.level > 0.5 && s.level < 1.0)) fail("level must lie in (0.5, 1), got " + format_number(s.level));
  if (!(s.profile_level >= s.level && s.profile_level < 1.0)) {
    fail("profile_level must lie in [level, 1), got " + format_number(s.profile_level));
  }
  if (!(s.heavy_tail_level > 0.5 && s.heavy_tail_level < 1.0)) {
    fail("heavy_tail_level must lie in (0.5, 1), got " + format_number(s.heavy_tail_level));
  }
  if (!(s.heavy_tail_xi_max > 0.0 && s.heavy_tail_xi_max <= 2.0)) {
    fail("heavy_tail_xi_max must lie in (0, 2], got " + format_number(s.heavy_tail_xi_max));
  }
}

ThinTailBound thin_tail_bound(std::span<const double> excesses, double u, double max_khat, std::size_t replicates,
                              double level, double horizon) {
  if (excesses.empty() || replicates < excesses.size()) {
    throw std::invalid_argument("thin_tail_bound: needs 1 to R exceedances, got " + std::to_string(excesses.size()) +
                                " of R = " + std::to_string(replicates));
  }
  ThinTailBound b;
  b.u = u;
  b.exceedances = excesses.size();
  double sum = 0.0;
  for (double y : excesses) sum += y;
  const double n = static_cast<double>(b.exceedances);
  b.mean_excess = sum / n;
  // Bonferroni: half of α on the scale, half on the rate.
  const double half_alpha = (1.0 - level) / 2.0;
  const boost::math::chi_squared_distribution<double> scale_chi2(2.0 * n), rate_chi2(2.0 * n + 2.0);
  b.sigma_upper = 2.0 * sum / boost::math::quantile(scale_chi2, half_alpha);
  b.zeta_upper = std::min(1.0, boost::math::quantile(rate_chi2, 1.0 - half_alpha) / 2.0 / static_cast<double>(replicates));
  const double events_at_horizon = horizon * b.zeta_upper;
  b.U = events_at_horizon > 1.0 ? std::max(max_khat, u + b.sigma_upper * std::log(events_at_horizon)) : max_khat;
  return b;
}

std::optional<EndpointEvidence> endpoint_test(std::span<const double> ascending, double level) {
  const std::size_t n = ascending.size();
  std::size_t tried = 0;
  for (const std::size_t m : kEndpointSplits) tried += 2 * m + 1 <= n;
  if (tried == 0) return std::nullopt;
  const double alpha = (1.0 - level) / static_cast<double>(tried);
  // X_(j) is the j-th largest: ascending[n - j].
  auto normalized_spacing = [&](std::size_t j) {
    return static_cast<double>(j) * (ascending[n - j] - ascending[n - j - 1]);
  };
  for (const std::size_t m : kEndpointSplits) {
    if (2 * m + 1 > n) break;
    double top = 0.0, below = 0.0;
    for (std::size_t j = 1; j <= m; ++j) top += normalized_spacing(j);
    for (std::size_t j = m + 1; j <= 2 * m; ++j) below += normalized_spacing(j);
    if (!(below > 0.0)) continue;
    const double df = 2.0 * static_cast<double>(m);
    const double cut = boost::math::quantile(boost::math::fisher_f_distribution<double>(df, df), alpha);
    const double ratio = top / below;
    if (ratio < cut) return EndpointEvidence{2 * m, ratio, cut, 1.0 - alpha};
  }
  return std::nullopt;
}

std::size_t tied_at_maximum(std::span<const double> ascending) {
  std::size_t tied = 0;
  for (auto it = ascending.rbegin(); it != ascending.rend() && *it == ascending.back(); ++it) ++tied;
  return tied;
}

double quantile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("quantile_sorted: empty sample");
  if (!(q >= 0.0 && q <= 1.0)) {
    throw std::invalid_argument("quantile_sorted: q must lie in [0, 1], got " + format_number(q));
  }
  const double h = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  const double frac = h - static_cast<double>(lo);
  if (frac == 0.0) return sorted[lo];
  // Infinities stay out of the arithmetic: inf - inf would be NaN.
  if (std::isinf(sorted[lo + 1])) return sorted[lo + 1];
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

Verdict threshold_verdict(double U, double warn_k, double fail_k) {
  if (U <= warn_k) return Verdict::pass;
  if (U <= fail_k) return Verdict::warn;
  return Verdict::fail;
}

namespace {

struct Peaks {
  double u = 0.0;
  std::vector<double> exceedances;
  double zeta = 0.0;
};

// Threshold and exceedances of a sorted K̂ sample (zeros included in R).
Peaks peaks_over_threshold(std::span<const double> sorted, double tail_q) {
  Peaks p;
  const auto first_positive = std::upper_bound(sorted.begin(), sorted.end(), 0.0);
  const std::span<const double> positive(first_positive, sorted.end());
  if (positive.empty()) return p;
  p.u = quantile_sorted(positive, tail_q);
  for (auto it = std::upper_bound(positive.begin(), positive.end(), p.u); it != positive.end(); ++it) {
    p.exceedances.push_back(*it - p.u);
  }
  p.zeta = static_cast<double>(p.exceedances.size()) / static_cast<double>(sorted.size());
  return p;
}

// The clipped fit's return level, or nullopt when the fit cannot be made (a resample of
// identical values, say) or the horizon does not reach the tail.
std::optional<double> clipped_return_level(const Peaks& p, double horizon) {
  try {
    const GpdFit fit = fit_gpd(p.exceedances, 0.0);
    return return_level(p.u, fit.sigma, fit.xi, p.zeta, horizon);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// χ²₁ quantile of the one-sided LR test at `level` (the ½χ²₀ + ½χ²₁ null of a boundary).
double one_sided_lr_cut(double level) {
  const boost::math::chi_squared_distribution<double> chi2(1.0);
  return boost::math::quantile(chi2, 2.0 * level - 1.0);
}

// ℓ of the exponential fit (ξ = 0, σ = mean y): the null of the bounded-tail evidence test.
double exponential_log_likelihood(std::span<const double> y) {
  double sum = 0.0;
  for (double v : y) sum += v;
  const double n = static_cast<double>(y.size());
  return -n * std::log(sum / n) - n;
}

// Higher thresholds tried for bounded-tail evidence after a heavy-tail rejection, in order.
constexpr double kHigherTailQ[] = {0.95, 0.98, 0.99};

double sample_sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  double mean = 0.0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

}  // namespace

TailAnalysis analyze_tail(std::span<const double> k_hat, const VarianceSettings& settings) {
  validate(settings);
  if (k_hat.empty()) throw std::invalid_argument("analyze_tail: the K-hat sample is empty");
  for (std::size_t i = 0; i < k_hat.size(); ++i) {
    if (std::isnan(k_hat[i]) || k_hat[i] < 0.0) {
      throw std::invalid_argument("analyze_tail: K-hat[" + std::to_string(i) +
                                  "] must be >= 0 or +inf, got " + format_number(k_hat[i]));
    }
  }
  TailAnalysis a;
  a.settings = settings;
  std::vector<double> sorted(k_hat.begin(), k_hat.end());
  std::sort(sorted.begin(), sorted.end());

  auto& s = a.khat;
  s.count = sorted.size();
  s.zeros = static_cast<std::size_t>(std::upper_bound(sorted.begin(), sorted.end(), 0.0) - sorted.begin());
  s.infinite = static_cast<std::size_t>(sorted.end() - std::lower_bound(sorted.begin(), sorted.end(), std::numeric_limits<double>::infinity()));
  s.zero_fraction = static_cast<double>(s.zeros) / static_cast<double>(s.count);
  s.q50 = quantile_sorted(sorted, 0.50);
  s.q90 = quantile_sorted(sorted, 0.90);
  s.q99 = quantile_sorted(sorted, 0.99);
  s.max = sorted.back();

  const double warn = settings.warn_k, fail = settings.fail_k;
  if (s.infinite > 0) {
    a.mode = TailMode::infinite;
    a.U = std::numeric_limits<double>::infinity();
    a.verdict = Verdict::fail;
    a.reason = std::to_string(s.infinite) +
               " replicate(s) with E_ref = 0 but E_prod beyond one ULP (K-hat = +inf)";
    return a;
  }
  if (s.zeros == s.count) {
    a.mode = TailMode::trivially_aligned;
    a.verdict = Verdict::pass;
    a.reason = "trivially aligned: production within one ULP of the oracle, or bit-identical to the reference, in every replicate";
    return a;
  }

  Peaks peaks = peaks_over_threshold(sorted, settings.tail_q);
  a.u = peaks.u;
  a.n_exc = peaks.exceedances.size();
  a.zeta = peaks.zeta;
  if (a.n_exc < settings.min_exceedances) {
    a.mode = TailMode::thin_tail;
    if (peaks.exceedances.empty()) {
      // Every positive K̂ at u (one positive, or ties on a lattice): they are the exceedances of 0.
      peaks.u = 0.0;
      for (auto it = std::upper_bound(sorted.begin(), sorted.end(), 0.0); it != sorted.end(); ++it) {
        peaks.exceedances.push_back(*it);
      }
    }
    a.thin = thin_tail_bound(peaks.exceedances, peaks.u, s.max, s.count, settings.level, settings.horizon);
    a.U = a.thin->U;
    a.lower = s.max;
    // The maximum decides WARN and FAIL: with a few exceedances the χ² factor alone puts U past
    // any threshold, so a bound past warn_K shows only that r_T ≤ warn_K is not shown at T. The
    // stop rule grows while [max K̂, U] straddles a threshold; a PASS whose bound still passes
    // warn_K (R_max reached) is a PASS short of the horizon: the bound shows r ≤ warn_K up to
    // the horizon T' where u + σ_U·ln(T'·ζ_U) = warn_K, and the evidence says so.
    a.verdict = threshold_verdict(s.max, warn, fail);
    const bool short_of_t = a.verdict == Verdict::pass && a.U > warn;
    a.thin->supported_horizon =
        short_of_t ? std::exp((warn - a.thin->u) / a.thin->sigma_upper) / a.thin->zeta_upper : settings.horizon;
    a.thin->unseen_event_horizon = static_cast<double>(s.count) / 3.0;
    // What the evidence of a thin PASS reaches: the bound's T', and no further than R/3.
    const bool unseen_short = a.verdict == Verdict::pass && a.thin->unseen_event_horizon < std::min(a.thin->supported_horizon, settings.horizon);
    a.reason = "thin tail: " + std::to_string(a.n_exc) + " exceedance(s) < " + std::to_string(settings.min_exceedances) +
               ", U = " + format_number(a.U) + " (one-sided " + format_number(settings.level) +
               " exponential bound at T over " + std::to_string(a.thin->exceedances) + " exceedance(s) of " +
               format_number(a.thin->u) + ", mean excess " + format_number(a.thin->mean_excess) +
               "; max K-hat = " + format_number(s.max) + ") against warn " +
               format_number(warn) + " / fail " + format_number(fail) +
               (unseen_short ? "; PASS short of the horizon: with " + std::to_string(a.n_exc) +
                                   " exceedance(s) the tail is not seen, and an event rarer than 3/R per replicate would not "
                                   "have shown in R = " + std::to_string(s.count) + " replicates: shown up to R/3 = " +
                                   format_number(a.thin->unseen_event_horizon) + " of T = " + format_number(settings.horizon) +
                                   " (rule of three" +
                                   (short_of_t ? "; the bound alone shows r <= warn up to T' = " + format_number(a.thin->supported_horizon)
                                               : std::string()) +
                                   ")"
                : short_of_t ? "; PASS short of the horizon: r <= warn shown up to T' = " +
                                   format_number(a.thin->supported_horizon) + " of T = " + format_number(settings.horizon)
                             : "");
    // Issue 52: the bound above holds only for ξ <= 0, which no test has checked here. Growing
    // until a fit can test it was tried and taken back (docs/statistics.md): a thin verdict below
    // FAIL says so instead, with the R a fit would need at the rate the exceedances came.
    if (a.verdict != Verdict::fail) {
      const double per_replicate = (1.0 - settings.tail_q) * static_cast<double>(s.count - s.zeros) / static_cast<double>(s.count);
      const double need = static_cast<double>(settings.min_exceedances) / std::max(per_replicate, 1e-300);
      a.reason += "; the tail's heaviness is untested: " + std::to_string(a.n_exc) + " exceedance(s) < " +
                  std::to_string(settings.min_exceedances) + ", and the bound assumes xi <= 0 (a fit and its heavy-tail test need about R = " +
                  format_number(std::ceil(need)) + ")";
    }
    return a;
  }

  a.free_fit = fit_gpd(peaks.exceedances);
  a.clipped_fit = fit_gpd(peaks.exceedances, 0.0);
  a.mode = TailMode::fitted;
  a.tail_q = settings.tail_q;
  auto& h = a.heavy;
  h.tested = true;
  h.xi_free = a.free_fit->xi;
  h.lr = h.xi_free > 0.0 ? std::max(0.0, 2.0 * (a.free_fit->log_likelihood - a.clipped_fit->log_likelihood)) : 0.0;
  h.cut = one_sided_lr_cut(settings.heavy_tail_level);
  h.rejected = h.lr > h.cut;
  if (h.rejected) {
    // Bounded-tail evidence above a higher threshold, each look at level α/3 (Bonferroni
    // over the three thresholds), so a true heavy tail is resolved here with probability ≤ α
    // (and by the endpoint test below with ≤ α more).
    const double look_cut = one_sided_lr_cut(1.0 - (1.0 - settings.heavy_tail_level) / std::size(kHigherTailQ));
    for (const double q : kHigherTailQ) {
      Peaks higher = peaks_over_threshold(sorted, q);
      if (higher.exceedances.size() < settings.min_exceedances) break;
      const GpdFit f = fit_gpd(higher.exceedances);
      const double lr = f.xi < 0.0 ? std::max(0.0, 2.0 * (f.log_likelihood - exponential_log_likelihood(higher.exceedances))) : 0.0;
      if (lr > look_cut) {
        h.bounded_q = q;
        h.bounded_xi = f.xi;
        h.bounded_lr = lr;
        h.bounded_cut = look_cut;
        peaks = std::move(higher);
        a.tail_q = q;
        a.u = peaks.u;
        a.n_exc = peaks.exceedances.size();
        a.zeta = peaks.zeta;
        a.free_fit = f;
        a.clipped_fit = fit_gpd(peaks.exceedances, 0.0);
        break;
      }
    }
  }
  // ξ̂ = -1 ("uniform up to the largest exceedance"): the profile handles the boundary; the
  // maximum is a floor under U (r_T at a horizon past R cannot lie below the sample maximum
  // by much, and a bound below it would be read as one).
  a.boundary_fit = a.clipped_fit->at_lower_bound;
  const auto clipped = profile_return_level(peaks.exceedances, a.u, a.zeta, settings.horizon, settings.profile_level, 0.0);
  h.U_clipped = a.boundary_fit ? std::max(clipped.upper, s.max) : clipped.upper;
  // No higher threshold showed a bounded tail (often for want of exceedances: a capped K̂ whose
  // two scales need ~50 over q0.99): the top order statistics may still show the endpoint (a
  // cluster at the cap, or ties at it), at the same level (issue 54).
  if (h.rejected && !h.bounded_q) h.endpoint = endpoint_test(peaks.exceedances, settings.heavy_tail_level);
  // An atom at the top (issue 54): several replicates at exactly the largest K̂, which a
  // continuous tail never gives, as at a cap reached (K̂ = 1 is one built into K̂: a production
  // one ULP further from the oracle than the reference at the worst element), and a fit over
  // ξ ≤ 0 that reads past it extrapolates a tail no replicate showed. The atom itself is the
  // evidence (the endpoint test would only restate it: a block of 3-48 ties makes its statistic
  // 0; past 48 ties it leaves no split to read). On a continuous law (every GPD) this never
  // applies; what lies past the atom at a rate under 3/R is not excluded (short of the horizon).
  // What the maximum shows, and whether it is a floor under r_T at this R (R < T/20).
  const Verdict max_verdict = threshold_verdict(s.max, warn, fail);
  const bool max_is_floor = maximum_is_a_floor(s.count, settings.horizon);
  h.tied_at_maximum = tied_at_maximum(peaks.exceedances);
  h.atom = !h.rejected && h.tied_at_maximum >= kAtomTies && max_is_floor &&
           threshold_verdict(h.U_clipped, warn, fail) > max_verdict;
  const bool heavy_unresolved = h.unresolved();
  // The bound without the clip says what the ξ ≤ 0 assumption is worth here, on every fit: the
  // LR test has little power from 50-400 exceedances (GPD(+0.1): flagged in 4-40 % of runs), and
  // a GPD(+0.1) sample's ξ̂ often lands at or below 0 while its profile still reaches ξ > 0
  // (issue 52: with the caveat given only where ξ̂ > 0, GPD(+0.1) verdicts were lenient with no
  // word of it in 7-23 % of runs). A verdict the bound over ξ up to 1 reads stricter carries the
  // caveat in its reason; where the profile's ξ range stays below 0 the two bounds are one.
  const auto unclipped = profile_return_level(peaks.exceedances, a.u, a.zeta, settings.horizon, settings.profile_level,
                                              settings.heavy_tail_xi_max);
  h.U_unclipped = unclipped.upper;
  // Only where the test did not reject (a rejection resolved above a higher threshold has its own
  // words), and only a reading stricter than the verdict the clipped bound and the maximum give
  // together (on a ξ = -1 boundary fit U_clipped is at least max K̂, which the unclipped profile
  // alone may lie under; a maximum past a threshold decides whatever the model).
  const Verdict clipped_verdict = worst(threshold_verdict(h.U_clipped, warn, fail), max_is_floor ? max_verdict : Verdict::pass);
  h.model_matters = !h.rejected && !a.maximum_decides() && threshold_verdict(*h.U_unclipped, warn, fail) > clipped_verdict;
  const auto& bound = heavy_unresolved ? unclipped : clipped;
  a.r_t = bound.estimate;
  a.lower = bound.lower;

  std::vector<double> levels;
  levels.reserve(static_cast<std::size_t>(settings.bootstrap));
  Peaks resample;
  for (int b = 0; b < settings.bootstrap; ++b) {
    // Each resample has its own stream, so the result does not depend on the order in
    // which resamples are computed.
    SplitMix64 rng(derive_seed(settings.seed, static_cast<std::uint64_t>(b)));
    std::optional<double> level;
    if (settings.bootstrap_kind == BootstrapKind::exceedances) {
      resample.u = peaks.u;
      resample.zeta = peaks.zeta;
      resample.exceedances.resize(peaks.exceedances.size());
      for (double& y : resample.exceedances) y = peaks.exceedances[rng.below(peaks.exceedances.size())];
      level = clipped_return_level(resample, settings.horizon);
    } else {
      std::vector<double> all(sorted.size());
      for (double& k : all) k = sorted[rng.below(sorted.size())];
      std::sort(all.begin(), all.end());
      resample = peaks_over_threshold(all, settings.tail_q);
      if (resample.exceedances.size() >= settings.min_exceedances) {
        level = clipped_return_level(resample, settings.horizon);
      }
    }
    if (level) levels.push_back(*level);
  }
  a.bootstrap_used = levels.size();
  a.se = sample_sd(levels);
  a.U = heavy_unresolved ? *h.U_unclipped : h.U_clipped;
  // A tail read as heavy at u but closing on an endpoint at the top: the bound at T rests on a
  // model the rejection put in doubt, so, as on the thin route, the maximum decides WARN and FAIL,
  // and a verdict below FAIL is short of the horizon (evidence: R/3).
  // From R = T/20 on the maximum is no floor (maximum_is_a_floor): the bound decides, as on any fit.
  a.verdict = a.maximum_decides() ? max_verdict : threshold_verdict(a.U, warn, fail);
  a.reason = "GPD tail (" + std::to_string(a.n_exc) + " exceedances" +
             (h.bounded_q ? " over the q" + format_number(*h.bounded_q) + " threshold" : std::string()) +
             "): r_T = " + format_number(a.r_t) + ", U = " + format_number(a.U) + " (one-sided " +
             format_number(settings.level) + " profile-likelihood bound" +
             (heavy_unresolved ? ", xi up to " + format_number(settings.heavy_tail_xi_max) : std::string()) +
             (a.boundary_fit ? ", fit on the xi = -1 boundary, at least max K-hat" : std::string()) + ") against warn " +
             format_number(warn) + " / fail " + format_number(fail);
  if (heavy_unresolved) {
    a.verdict = worst(a.verdict, Verdict::warn);
    a.reason += "; heavy tail: free xi-hat = " + format_number(h.xi_free) + ", LR = " + format_number(h.lr) + " > " +
                format_number(h.cut) + " (one-sided test of xi <= 0 at " + format_number(settings.heavy_tail_level) +
                "), the bounded-tail model does not hold and no higher threshold shows a bounded tail";
  } else if (h.endpoint || h.atom) {
    const bool by_maximum = a.maximum_decides();
    if (h.endpoint) {
      const auto& e = *h.endpoint;
      a.reason += "; heavy-looking tail at q" + format_number(settings.tail_q) + " (free xi-hat = " + format_number(h.xi_free) +
                  ", LR = " + format_number(h.lr) + " > " + format_number(h.cut) + ") but its top closes on an endpoint (spacing ratio " +
                  format_number(e.ratio) + " < " + format_number(e.cut) + " over the largest " + std::to_string(e.top + 1) +
                  " exceedances, level " + format_number(e.level) + ")";
    } else {
      a.reason += "; the bound reads past max K-hat, but the maximum is an atom (" + std::to_string(h.tied_at_maximum) +
                  " replicates at exactly " + format_number(s.max) + ", no replicate past it: a cap reached in R replicates)";
    }
    a.reason += by_maximum ? ": max K-hat = " + format_number(s.max) + " decides" : ": the bound over xi <= 0 decides (R >= T/20)";
    // Below FAIL the maximum shows only what R replicates saw: the bound over ξ ≤ 0 rests on the
    // model the rejection (or the atom) put in doubt, so it cannot carry the verdict to T (a heavy
    // tail the endpoint test misreads, at its α, would otherwise PASS with evidence claiming T).
    if (by_maximum && a.verdict != Verdict::fail) {
      a.reason += "; " + std::string(to_string(a.verdict)) + " short of the horizon: read from the maximum, and an excess rarer than 3/R "
                  "per replicate would not have shown in R = " + std::to_string(s.count) + " replicates: shown up to R/3 = " +
                  format_number(static_cast<double>(s.count) / 3.0) + " of T = " + format_number(settings.horizon) + " (rule of three)";
    }
  } else if (h.model_matters) {
    // A caveat, not a verdict: from 50-400 exceedances ξ = 0 and ξ = +0.1 are not told apart
    // (docs/statistics.md), and the unclipped bound reads stricter on 41-98 % of the
    // exponential tails' PASSes (kcert-study variance-gate, default grid).
    a.reason += "; bounded-tail assumption not shown by the data: free xi-hat = " + format_number(h.xi_free) +
                (h.xi_free > 0.0 ? " > 0 (LR = " + format_number(h.lr) + " <= " + format_number(h.cut) + ")"
                                 : std::string(" <= 0, but the profile does not exclude xi > 0")) +
                ", and U over xi up to " + format_number(settings.heavy_tail_xi_max) + " is " + format_number(*h.U_unclipped) +
                " (" + std::string(to_string(threshold_verdict(*h.U_unclipped, warn, fail))) + ")";
  } else if (h.rejected) {
    a.reason += "; heavy-looking tail at q" + format_number(settings.tail_q) + " (free xi-hat = " + format_number(h.xi_free) +
                ", LR = " + format_number(h.lr) + " > " + format_number(h.cut) + ") but bounded above q" +
                format_number(*h.bounded_q) + " (xi-hat = " + format_number(h.bounded_xi) + ", LR = " +
                format_number(h.bounded_lr) + " > " + format_number(h.bounded_cut) + "): fitted there";
  }
  // A K̂ past a threshold is an amplification observed, not extrapolated: as on the thin route,
  // the maximum decides WARN and FAIL where the bound reads lower. A fit can put U below the
  // sample's own maximum (one replicate of a rare defect among thousands of a light tail: K̂ =
  // 50 read WARN in 54 % of such runs, issue 54), while R is small enough for that to hold.
  if (max_is_floor && max_verdict > a.verdict) {
    a.verdict = max_verdict;
    a.reason += "; max K-hat = " + format_number(s.max) + " is past " + (max_verdict == Verdict::fail ? "fail" : "warn") +
                ": an amplification observed in a replicate, which the maximum decides";
  }
  return a;
}

}  // namespace kcert::stats
