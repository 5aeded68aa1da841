#pragma once
// The contract of a test case: a (reference, production) kernel pair of one family, the
// probe contract, the bucket axis, gate settings and the expected outcome. Plain values,
// YAML-free: the loader (harness/testcase, docs/testcases.md) produces it, the engine
// consumes it, so the engine never depends on the file format.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/contract/dy_law.hpp"
#include "harness/kernels/schema.hpp"
#include "harness/numerics/math_modes.hpp"
#include "harness/stats/bias.hpp"
#include "harness/stats/tail.hpp"
#include "harness/stats/verdict.hpp"

namespace kcert::contract {

enum class Kind { negative, positive };
inline std::string_view to_string(Kind k) { return k == Kind::negative ? "negative" : "positive"; }

// What a case certifies (issue 31): the forward outputs, or the gradients of the backward.
enum class Direction { forward, backward };
inline std::string_view to_string(Direction d) { return d == Direction::forward ? "forward" : "backward"; }

// The upstream-gradient probe dy of a backward case (YAML `backward:`): drawn per replicate
// from kcert's own stream, rounded to W, never uniform (dy = ones hides per-row scaling
// defects). Kinds: `shifted` N(shift, scale²), which gives a weight's gradient a mean
// (E[dW_c] = N·E[dy·x̂]) so accumulation bias has a direction to show; `self_correlated`
// dy = y + N(0, scale²) with y the fp64 oracle's output (the gradient of ½‖y‖² plus noise);
// `zero_mean` N(0, scale²), the specificity probe of the variance gate; `heavy_tailed`
// shift + scale·t₃ (Student t, 3 degrees of freedom: rare huge entries); `loss_shaped`, per row
// of the last axis the cross-entropy gradient softmax(l) - onehot(t) of logits
// l ~ N(0, scale²) with `margin` added on a random target t (a confident row: one entry near
// -(1 - p_t), the rest tiny). Stress rows on top of any kind (catalog 4.1): `zero_rows`
// evenly spaced rows set to 0, and the last row multiplied by `huge_row`.
struct BackwardProbe {
  DyLaw dy_law = DyLaw::shifted;  // dy_law.hpp: the laws by name
  double dy_shift = 0.5;
  double dy_scale = 1.0;
  double dy_margin = 8.0;         // loss_shaped: the target logit's lead
  std::int64_t dy_zero_rows = 0;  // rows of dy (all axes but the last, flattened) set to 0
  double dy_huge_row = 1.0;       // the last row's factor (1: none)
  std::vector<std::string> gradients;         // certified gradients; empty = every one the family declares
  std::map<std::string, std::string> buckets;  // gradient -> bucket axis (default: the gradient's first)
};

struct KernelChoice {
  std::string variant;
  std::string version;  // the YAML's, or the registered variant's when the YAML gives none
  kernels::ParamMap params;
};

struct GateSettings {
  std::uint64_t replicates = 1024;      // R: pre-declared for the bias gate
  std::uint64_t max_replicates = 8192;  // R_max: the variance gate's cap
  int algebra_replicates = 16;          // N_alg
  double algebra_tolerance = 1e-9;      // tol_alg
  stats::BiasThresholds bias;
  // Statistics that decide the bias gate; the others are computed and reported beside it.
  // Both by default: the signed statistic is blind where outputs are centred (a LayerNorm's
  // per-channel gain error averages out), the magnitude one where signs of ref mix
  // (docs/bias-floors.md, "centred outputs").
  std::vector<stats::BiasStatistic> bias_deciding{stats::BiasStatistic::signed_difference, stats::BiasStatistic::magnitude};
  // Attribute a FAIL to the reference where the fp64 oracle says the production is closer to
  // exact (docs/statistics.md). Off for a case whose reference arithmetic is itself the
  // model's trained function (G2: the bf16 normalizer constant), where "closer to the exact
  // constant" is the defect.
  bool bias_attribution = true;
  stats::VarianceSettings variance;
};

// Acceptable verdicts per gate ("algebra", "bias", "variance"); a gate not named is not
// checked.
struct Expectation {
  std::map<std::string, std::vector<stats::Verdict>> gates;
  // A backward case: acceptable verdicts per gate of one gradient (YAML
  // `expected.gradients.dw.bias`), where the catalog predicts which gradient shows the
  // defect; checked beside `gates`, which hold for the worst over the gradients.
  std::map<std::string, std::map<std::string, std::vector<stats::Verdict>>> gradients;
  std::string note;  // why, especially when an expectation was changed
  // The `expected_on` condition this expectation was taken from ("" = the case's own
  // `expected`); set by the engine when it applies one.
  std::string condition;
  bool empty() const { return gates.empty() && gradients.empty(); }
};

struct Attestation {
  std::string path, theorem, status;  // recorded with results, not checked
};

struct TestCase;

// One probe setting of a sweep (YAML `sweep:`): the whole case with that setting merged into
// its probe, certified on its own; the case's verdict is the worst over its contract and
// every setting.
struct SweepSetting {
  std::string name;
  std::string probe_text;  // the setting's probe fields as written, in YAML flow style
  std::shared_ptr<TestCase> testcase;
};

struct TestCase {
  std::string source;   // file path (a label: nothing reopens it, see `text`)
  // The case file's text as the loader read it. Results carry it (`case_text`), and the
  // report renders it from there: a path in a result names a file on whichever machine
  // wrote it, and reopening it published whatever that path held (/etc/shadow as root).
  std::string text;
  std::string id;
  Kind kind = Kind::positive;
  std::string family;
  std::string mechanism;
  std::vector<std::string> references;
  KernelChoice reference;
  KernelChoice production;
  kernels::ProbeContract probe;
  Direction direction = Direction::forward;
  BackwardProbe backward;  // direction: backward only
  // A file with `direction: both` yields two cases, one per direction, both needed to PASS:
  // the forward one keeps the file's id, the backward one is `<id>@backward` (ids stay
  // unique in every sink: pages, history, the database). `case_id` is the file's id for
  // both halves, and for every other case the id itself.
  bool both_directions = false;
  std::string case_id;
  std::string bucket_axis;
  GateSettings gates;
  Expectation expected;
  // The expectation under one environment condition where the catalog predicts another
  // verdict there: a LibTorch major release ("libtorch2": 2.x computes SiLU in fp32), or a
  // CPU whose bf16 GEMM accumulates in bf16 ("cpu_bf16_gemm_in_bf16"). The engine puts the
  // one that holds where it runs into `expected`; the most specific wins
  // (numerics::expectation_conditions, engine.cpp).
  std::map<std::string, Expectation> expected_on;
  std::optional<Attestation> attestation;
  // GPU math modes this case pins on top of the run's (YAML `math_modes:`; docs/gpu.md).
  numerics::MathModes math_modes;
  std::string profile;  // the profile applied ("" = contract shapes)
  std::vector<std::string> profiles;  // profiles the file defines
  std::vector<std::string> plugins;   // plugin libraries the file asks for, as written
  std::vector<std::string> python;    // Python kernel files the file asks for, resolved against its folder
  // The stored calibration whose warn_K / fail_K the variance gate uses ("" = the case's
  // own settings, by default method.md's defaults). Set by `kcert nightly`, not by YAML.
  std::string calibration;
  // Probe settings certified besides the contract (empty: the contract alone).
  std::vector<SweepSetting> sweep;
};

}  // namespace kcert::contract
