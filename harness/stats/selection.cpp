#include "harness/stats/selection.hpp"

#include "harness/stats/format.hpp"

#include <algorithm>
#include <boost/math/special_functions/beta.hpp>
#include <cmath>
#include <stdexcept>

namespace kcert::stats {

SelectionCounts& SelectionCounts::operator+=(const SelectionCounts& o) {
  decisions += o.decisions;
  near_ties += o.near_ties;
  flips_prod += o.flips_prod;
  flips_ref += o.flips_ref;
  flips_prod_only += o.flips_prod_only;
  flips_ref_only += o.flips_ref_only;
  return *this;
}

double binomial_half_upper_tail(std::int64_t k, std::int64_t n) {
  if (n < 0 || k > n) throw std::invalid_argument("binomial_half_upper_tail: need 0 <= k <= n");
  if (k <= 0) return 1.0;
  // P(X >= k) = I_{1/2}(k, n - k + 1), the regularized incomplete beta function.
  return boost::math::ibeta(static_cast<double>(k), static_cast<double>(n - k + 1), 0.5);
}

SelectionTest test_selection_flips(const SelectionCounts& counts, double z_star, double warn_k, double fail_k) {
  SelectionTest t;
  t.counts = counts;
  t.p_cut = 0.5 * std::erfc(z_star / std::sqrt(2.0));
  t.p_value = binomial_half_upper_tail(counts.flips_prod_only, counts.flips_prod_only + counts.flips_ref_only);
  t.ratio = static_cast<double>(counts.flips_prod) / static_cast<double>(std::max<std::int64_t>(counts.flips_ref, 1));
  t.significant = t.p_value < t.p_cut;
  t.verdict = !t.significant        ? Verdict::pass
              : t.ratio >= fail_k   ? Verdict::fail
              : t.ratio >= warn_k   ? Verdict::warn
                                    : Verdict::pass;
  t.reason = "selection flips: production " + std::to_string(counts.flips_prod) + ", reference " +
             std::to_string(counts.flips_ref) + " of " + std::to_string(counts.decisions) + " decisions (" +
             std::to_string(counts.near_ties) + " near ties accepted either way); ratio " + format_number(t.ratio) +
             ", one-sided p " + format_number(t.p_value) + (t.significant ? " < " : " >= ") + format_number(t.p_cut);
  return t;
}

}  // namespace kcert::stats
