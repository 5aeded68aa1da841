#pragma once
// What a report shows of one control (issue 51, item 2): renderers read this typed view, not
// the result document. It is built here and only here from a document (docs/results.md), so a
// stored document and a fresh result (written out by store::to_json) render the same, and a
// field a renderer needs is read once. The builder is lenient: a document from an older kcert,
// or one cut down by hand, gives empty fields, never an exception.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kcert::report {

struct GateLine {
  std::string gate;     // "algebra", "bias", "variance"
  std::string verdict;  // as the result states it
  std::string reason;
};

struct ControlView {
  std::string id, kind, family;
  std::string verdict;               // PASS, INCONCLUSIVE, WARN, FAIL; ERROR or SKIP for a case that did not finish
  double seconds = 0.0;              // runtime.seconds
  std::optional<std::string> error;  // the harness error of a case that could not finish
  std::optional<std::string> skipped;  // why a control this build cannot run was skipped
  std::vector<std::string> unexpected;  // against the YAML expectation
  bool has_expectation = false;      // the case states one (any gate, gradient, note or condition)
  std::vector<GateLine> gates;       // algebra, bias, variance; empty when the result has no gates block
  bool algebra_applicable = true;    // false: an opaque production, its algebra gate did not run (issue 33)
  std::optional<double> max_abs_z;   // the bias gate's largest |z| over its statistics (±inf kept)
  std::optional<double> variance_u;  // the variance gate's U (±inf kept; nullopt when the result gives none)
  // A variance PASS whose evidence stops short of the horizon: the horizon it supports (NaN when
  // the document states none). nullopt for any other verdict, or a document from before the evidence block.
  std::optional<double> variance_short_of_horizon;

  // The verdict of one gate ("" when the result has no such gate).
  const std::string& gate_verdict(std::string_view gate) const;
  // A negative detected as its YAML expects (pytest's xfail idea): its FAIL or WARN is what the
  // control is for, and reports draw it "as designed", not red.
  bool detected_as_designed() const {
    return verdict != "SKIP" && kind == "negative" && unexpected.empty() && (verdict == "FAIL" || verdict == "WARN") && !error;
  }
};

ControlView control_view(const nlohmann::json& document);
std::vector<ControlView> control_views(const std::vector<nlohmann::json>& documents);

}  // namespace kcert::report
