#pragma once
// Calibration rule kcert-cal/1 (method.md §6, docs/calibration.md): the variance gate's
// warn_K / fail_K per operator family, re-derived from the U of the family's positive
// controls in one environment. Pure: stored outcomes in, a plan out; the command stores it.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/falsifiability.hpp"

namespace kcert::eval {

struct CalibrationRule {
  std::string version = "kcert-cal/1";
  double margin = 1.5;     // warn_K = max(floor, margin · max U of the positives)
  double floor = 1.0;      // production never needs to beat the reference
  double ratio = 5.0;      // fail_K = ratio · warn_K (the defaults' 10 / 2)
  int min_positives = 3;   // fewer positives say too little about a family
  double default_warn = 2.0, default_fail = 10.0;
};

// Thresholds a family has now (a stored calibration, or the defaults).
struct CurrentThresholds {
  double warn_k = 2.0, fail_k = 10.0;
  std::string label = "defaults";
};

struct FamilyPlan {
  std::string family;
  int positives = 0;
  double max_u = 0.0;
  double old_warn = 2.0, old_fail = 10.0, new_warn = 0.0, new_fail = 0.0;
  std::string old_label = "defaults";
  std::string refused;  // empty: calibrated
  nlohmann::json used = nlohmann::json::object();  // control -> U
};

// One plan per family that appears among `controls` (sorted by family name).
std::vector<FamilyPlan> plan_calibration(const std::vector<ControlOutcome>& controls,
                                         const std::map<std::string, CurrentThresholds>& current,
                                         const CalibrationRule& rule = {});

// The controls as they would read under the plans' new thresholds (refused families keep
// theirs): the variance verdict from the stored U, the overall verdict recombined.
std::vector<ControlOutcome> apply_calibration(std::vector<ControlOutcome> controls, const std::vector<FamilyPlan>& plans);

}  // namespace kcert::eval
