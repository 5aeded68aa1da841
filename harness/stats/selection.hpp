#pragma once
// The selection-flip test of a selecting family (router top-k, argmax): how often each
// side's selected set differs from the fp64 oracle's, tested paired on the same decisions.
// A near tie (a margin the working precision cannot resolve) is not a flip: the engine
// accepts either side there (kernels::Family::selects). What remains is a decision the
// working precision could resolve and got wrong; the question is whether production gets
// more of them wrong than the reference does.
#include <cstdint>
#include <string>

#include "harness/stats/verdict.hpp"

namespace kcert::stats {

struct SelectionCounts {
  std::int64_t decisions = 0;                            // rows along the last dimension
  std::int64_t near_ties = 0;                            // decisions the oracle calls a near tie
  std::int64_t flips_prod = 0, flips_ref = 0;            // set differs from the (closer) oracle
  std::int64_t flips_prod_only = 0, flips_ref_only = 0;  // one side flipped and the other not

  SelectionCounts& operator+=(const SelectionCounts& o);
};

struct SelectionTest {
  SelectionCounts counts;
  // One-sided exact McNemar test: P(X >= flips_prod_only) for X ~ Binomial(n, 1/2),
  // n = flips_prod_only + flips_ref_only (under the null both sides flip alike, so each
  // discordant decision is production's with probability 1/2).
  double p_value = 1.0;
  double p_cut = 0.0;  // Φ(-z*): the same normal-equivalent level as one bias bucket's z*
  // The flip-rate ratio flips_prod / max(flips_ref, 1): an amplification factor like K,
  // judged against warn_K and fail_K.
  double ratio = 0.0;
  bool significant = false;  // p_value < p_cut
  Verdict verdict = Verdict::pass;
  std::string reason;
};

// Upper tail of Binomial(n, 1/2): P(X >= k). 1 for k <= 0.
double binomial_half_upper_tail(std::int64_t k, std::int64_t n);

// FAIL: significant and ratio >= fail_k; WARN: significant and ratio >= warn_k; else PASS.
SelectionTest test_selection_flips(const SelectionCounts& counts, double z_star, double warn_k, double fail_k);

}  // namespace kcert::stats
