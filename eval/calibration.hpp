#pragma once
// Calibration rule kcert-cal/2 (method.md §6, docs/calibration.md): per operator family and
// environment, the variance gate's warn_K / fail_K re-derived from the U of the family's
// positive controls, and the bias gate's ULP floors (c for the signed statistic,
// c_magnitude for the magnitude one) from the ULP effects of their significant buckets.
// Pure: stored outcomes in, a plan out; the command stores it.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/falsifiability.hpp"
#include "harness/stats/bias.hpp"

namespace kcert::eval {

struct CalibrationRule {
  std::string version = "kcert-cal/2";
  double margin = 1.5;     // warn_K = max(floor, margin · max U of the positives)
  double floor = 1.0;      // production never needs to beat the reference
  double ratio = 5.0;      // fail_K = ratio · warn_K (the defaults' 10 / 2)
  int min_positives = 3;   // fewer positives say too little about a family
  double default_warn = 2.0, default_fail = 10.0;
  // Bias floors, per statistic: c = clamp(bias_margin · the largest ULP effect of a
  // significant bucket among the positives, bias_c_min, the shipped floor). Tightens a
  // family whose benign arrangements sit far below the shipped floor; never loosens past it
  // (the shipped floors are set by the negatives they must keep, docs/bias-floors.md).
  double bias_margin = 1.5;
  double bias_c_min = 0.05;  // the method's starting floor: below it a floor stops meaning "negligible"
  double default_c = stats::BiasThresholds{}.c, default_c_magnitude = stats::BiasThresholds{}.c_magnitude;
};

// Thresholds a family has now (a stored calibration, or the defaults).
struct CurrentThresholds {
  double warn_k = 2.0, fail_k = 10.0;
  std::string label = "defaults";
  double c = stats::BiasThresholds{}.c, c_magnitude = stats::BiasThresholds{}.c_magnitude;
};

struct FamilyPlan {
  std::string family;
  int positives = 0;
  double max_u = 0.0;
  double old_warn = 2.0, old_fail = 10.0, new_warn = 0.0, new_fail = 0.0;
  // The bias floors: the largest ULP effect of a significant bucket among the positives
  // (0: none significant), per statistic, and the floors before and after.
  double max_ulp_signed = 0.0, max_ulp_magnitude = 0.0;
  double old_c = 0.3, old_c_magnitude = 0.2, new_c = 0.0, new_c_magnitude = 0.0;
  std::string old_label = "defaults";
  std::string refused;  // empty: calibrated
  nlohmann::json used = nlohmann::json::object();  // control -> U
  nlohmann::json used_bias = nlohmann::json::object();  // control -> [signed, magnitude] max ULP effect
  // Positives left out: a FAIL their `expected_on` condition predicts (control -> condition).
  nlohmann::json left_out = nlohmann::json::object();
};

// One plan per family that appears among `controls` (sorted by family name).
std::vector<FamilyPlan> plan_calibration(const std::vector<ControlOutcome>& controls,
                                         const std::map<std::string, CurrentThresholds>& current,
                                         const CalibrationRule& rule = {});

// The controls as they would read under the plans' new thresholds (refused families keep
// theirs): the variance verdict from the stored U, the bias verdict from the stored
// frontiers of significant buckets, the overall verdict recombined.
std::vector<ControlOutcome> apply_calibration(std::vector<ControlOutcome> controls, const std::vector<FamilyPlan>& plans);

}  // namespace kcert::eval
