#pragma once
// The falsifiability table (method.md §7): how the gates, and the checks people use today,
// did on negative controls (real defects: must be detected) and positive controls
// (known-correct: must not FAIL).
#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/engine/case_result.hpp"

namespace kcert::eval {

struct Tally {
  int detected = 0;   // negatives with WARN or FAIL (baselines: flagged)
  int false_fail = 0; // positives with FAIL (baselines: flagged)
  int false_warn = 0; // positives with WARN (gates only)
  // Gates only (issue 32): INCONCLUSIVE verdicts, on their own line: an inconclusive
  // negative is neither detected nor escaped, an inconclusive positive neither FAIL nor PASS.
  int negatives_inconclusive = 0, positives_inconclusive = 0;
};

struct Falsifiability {
  int negatives = 0;
  int positives = 0;
  int errors = 0;  // cases the harness could not finish (counted nowhere else)
  // Controls this build cannot run (a kernel of a newer LibTorch), with the reason; counted
  // nowhere else, so a skipped control is never a detection, a pass or a met expectation.
  std::vector<std::pair<std::string, std::string>> skipped;  // (id, reason)
  std::string torch_version;  // the LibTorch the controls ran on ("" when not known)
  Tally algebra, bias, variance, combined;
  // The notes' rule side by side: the signed statistic alone deciding the bias gate.
  Tally bias_signed_only, combined_signed_only;
  Tally assert_close, flash_attention, dynamo_fp64;
  // Variance PASSes resting on less than the declared horizon (a thin tail or no events:
  // the rule of three supports ~R/3 replicates), by kind.
  int short_evidence_negatives = 0, short_evidence_positives = 0;
  // Controls whose algebra gate could not run (an opaque production, exact=False): counted
  // apart, never as a detection or a pass of that gate (issue 33).
  int algebra_not_applicable_negatives = 0, algebra_not_applicable_positives = 0;
  // Variance verdicts reached after repeated looks and checked on a fresh replicate set.
  int confirmed = 0, confirmation_disagreed = 0;
  int expectations_met = 0;
  // Positives whose bias gate PASSed, by what the PASS rests on (issue 32): shown equivalent
  // within ±c (TOST), or only not detected; per family too. Documents written before the
  // equivalence statement count in neither.
  int positives_equivalent = 0, positives_not_shown_equivalent = 0;
  std::map<std::string, std::pair<int, int>> equivalence_by_family;  // family -> (equivalent, not shown)
  std::vector<std::string> unexpected;  // "id: gate: expected X, got Y"
  // Controls judged by the expectation of an environment condition (`expected_on`: a
  // LibTorch release, a CPU whose bf16 GEMM accumulates in bf16), with the condition.
  std::vector<std::pair<std::string, std::string>> conditioned;  // (id, condition)
  // The gates' combined verdict per direction (issue 31: forward, backward): controls that
  // ran, and how the combined verdict did on them.
  struct DirectionTally {
    int negatives = 0, positives = 0;
    Tally combined;
  };
  std::map<std::string, DirectionTally> by_direction;
  // Cases certified in both directions (`direction: both`), each counted once with the worse
  // of its two verdicts: both are needed to PASS. Empty when no case is.
  std::optional<DirectionTally> both_directions;
};

// What the table needs of one control, from a fresh result or from a stored result
// document (docs/results.md), so a run merged from shards in the database tabulates
// exactly like the run that produced it.
struct ControlOutcome {
  std::string id, kind, family, error;  // kind: "negative" | "positive"; error: harness error
  std::string direction = "forward";    // what the control certifies
  std::string case_id;                  // a `direction: both` file's id, shared by its two results ("" otherwise)
  std::string skipped;                  // why it did not run (a kernel this LibTorch lacks)
  std::string torch_version;
  stats::Verdict verdict = stats::Verdict::pass, algebra = stats::Verdict::pass, bias = stats::Verdict::pass,
                 variance = stats::Verdict::pass;
  stats::Verdict bias_signed_only = stats::Verdict::pass;  // the bias gate under the notes' rule (signed statistic alone)
  bool assert_close = false, flash_attention = false, dynamo_fp64 = false;
  std::vector<std::string> unexpected;  // against the YAML expectation
  std::string expected_condition;       // the `expected_on` condition judged by ("" = `expected`)
  std::vector<std::string> expected_fail_gates;  // gates whose expectation in force admits FAIL
  std::uint64_t replicates = 0;         // R of the bias gate (0: not run)
  std::optional<double> max_abs_z;      // the bias gate's largest |z| over both statistics; nullopt when not finite
  std::optional<double> variance_u;     // U; nullopt when +inf or undefined
  std::optional<double> variance_se;    // the bootstrap se of r_T, when a tail was fitted
  bool short_evidence = false;          // a variance PASS whose evidence does not reach the horizon
  bool algebra_applicable = true;       // false: an opaque production, the algebra gate did not run
  std::optional<bool> bias_equivalent;  // the bias gate's equivalence statement (absent in older documents)
  std::optional<bool> confirmation_agrees;  // set when the verdict was checked on a fresh set
  // The bias gate's evidence, enough to re-judge it under other floors: per statistic the
  // frontier of significant buckets, (standardized effect, ULP effect) points no other
  // significant bucket exceeds in both; whether it decides; the s_min it was judged with.
  // bias_recomputable: false for documents without these fields, or a bias FAIL for a
  // non-finite value (no frontier stands behind it).
  std::vector<std::pair<double, double>> frontier_signed, frontier_magnitude;
  // Buckets attributed to the reference (left out of the frontiers): a WARN under any floors,
  // so a statistic with one is at least WARN when re-judged.
  std::int64_t attributed_signed = 0, attributed_magnitude = 0;
  bool signed_decides = true, magnitude_decides = true;
  double s_min = 0.2;
  bool bias_recomputable = false;
  // The largest ULP effect among a statistic's significant buckets (0: none).
  double max_ulp_effect(stats::BiasStatistic s) const;
  bool ran() const { return error.empty() && skipped.empty(); }
  bool detected() const { return kind == "negative" && ran() && stats::flagged(verdict); }
  bool inconclusive() const { return ran() && verdict == stats::Verdict::inconclusive; }
  bool false_fail() const { return kind == "positive" && ran() && verdict == stats::Verdict::fail; }
};

// A stored variance gate (docs/results.md `gates.variance`) whose PASS rests on less than
// the declared horizon: the horizon its evidence supports (NaN when the document gives no
// number). nullopt for any other verdict, a PASS that reaches it, or a document written
// before the evidence block.
std::optional<double> variance_pass_short_of_horizon(const nlohmann::json& variance);

ControlOutcome outcome(const engine::CaseResult& r);
// Throws std::invalid_argument naming the missing field when the document is not a result.
ControlOutcome outcome_from_document(const nlohmann::json& document);

// The bias verdict of an outcome under floors c (signed) and c_magnitude, from its frontiers:
// FAIL when a deciding statistic has a frontier point above both s_min and its c, WARN when
// it has any significant bucket, else PASS. The outcome's own verdict when not recomputable.
stats::Verdict bias_verdict_under(const ControlOutcome& o, double c, double c_magnitude);

Falsifiability tabulate(const std::vector<ControlOutcome>& outcomes);
Falsifiability tabulate(const std::vector<engine::CaseResult>& results);
nlohmann::json to_json(const Falsifiability& f);

// The verdict of a case's bias gate under the notes' rule: the signed statistic alone.
stats::Verdict bias_signed_only(const engine::CaseResult& r);

}  // namespace kcert::eval
