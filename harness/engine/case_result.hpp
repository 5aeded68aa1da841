#pragma once
// The outcome of one test case: three gate results, the combined verdict and the
// provenance needed to reproduce it. Plain values; sinks serialize it.
#include <optional>
#include <string>

#include "harness/gates/results.hpp"
#include "harness/testcase/testcase.hpp"

namespace kcert::engine {

struct NonFinite {
  std::string side;   // "reference", "production", "oracle" or "production (fp64)"
  std::string value;  // "nan", "+inf", "-inf"
  gates::Location where;
};

// The checks people use today, computed on the same replicates (docs/baselines.md).
// `flagged` is what a user running the check once (on replicate 0) would see; `fraction`
// is the share of the bias gate's R replicates on which it would have flagged.
struct BaselineCheck {
  bool flagged = false;
  double fraction = 0.0;
  double first_value = 0.0;  // assert_close: violating elements; others: the ratio prod/(allowed)
};

struct Baselines {
  BaselineCheck assert_close;     // |prod - ref| <= atol + rtol·|ref| elementwise (bf16: 1.6e-2, 1e-5)
  BaselineCheck flash_attention;  // max|prod - oracle| <= 2·max|ref - oracle| + 1 ULP
  BaselineCheck dynamo_fp64;      // RMSE(prod, oracle) <= 3·RMSE(ref, oracle) + 1e-5
};

struct Runtime {       // how it ran: never changes a number, so kept apart from results
  std::string device = "cpu";
  int threads = 1;
  std::int64_t batch = 0;
  double seconds = 0.0;
  double kernel_seconds = 0.0;   // inside the reference, production and oracle evaluations
  double draw_seconds = 0.0;     // drawing and staging replicate inputs
  double observe_seconds = 0.0;  // reducing outputs to observations (and the algebra run)
  double stats_seconds = 0.0;    // tail fits, bootstrap, bias decision
};

struct CaseResult {
  testcase::TestCase testcase;  // the case as loaded (probe, gates, expectation, refs)
  stats::Verdict verdict = stats::Verdict::pass;
  gates::AlgebraResult algebra;
  gates::BiasResult bias;
  gates::VarianceResult variance;
  std::uint64_t replicates = 0;  // evaluated in all (bias R and any growth for variance)
  std::optional<NonFinite> nonfinite;
  Baselines baselines;
  std::string torch_version;
  std::vector<std::int64_t> output_shape;  // one replicate's output
  stats::FloatFormat output_format = stats::FloatFormat::bf16;  // ULPs and ε are taken in it
  Runtime runtime;
  // Against the YAML's expectation: empty when it matched (or there was none).
  std::vector<std::string> unexpected;
  // A harness or kernel-contract error that stopped the case (the verdict is then void).
  std::string error;
};

}  // namespace kcert::engine
