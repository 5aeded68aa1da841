#pragma once
// What each gate concludes, as plain values (no LibTorch): the engine fills them, the
// sinks (console, JSON, PostgreSQL) read them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/gates/observation.hpp"
#include "harness/stats/bias.hpp"
#include "harness/stats/stopping.hpp"
#include "harness/stats/selection.hpp"
#include "harness/stats/tail.hpp"
#include "harness/stats/verdict.hpp"

namespace kcert::gates {

using stats::Verdict;

struct AlgebraResult {
  Verdict verdict = Verdict::pass;
  // false: the production has no exact mode (an opaque kernel), so the gate did not run; its
  // verdict stays PASS (it neither detects nor clears anything) and `reason` says why.
  bool applicable = true;
  int replicates = 0;
  double tolerance = 1e-9;
  double worst_discrepancy = 0.0;  // max_r d_r, relative to max |ref|
  Location worst;
  std::string reason;
};

struct BucketReport {
  std::int64_t bucket = 0;
  int direction = 0;
  double z = 0, effect = 0, ulp_effect = 0;
  double mean = 0, sd = 0;  // of the statistic over replicates
  double scale = 0;         // mean |oracle| in the bucket
  double ulp = 0;           // the ULP the floor uses: W's at max(scale, ULP of the output's scale)
  Verdict verdict = Verdict::pass;
  // Each side's own bias against the fp64 oracle in this bucket (bias attribution, issue 30):
  // the same statistic, floors and cut as the difference. Absent (has_sides false) when the
  // observations carried no side errors.
  struct SideBias {
    double mean = 0, z = 0, ulp_effect = 0;
    Verdict verdict = Verdict::pass;
  };
  bool has_sides = false;
  SideBias ref_error, prod_error;
  // A FAIL on prod - ref turned WARN: the reference is biased against the oracle and the
  // production is closer to exact (stats::attribute_bucket).
  bool attributed = false;
};

struct BiasStatisticResult {
  stats::BiasStatistic statistic = stats::BiasStatistic::signed_difference;
  bool deciding = false;
  Verdict verdict = Verdict::pass;
  std::int64_t fail_buckets = 0;
  std::int64_t warn_buckets = 0;
  // Of the WARN buckets, those that FAIL on prod - ref but are attributed to the reference.
  std::int64_t attributed_buckets = 0;
  double max_abs_z = 0.0;
  double max_ulp_effect = 0.0;
  std::vector<BucketReport> flagged;  // FAIL and WARN buckets by |z|, at most 64
  std::vector<BucketReport> top;      // the 5 buckets with the largest |z|
  // (standardized effect, ULP effect) of the significant buckets (|z| > z_cut) that no other
  // significant bucket exceeds in both: under floors (s_min, c) the statistic FAILs iff
  // some point exceeds both, so the floors can be re-chosen from stored results
  // (docs/bias-floors.md) without re-running kernels. Largest effect first. Attributed
  // buckets are left out: they do not FAIL under any floors (an approximation: a lower floor
  // could make the production's own bias FAIL and undo an attribution; docs/bias-floors.md).
  std::vector<std::pair<double, double>> frontier;
  // Equivalence (TOST, stats::equivalence_bucket): every bucket's (1 - 2a) interval inside
  // ±c ULP (c: this statistic's floor), a = Φ(-z*). `widest_ulp` is the largest |bound| of
  // any bucket's interval, at `widest_bucket`; `replicates_needed` the R at which the
  // hardest bucket (its mean and sd held) would fit: 0 when its |mean| is at or beyond c,
  // 2^20 + 1 when beyond the cap. `lattice_buckets`: the buckets whose values were few (a
  // lattice), judged by the interval for bounded values instead of t (issue 52).
  bool equivalent = false;
  double equivalence_bound_ulp = 0.0;  // c
  double widest_ulp = 0.0;
  std::int64_t widest_bucket = -1;
  std::int64_t equivalent_buckets = 0;
  std::int64_t lattice_buckets = 0;
  std::uint64_t replicates_needed = 0;
  // What the statistic could see at all (INCONCLUSIVE, issue 32): the typical bucket's
  // interval half-width (the median over buckets, ULP), whether it is at least c (blind at
  // the floor: an effect of c ULP cannot be significant), and the R at which that bucket's
  // sd would see c (stats::replicates_for_equivalence at mean 0; 2^20 + 1 beyond the cap).
  double typical_half_width_ulp = 0.0;
  bool blind_at_floor = false;
  std::uint64_t replicates_to_see_floor = 0;
};

struct BiasResult {
  Verdict verdict = Verdict::pass;  // worst of the deciding statistics
  std::string axis;
  std::int64_t buckets = 0;
  std::uint64_t replicates = 0;
  stats::BiasThresholds thresholds;
  double z_cut = 0.0;        // |z| beyond which a bucket is significant: t_cut(R, z*)
  double union_bound = 0.0;  // 2GΦ(-z*)
  stats::CertifiedHorizon horizon;
  BiasStatisticResult signed_statistic;
  BiasStatisticResult magnitude_statistic;
  bool attribution = false;  // both sides' errors against the oracle were observed
  // Every deciding statistic shown equivalent within its ±c (a PASS that is more than "not
  // detected"; BiasStatisticResult::equivalent).
  bool equivalent = false;
  std::string reason;
};

// What a variance verdict rests on (method.md, "Evidence").
struct VarianceEvidence {
  std::uint64_t replicates = 0;   // in the analysed sample
  std::uint64_t events = 0;       // replicates with K̂ > 0 (production beyond one ULP of the oracle)
  std::uint64_t exceedances = 0;  // over the tail threshold u
  // The horizon, in replicates, the evidence supports: T for a fitted tail (the GPD carries
  // the extrapolation and U its uncertainty); R/3 for a thin tail or zero events (the rule
  // of three: no excess in R replicates bounds its rate by ~3/R at 95 %).
  double horizon = 0.0;
  bool reaches_horizon = false;   // horizon >= the declared T
  // R/3, whatever the mode: an event of unknown rate (a discontinuous defect that fires in a
  // few calls per million) that never fired in R replicates is excluded only up to here. A
  // fitted tail's T rests on the tail it saw being the whole story (docs/statistics.md).
  double unseen_event_horizon = 0.0;
};

struct VarianceResult {
  Verdict verdict = Verdict::pass;
  stats::TailAnalysis tail;         // at the look that stopped (its settings carry that look's level)
  std::vector<std::uint64_t> looks;  // R at each look of the stopping rule
  stats::StopReason stop = stats::StopReason::stable;
  bool unstable = false;
  VarianceEvidence evidence;  // of the stopped sample (every replicate of the looks)
  // Selecting families: the paired selection-flip test; its verdict joins the gate's.
  std::optional<stats::SelectionTest> selection;
  std::string reason;
  std::vector<double> khat;  // the sample itself, in replicate order (for storage and recalibration)
};

// The checks people use today, computed on the same replicates (docs/baselines.md).
// `flagged` is what a user running the check once (on replicate 0) would see; `fraction`
// is the share of the bias gate's R replicates on which it would have flagged.
struct BaselineCheck {
  bool flagged = false;
  double fraction = 0.0;
  double first_value = 0.0;  // assert_close: violating elements; others: the ratio prod/(allowed)
  // The replicates `fraction` is over: the bias gate's R, fewer where a non-finite output
  // stopped the sweep (the earlier batches' replicates and the one that held it, which
  // flagged: the sweep keeps no replicate of that batch).
  std::uint64_t replicates = 0;
};

struct Baselines {
  BaselineCheck assert_close;     // |prod - ref| <= atol + rtol·|ref| elementwise (bf16: 1.6e-2, 1e-5)
  BaselineCheck flash_attention;  // max|prod - oracle| <= 2·max|ref - oracle| + 1 ULP
  BaselineCheck dynamo_fp64;      // RMSE(prod, oracle) <= 3·RMSE(ref, oracle) + 1e-5
};

}  // namespace kcert::gates
