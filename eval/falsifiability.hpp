#pragma once
// The falsifiability table (method.md §7): how the gates, and the checks people use today,
// did on negative controls (real defects: must be detected) and positive controls
// (known-correct: must not FAIL).
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "harness/engine/case_result.hpp"

namespace kcert::eval {

struct Tally {
  int detected = 0;   // negatives with WARN or FAIL (baselines: flagged)
  int false_fail = 0; // positives with FAIL (baselines: flagged)
  int false_warn = 0; // positives with WARN (gates only)
};

struct Falsifiability {
  int negatives = 0;
  int positives = 0;
  int errors = 0;  // cases the harness could not finish (counted nowhere else)
  Tally algebra, bias, variance, combined;
  Tally bias_with_magnitude, combined_with_magnitude;  // the magnitude statistic deciding too
  Tally assert_close, flash_attention, dynamo_fp64;
  // Variance PASSes resting on less than the declared horizon (a thin tail or no events:
  // the rule of three supports ~R/3 replicates), by kind.
  int short_evidence_negatives = 0, short_evidence_positives = 0;
  // Variance verdicts reached after repeated looks and checked on a fresh replicate set.
  int confirmed = 0, confirmation_disagreed = 0;
  int expectations_met = 0;
  std::vector<std::string> unexpected;  // "id: gate: expected X, got Y"
};

// What the table needs of one control, from a fresh result or from a stored result
// document (docs/results.md), so a run merged from shards in the database tabulates
// exactly like the run that produced it.
struct ControlOutcome {
  std::string id, kind, family, error;  // kind: "negative" | "positive"; error: harness error
  stats::Verdict verdict = stats::Verdict::pass, algebra = stats::Verdict::pass, bias = stats::Verdict::pass,
                 variance = stats::Verdict::pass;
  stats::Verdict bias_magnitude = stats::Verdict::pass;  // bias gate with the magnitude statistic deciding too
  bool assert_close = false, flash_attention = false, dynamo_fp64 = false;
  std::vector<std::string> unexpected;  // against the YAML expectation
  std::optional<double> variance_u;     // U; nullopt when +inf or undefined
  std::optional<double> variance_se;    // the bootstrap se of r_T, when a tail was fitted
  bool short_evidence = false;          // a variance PASS whose evidence does not reach the horizon
  std::optional<bool> confirmation_agrees;  // set when the verdict was checked on a fresh set
  bool detected() const { return kind == "negative" && error.empty() && verdict != stats::Verdict::pass; }
  bool false_fail() const { return kind == "positive" && error.empty() && verdict == stats::Verdict::fail; }
};

ControlOutcome outcome(const engine::CaseResult& r);
// Throws std::invalid_argument naming the missing field when the document is not a result.
ControlOutcome outcome_from_document(const nlohmann::json& document);

Falsifiability tabulate(const std::vector<ControlOutcome>& outcomes);
Falsifiability tabulate(const std::vector<engine::CaseResult>& results);
nlohmann::json to_json(const Falsifiability& f);

// The verdict of a case's bias gate when the magnitude statistic decides as well.
stats::Verdict bias_with_magnitude(const engine::CaseResult& r);

}  // namespace kcert::eval
