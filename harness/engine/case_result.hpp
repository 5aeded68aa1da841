#pragma once
// The outcome of one test case: three gate results, the combined verdict and the
// provenance needed to reproduce it. Plain values; sinks serialize it.
#include <map>
#include <optional>
#include <string>

#include "harness/gates/results.hpp"
#include "harness/contract/test_case.hpp"

namespace kcert::engine {

struct Runtime {       // how it ran: never changes a number, so kept apart from results
  std::string device = "cpu";
  int threads = 1;
  std::int64_t batch = 0;
  double seconds = 0.0;
  double kernel_seconds = 0.0;   // inside the reference, production and oracle evaluations
  double draw_seconds = 0.0;     // drawing and staging replicate inputs
  double observe_seconds = 0.0;  // the sweep (on a GPU run: the part not hidden beside the next batch), the gates, the algebra comparison
  double stats_seconds = 0.0;    // tail fits, bootstrap, bias decision
};

// One probe setting of a swept case (contract::SweepSetting), as it came out.
struct SweepPoint {
  std::string name;        // "contract" for the case's own probe
  std::string probe_text;  // the setting's probe fields ("" for the contract)
  stats::Verdict verdict = stats::Verdict::pass, algebra = stats::Verdict::pass, bias = stats::Verdict::pass,
                 variance = stats::Verdict::pass;
  double U = 0.0, max_abs_z = 0.0, max_ulp_effect = 0.0;  // the variance gate's U; the bias gate's deciding maxima
  std::uint64_t replicates = 0;
  double seconds = 0.0;
  std::string bias_reason, variance_reason;
  bool algebra_applicable = true;  // false: an opaque production, the algebra gate did not run ("n/a")
};

// One gradient of a backward case (issue 31), as it came out: its gates' verdicts and maxima,
// its bucket layout and the reduction size N its claim is at.
struct GradientPoint : SweepPoint {
  std::string input;             // the input it differentiates with respect to
  std::string bucket_axis;
  std::string reduces;           // what it sums over within a replicate ("tokens"), or ""
  std::int64_t reduction_size = 0;  // N: terms that sum it per replicate (0 for an input-shaped gradient)
  std::vector<std::int64_t> shape;  // one replicate's gradient
  stats::FloatFormat output_format = stats::FloatFormat::bf16;  // its input's dtype: its ULPs
  double algebra_discrepancy = 0.0;
  std::string algebra_reason;
  double own_forward_discrepancy = -1.0;  // explicit backward vs autograd of its forward; < 0 not measured
};

struct CaseResult {
  contract::TestCase testcase;  // the case as loaded (probe, gates, expectation, refs)
  stats::Verdict verdict = stats::Verdict::pass;
  gates::AlgebraResult algebra;
  gates::BiasResult bias;
  gates::VarianceResult variance;
  std::uint64_t replicates = 0;  // evaluated in all (bias R and any growth for variance)
  std::optional<gates::NonFinite> nonfinite;
  gates::Baselines baselines;
  std::string torch_version;
  numerics::MathModes math_modes;  // ATen's global context while the case ran, read back
  std::vector<std::int64_t> output_shape;  // one replicate's output
  stats::FloatFormat output_format = stats::FloatFormat::bf16;  // ULPs and ε are taken in it
  Runtime runtime;
  // Against the YAML's expectation: empty when it matched (or there was none).
  std::vector<std::string> unexpected;
  // A harness or kernel-contract error that stopped the case (the verdict is then void).
  std::string error;
  // Why the case did not run (a variant this build lacks): no gate ran, nothing was measured.
  std::string skipped;
  bool ran() const { return error.empty() && skipped.empty(); }
  // A swept case (YAML `sweep:`): every setting's outcome, the contract first, and for each
  // gate the setting its result (and verdict) above comes from: the worst, the first on ties.
  std::vector<SweepPoint> sweep;
  std::map<std::string, std::string> decided_by;  // gate ("algebra", "bias", "variance", "overall") -> setting
  // A backward case (testcase.direction): every gradient's outcome, and for each gate the
  // gradient its result above comes from (the worst, the first on ties).
  std::vector<GradientPoint> gradients;
  std::map<std::string, std::string> gradient_decided_by;
};

}  // namespace kcert::engine
