#pragma once
// What a report shows of one control (issue 51, item 2): renderers read this typed view, not
// the result document. It is built here and only here from a document (docs/results.md), so a
// stored document and a fresh result (written out by store::to_json) render the same, and a
// field a renderer needs is read once. The builder is lenient: a document from an older kcert,
// or one cut down by hand, gives empty fields, never an exception.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kcert::report {

struct GateLine {
  std::string gate;     // "algebra", "bias", "variance"
  std::string verdict;  // as the result states it
  std::string reason;
};

// One row of a breakdown: a probe setting of a swept case, or a gradient of a backward case.
struct PointView {
  std::string name;
  std::string probe;  // a setting's probe in words
  // A gradient's input, bucket axis, and the reduction size N with what it sums over
  // (nullopt: none, or not a gradient).
  std::string input, bucket_axis, reduces;
  std::optional<double> reduction_size;
  std::string verdict, algebra, bias, variance;
  bool algebra_applicable = true;  // false: an opaque production's algebra gate did not run
  std::optional<double> U, max_abs_z;  // ±inf kept
};

// A swept or backward case's rows, and which row decided each gate.
struct BreakdownView {
  std::string decided_algebra, decided_bias, decided_variance;
  std::vector<PointView> points;
};

// A bucket the bias gate flagged, as the page's table shows it.
struct FlaggedBucketView {
  std::string statistic;  // "signed" or "magnitude"
  std::int64_t bucket = 0;
  std::string label;                 // in the family's terms (bucket_label)
  std::optional<double> signed_ulp;  // the ULP effect with the direction's sign (+: production above)
  std::optional<double> ulp_effect, z, effect;  // as stored (ULP effect and effect are magnitudes)
  std::string verdict;
  bool attributed = false;  // a WARN the reference's own bias explains
};

// A bucket the bias gate kept (flagged, or among the top by |z|): a point of the bias plane.
struct KeptBucketView {
  std::string statistic;  // "signed" or "magnitude"
  std::string verdict;
  std::optional<double> ulp_effect, effect;
};

// The bias gate as the page's flagged-bucket section shows it (present: the result has a
// bias block with a signed statistic).
struct BiasView {
  bool present = false;
  std::string axis;
  std::optional<double> buckets, replicates;
  std::optional<double> z_cut, s_min, c, c_magnitude;  // the thresholds judged against
  std::vector<std::pair<std::string, std::int64_t>> flagged_counts;  // per statistic: FAIL + WARN buckets
  std::vector<FlaggedBucketView> flagged;  // as the result keeps them (up to 64 per statistic), signed first
  std::vector<KeptBucketView> kept;        // every kept bucket: flagged, then top, signed first
};

// The variance gate's tail as the plots draw it.
struct TailView {
  // A fitted tail whose curve can be drawn: mode "fitted" with a finite xi, u and zeta and a
  // sigma above 0 (a document edited by hand may hold a sigma of 0).
  bool drawable_fit = false;
  double u = 0.0, xi = 0.0, sigma = 0.0, zeta = 0.0;  // the clipped fit (drawable_fit only)
  std::optional<double> r_t;                          // the return level, where finite
  // The settings judged against (defaults where a document lacks them: kcert's own).
  double warn_k = 2.0, fail_k = 10.0, horizon = 6.25e5;
};

struct SideView {
  std::string variant, version;
};

struct ControlView {
  std::string id, kind, family;
  std::string verdict;               // PASS, INCONCLUSIVE, WARN, FAIL; ERROR or SKIP for a case that did not finish
  double seconds = 0.0;              // runtime.seconds
  std::optional<std::string> error;  // the harness error of a case that could not finish
  std::optional<std::string> skipped;  // why a control this build cannot run was skipped
  std::vector<std::string> unexpected;  // against the YAML expectation
  bool has_expectation = false;      // the case states one (any gate, gradient, note or condition)
  // The expectation as the YAML states it, for the page: whether the result has an `expected`
  // block at all, each gate's allowed verdicts (algebra, bias, variance, those it names) and
  // its note.
  bool expectation_stated = false;
  std::vector<std::pair<std::string, std::vector<std::string>>> expected_gates;
  std::optional<std::string> expected_note;
  std::vector<GateLine> gates;       // algebra, bias, variance; empty when the result has no gates block
  bool algebra_applicable = true;    // false: an opaque production, its algebra gate did not run (issue 33)
  std::optional<double> max_abs_z;   // the bias gate's largest |z| over its statistics (±inf kept)
  std::optional<double> variance_u;  // the variance gate's U (±inf kept; nullopt when the result gives none)
  // A variance PASS whose evidence stops short of the horizon: the horizon it supports (NaN when
  // the document states none). nullopt for any other verdict, or a document from before the evidence block.
  std::optional<double> variance_short_of_horizon;

  // What a control's page shows besides (html.cpp).
  BiasView bias;
  TailView tail;
  SideView reference, production;
  std::optional<double> replicates;
  std::string mechanism;
  std::vector<std::string> references;  // as the case gives them (a non-string: its JSON)
  std::optional<BreakdownView> sweep;     // a swept case's settings
  std::optional<BreakdownView> backward;  // a backward case's gradients
  std::string dy_kind;                    // the backward case's upstream gradient
  std::optional<double> dy_shift, dy_scale;
  std::string torch_version, device;  // provenance
  std::string source;                 // the case file's path as recorded
  std::optional<std::string> case_text;

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

// A bucket in the family's own terms ("channel 29", "position 17 x pair 5", "head 3 x
// position 40"), decoded with the probe's parameters (the result's probe.params): the page's
// flagged-bucket table and the bias plane's labels.
std::string bucket_label(const std::string& axis, std::int64_t bucket, const nlohmann::json& probe_params);

}  // namespace kcert::report
