#include "harness/engine/engine.hpp"
#include "harness/engine/draw.hpp"
#include "harness/engine/batch_pipeline.hpp"
#include "harness/engine/gradient_pair.hpp"
#include "harness/engine/row_blocks.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "harness/gates/algebra_gate.hpp"
#include "harness/gates/baseline_checks.hpp"
#include "harness/gates/bias_gate.hpp"
#include "harness/gates/variance_gate.hpp"
#include "harness/contract/release_threshold.hpp"
#include "harness/numerics/observations.hpp"
#include "harness/numerics/runtime.hpp"
#include "harness/stats/random.hpp"

namespace kcert::engine {

namespace {

using Clock = std::chrono::steady_clock;
using kernels::KernelInputs;
using numerics::Precision;
using stats::Verdict;

// Seed domains: replicate r uses derive_seed(seed, r); these sit far above any r.
constexpr std::uint64_t kFixedStream = 0xFFFFFFFFFFFFFFFFULL;
constexpr std::uint64_t kBootstrapStream = 0xFFFFFFFFFFFFFFFEULL;
constexpr std::uint64_t kUpstreamGradientStream = 0xFFFFFFFFFFFFFFFDULL;  // dy of replicate r: derive_seed(this, r)

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name == "cuda") {
    if (!numerics::cuda_available()) {
      throw std::invalid_argument(
          "--device cuda: this LibTorch build has no usable CUDA device (Debian's LibTorch is CPU-only; "
          "build kcert against a CUDA LibTorch on a GPU machine, or use --device cpu)");
    }
    return torch::kCUDA;
  }
  throw std::invalid_argument("device must be cpu or cuda, got '" + name + "'");
}

void check_output(const torch::Tensor& out, const std::string& who, std::int64_t batch, torch::Dtype expected) {
  if (!out.defined() || out.dim() < 1 || out.size(0) != batch) {
    throw std::invalid_argument(who + " returned a tensor without the leading batch dimension " + std::to_string(batch) +
                                " (shape " + (out.defined() ? c10::str(out.sizes()) : std::string("undefined")) + ")");
  }
  if (out.scalar_type() != expected) {
    throw std::invalid_argument(who + " returned " + std::string(c10::toString(out.scalar_type())) + ", expected " +
                                c10::toString(expected) + " (a variant ends with p.round_w(...))");
  }
}

// The case with the run's overrides (replicates, seed) applied.
contract::TestCase with_overrides(const contract::TestCase& in, const RunOptions& options) {
  auto tc = in;
  if (options.replicates) {
    tc.gates.replicates = *options.replicates;
    tc.gates.max_replicates = std::max(tc.gates.max_replicates, tc.gates.replicates);
    tc.gates.algebra_replicates = static_cast<int>(std::min<std::uint64_t>(tc.gates.algebra_replicates, tc.gates.replicates));
  }
  if (options.seed) tc.probe.seed = *options.seed;
  // The expectation of the environment this run is in, where the case has one: the LibTorch
  // major release, then release thresholds that hold, lowest first (libtorch>=2.11 over
  // libtorch2), then the CPU's bf16 GEMM path (most specific, so it wins).
  std::vector<std::string> conditions = numerics::expectation_conditions(options.device);
  std::vector<std::pair<std::pair<int, int>, std::string>> thresholds;
  for (const auto& [name, expectation] : tc.expected_on) {
    if (const auto t = contract::parse_release_threshold(name); t && numerics::torch_at_least(t->first, t->second))
      thresholds.emplace_back(*t, name);
  }
  std::sort(thresholds.begin(), thresholds.end());
  std::vector<std::string> ordered{conditions.front()};
  for (const auto& t : thresholds) ordered.push_back(t.second);
  ordered.insert(ordered.end(), conditions.begin() + 1, conditions.end());
  for (const auto& condition : ordered) {
    if (const auto it = tc.expected_on.find(condition); it != tc.expected_on.end()) {
      tc.expected = it->second;
      tc.expected.condition = condition;
    }
  }
  if (tc.gates.replicates < 2) throw std::invalid_argument("replicates must be at least 2");
  tc.gates.variance.seed = stats::derive_seed(tc.probe.seed, kBootstrapStream);
  return tc;
}

// The kernel pair of a case on its device: draws replicates from their own streams and
// evaluates reference and production at the working precision and the oracle (the
// reference under the fp64 policy). Keeps the timings the result reports.
class PairEvaluator final : public PairSource {
 public:

  PairEvaluator(const contract::TestCase& tc, const kernels::Registry& registry, torch::Device device,
                stats::FloatFormat out_format, Runtime& runtime)
      : tc_(tc),
        family_(registry.family(tc.family)),
        ref_(registry.variant(tc.family, tc.reference.variant)),
        prod_(registry.variant(tc.family, tc.production.variant)),
        device_(device),
        working_(Precision::working(tc.probe.dtype)),
        exact_(Precision::exact()),
        flipping_(Precision::exact_flipping_near_ties(tc.probe.dtype)),
        out_dtype_(numerics::to_dtype(out_format)),
        fixed_cpu_(family_.make_fixed(tc.probe, stats::derive_seed(tc.probe.seed, kFixedStream))),
        fixed_w_(to_inputs(fixed_cpu_, device, std::nullopt)),
        fixed_64_(to_inputs(fixed_cpu_, device, torch::kFloat64)),
        runtime_(runtime) {}

  const kernels::Family& family() const { return family_; }
  double last_input_bytes_fp64() const override {
    double bytes = 0;
    for (const auto& [name, t] : batch_64_.tensors()) bytes += static_cast<double>(t.nbytes());
    const auto n = batch_64_.tensors().empty() ? 1 : batch_64_.tensors().begin()->second.size(0);
    return bytes / static_cast<double>(std::max<std::int64_t>(1, n));
  }

  PairOutputs evaluate(std::uint64_t first, std::int64_t count) override {
    const auto td = Clock::now();
    const auto stacked = draw_replicates(family_, tc_.probe, fixed_cpu_, tc_.probe.seed, first, count);
    batch_w_ = to_inputs(stacked, device_, std::nullopt);
    batch_64_ = to_inputs(stacked, device_, torch::kFloat64);
    const auto in_64 = merge(fixed_64_, batch_64_);
    runtime_.draw_seconds += seconds_since(td);

    const auto tk = Clock::now();
    PairOutputs out;
    {
      torch::NoGradGuard no_grad;
      out.ref = evaluate(ref_, fixed_w_, batch_w_, working_, tc_.reference.params);
      out.prod = evaluate(prod_, fixed_w_, batch_w_, working_, tc_.production.params);
      if (family_.selects) {
        auto notes = std::make_shared<Precision::NearTieNotes>();
        out.oracle = ref_.fn(in_64, Precision::exact_noting_near_ties(tc_.probe.dtype, notes), tc_.reference.params);
        out.oracle_alt = flipped_oracle(in_64, out.oracle, *notes);
      } else {
        out.oracle = evaluate(ref_, fixed_64_, batch_64_, exact_, tc_.reference.params);
      }
    }
    runtime_.kernel_seconds += seconds_since(tk);
    check_output(out.ref, "reference variant '" + tc_.reference.variant + "'", count, out_dtype_);
    check_output(out.prod, "production variant '" + tc_.production.variant + "'", count, out_dtype_);
    check_output(out.oracle, "reference variant '" + tc_.reference.variant + "' under the fp64 policy", count, torch::kFloat64);
    if (out.oracle_alt.defined() && out.oracle_alt.sizes() != out.oracle.sizes()) {
      throw std::invalid_argument("reference variant '" + tc_.reference.variant +
                                  "' changed its output shape when near ties were flipped: " +
                                  c10::str(out.oracle_alt.sizes()) + " vs " + c10::str(out.oracle.sizes()));
    }
    if (out.prod.sizes() != out.ref.sizes() || out.oracle.sizes() != out.ref.sizes()) {
      throw std::invalid_argument("reference and production outputs differ in shape: " + c10::str(out.ref.sizes()) +
                                  " vs " + c10::str(out.prod.sizes()));
    }
    return out;
  }

  // One variant on a batch, in row blocks where it can be (row_blocks.hpp: a one-thread whole
  // evaluation's bits, 0.4-0.7 of its kernel time on the norms).
  torch::Tensor evaluate(const kernels::Variant& v, const KernelInputs& fixed, const KernelInputs& batch,
                         const Precision& p, const kernels::ParamMap& params) {
    return engine::evaluate_variant(family_, v, fixed, batch, p, params, device_);
  }

  // A selecting family's second oracle (the reference with near ties flipped). It differs
  // from the oracle only in the decisions that are near ties, a few in 10^5 on most router
  // controls, so where the reference noted them (a built-in router kernel does) only the
  // replicates holding one are evaluated again, and only their noted rows taken from that run:
  // every other row is the oracle's, as the whole flipped run would give it bit for bit. A
  // reference that noted nothing usable (a Python or plugin kernel, or one that selects twice)
  // is evaluated whole under the flipping policy.
  torch::Tensor flipped_oracle(const KernelInputs& in_64, const torch::Tensor& oracle,
                               const Precision::NearTieNotes& notes) {
    const auto rows_shape = oracle.sizes().slice(0, static_cast<std::size_t>(std::max<std::int64_t>(oracle.dim() - 1, 0)));
    if (notes.selections != 1 || !notes.rows.defined() || oracle.dim() < 2 || notes.rows.sizes() != rows_shape ||
        notes.rows.scalar_type() != torch::kBool) {
      return ref_.fn(in_64, flipping_, tc_.reference.params);
    }
    const auto batch = oracle.size(0);
    const auto replicates = notes.rows.reshape({batch, -1}).any(1).nonzero().squeeze(1);
    if (replicates.numel() == 0) return oracle;
    const auto flipped = ref_.fn(merge(fixed_64_, select_batch(batch_64_, replicates)), flipping_, tc_.reference.params);
    auto expected = oracle.sizes().vec();
    expected[0] = replicates.numel();
    if (flipped.sizes() != at::IntArrayRef(expected)) {
      throw std::invalid_argument("reference variant '" + tc_.reference.variant +
                                  "' changed its output shape when near ties were flipped: " + c10::str(flipped.sizes()) +
                                  " vs " + c10::str(at::IntArrayRef(expected)));
    }
    auto alt = oracle.clone();
    const auto noted = notes.rows.index_select(0, replicates).unsqueeze(-1);
    alt.index_copy_(0, replicates, torch::where(noted, flipped.to(oracle.scalar_type()), oracle.index_select(0, replicates)));
    return alt;
  }

  // Production under the fp64 policy on the first k replicates of the last batch (the
  // algebra gate's run; the oracle is the reference's half of it).
  torch::Tensor production_fp64(std::int64_t k) override {
    const auto ta = Clock::now();
    torch::Tensor prod64;
    {
      torch::NoGradGuard no_grad;
      // Through evaluate() as the oracle: in row blocks where its k replicates make more than one
      // block. Where they fit in one it runs whole, which gives a blocked oracle's bits because
      // a row's result does not depend on the rows around it (row_blocks.hpp).
      prod64 = evaluate(prod_, fixed_64_, narrow_batch(batch_64_, 0, k), exact_, tc_.production.params);
    }
    runtime_.kernel_seconds += seconds_since(ta);
    check_output(prod64, "production variant '" + tc_.production.variant + "' under the fp64 policy", k, torch::kFloat64);
    return prod64;
  }

 private:
  const contract::TestCase& tc_;
  const kernels::Family& family_;
  const kernels::Variant& ref_;
  const kernels::Variant& prod_;
  torch::Device device_;
  Precision working_, exact_, flipping_;
  torch::Dtype out_dtype_;
  KernelInputs fixed_cpu_, fixed_w_, fixed_64_, batch_w_, batch_64_;
  Runtime& runtime_;
};

// The case runs under the run's math modes with its own on top; afterwards ATen's global
// context holds the run's modes again (numerics/math_modes.hpp).
class MathModesScope {
 public:
  explicit MathModesScope(const numerics::MathModes& case_modes)
      : in_effect(numerics::apply_math_modes(numerics::merged(numerics::process_math_modes(), case_modes),
                                             case_modes.bf16_reduced_precision_reduction.has_value())) {}
  ~MathModesScope() {
    try {
      numerics::apply_math_modes(numerics::process_math_modes(), false);
    } catch (...) {  // the run's own modes applied once already; a destructor must not throw
    }
  }
  MathModesScope(const MathModesScope&) = delete;
  MathModesScope& operator=(const MathModesScope&) = delete;
  const numerics::MathModes in_effect;
};


// The expectation's gates against three verdicts: what failed to match, in words.
std::vector<std::string> check_verdicts(const contract::Expectation& expected, Verdict algebra, Verdict bias, Verdict variance) {
  std::vector<std::string> out;
  const auto& e = expected.gates;
  auto check = [&](const char* gate, Verdict got) {
    const auto it = e.find(gate);
    if (it == e.end()) return;
    if (std::find(it->second.begin(), it->second.end(), got) != it->second.end()) return;
    std::string want;
    for (auto v : it->second) want += (want.empty() ? "" : "|") + std::string(stats::to_string(v));
    out.push_back(std::string(gate) + ": expected " + want + ", got " + std::string(stats::to_string(got)));
  };
  check("algebra", algebra);
  check("bias", bias);
  check("variance", variance);
  return out;
}

// A backward case's per-gradient expectations (`expected.gradients`), each message led by
// the gradient's name.
std::vector<std::string> check_gradients(const contract::Expectation& expected, const std::vector<GradientPoint>& gradients) {
  std::vector<std::string> out;
  for (const auto& [name, gates] : expected.gradients) {
    const auto it = std::find_if(gradients.begin(), gradients.end(), [&](const GradientPoint& g) { return g.name == name; });
    if (it == gradients.end()) {
      out.push_back(name + ": expected a result for this gradient, and the case has none");
      continue;
    }
    contract::Expectation one;
    one.gates = gates;
    for (auto& m : check_verdicts(one, it->algebra, it->bias, it->variance)) out.push_back(name + ": " + m);
  }
  return out;
}

// A composite result (a backward case's gradients, a swept case's settings) shows, gate by
// gate, the part with the worst verdict (stats::worst's order; the first part on ties), and
// the part with the worst overall verdict for everything else. One fold for both composites.
struct DecidingParts {
  std::size_t algebra = 0, bias = 0, variance = 0, overall = 0;
};

template <class Part>
DecidingParts deciding_parts(const std::vector<Part>& parts, const CaseResult& (*result_of)(const Part&)) {
  const auto worst_of = [&](auto verdict_of) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < parts.size(); ++i)
      if (stats::worst(verdict_of(result_of(parts[i])), verdict_of(result_of(parts[best]))) !=
          verdict_of(result_of(parts[best])))
        best = i;
    return best;
  };
  return {worst_of([](const CaseResult& r) { return r.algebra.verdict; }),
          worst_of([](const CaseResult& r) { return r.bias.verdict; }),
          worst_of([](const CaseResult& r) { return r.variance.verdict; }),
          worst_of([](const CaseResult& r) { return r.verdict; })};
}

// The work a part did, added to the composite's (replicates and the phases' seconds; the
// wall time is the caller's).
void add_work(CaseResult& out, const CaseResult& part) {
  out.replicates += part.replicates;
  out.runtime.kernel_seconds += part.runtime.kernel_seconds;
  out.runtime.draw_seconds += part.runtime.draw_seconds;
  out.runtime.observe_seconds += part.runtime.observe_seconds;
  out.runtime.stats_seconds += part.runtime.stats_seconds;
}

const CaseResult& itself(const CaseResult& r) { return r; }
const CaseResult& second_of(const std::pair<std::string, CaseResult>& p) { return p.second; }

SweepPoint point_of(const std::string& name, const std::string& probe_text, const CaseResult& r) {
  SweepPoint p;
  p.name = name;
  p.probe_text = probe_text;
  p.verdict = r.verdict;
  p.algebra = r.algebra.verdict;
  p.bias = r.bias.verdict;
  p.variance = r.variance.verdict;
  p.U = r.variance.tail.U;
  for (const auto* s : {&r.bias.signed_statistic, &r.bias.magnitude_statistic}) {
    if (!s->deciding) continue;
    p.max_abs_z = std::max(p.max_abs_z, s->max_abs_z);
    p.max_ulp_effect = std::max(p.max_ulp_effect, s->max_ulp_effect);
  }
  p.replicates = r.replicates;
  p.seconds = r.runtime.seconds;
  p.bias_reason = r.bias.reason;
  p.variance_reason = r.variance.reason;
  p.algebra_applicable = r.algebra.applicable;
  return p;
}

// The three gates (and the baseline checks) on one pair source: a forward pair, or one
// gradient of a backward. `bucket_ids` overrides the family's forward layout (a gradient's).
void run_gates(const contract::TestCase& tc, const kernels::Family& family, stats::FloatFormat out_format,
               PairSource& source, std::function<torch::Tensor(at::IntArrayRef)> bucket_ids, torch::Device device,
               const RunOptions& options, Clock::time_point t0, CaseResult& result) {
  const auto& g = tc.gates;
  gates::AlgebraGate algebra(static_cast<std::uint64_t>(g.algebra_replicates), g.algebra_tolerance);
  // An opaque production (no exact mode) is never run under the exact policy: bias and
  // variance still compare it with the reference and the reference's fp64 oracle.
  const auto& production = family.variants.at(tc.production.variant);
  if (!production.schema.exact) {
    algebra.not_applicable("opaque production '" + tc.production.variant +
                           "' (exact=False: no fp64 mode, so no fp64 run to compare; bias and variance use the reference's oracle)");
  }
  gates::BiasGate bias({g.replicates, g.bias, g.bias_deciding, tc.bucket_axis, g.bias_attribution}, out_format);
  gates::VarianceGate variance(g.variance, g.replicates, g.max_replicates, out_format);
  gates::BaselineChecks baselines(g.replicates, out_format);
  const std::array<gates::Gate*, 4> observers{&algebra, &bias, &variance, &baselines};
  const auto wanted = [&](std::uint64_t done) {
    std::uint64_t more = 0;
    for (auto* o : observers) more = std::max(more, o->wants_more(done));
    return more;
  };

  const bool beside_next_batch =
      options.sweep == SweepSchedule::beside_next_batch ||
      (options.sweep == SweepSchedule::automatic && !device.is_cpu());
  BatchPipeline pipeline(tc, family, out_format, source, algebra, observers,
                         {options.batch, beside_next_batch, options.progress, t0, std::move(bucket_ids)},
                         result.runtime);
  std::uint64_t done = 0;
  for (std::uint64_t more = wanted(done); more > 0 && !pipeline.nonfinite(); more = wanted(done)) {
    pipeline.observe_range(done, more);
    done += more;
  }
  std::uint64_t confirm = 0;
  for (auto* o : observers) confirm = std::max(confirm, o->wants_confirmation());
  if (confirm > 0 && !pipeline.nonfinite()) pipeline.observe_range(gates::kConfirmationBase, confirm);

  result.output_shape = pipeline.output_shape();
  result.nonfinite = pipeline.nonfinite();
  result.replicates = pipeline.evaluated();
  source.report_findings(algebra);
  result.algebra = algebra.decide();
  result.bias = bias.decide();
  result.variance = variance.decide();
  result.baselines = baselines.decide();
  result.runtime.stats_seconds = variance.analysis_seconds();
}

// What every result of a case records before its gates run.
CaseResult started_result(const contract::TestCase& tc_in, const RunOptions& options) {
  CaseResult result;
  result.testcase = with_overrides(tc_in, options);
  result.torch_version = numerics::torch_version();
  result.runtime.device = options.device;
  result.runtime.threads = at::get_num_threads();
  return result;
}

void finish(CaseResult& result, Clock::time_point t0) {
  result.verdict = stats::worst(result.algebra.verdict, stats::worst(result.bias.verdict, result.variance.verdict));
  result.runtime.seconds = seconds_since(t0);
  result.unexpected = check_expectation(result);
}

// One probe setting of a forward case: the three gates on the kernel pair's outputs.
CaseResult run_forward(const contract::TestCase& tc_in, const kernels::Registry& registry, const RunOptions& options) {
  const auto t0 = Clock::now();
  auto result = started_result(tc_in, options);
  const auto& tc = result.testcase;
  const auto& family = registry.family(tc.family);
  const auto out_format = family.output_format ? family.output_format(tc.probe) : tc.probe.dtype;
  result.output_format = out_format;
  const auto device = resolve_device(options.device);
  const MathModesScope math_modes(tc.math_modes);
  result.math_modes = math_modes.in_effect;
  PairEvaluator pair(tc, registry, device, out_format, result.runtime);
  run_gates(tc, family, out_format, pair, {}, device, options, t0, result);
  finish(result, t0);
  return result;
}

// One probe setting of a backward case (issue 31): the three gates on each gradient, with the
// gradient's own buckets; each gate's result is the worst over the gradients (the first on
// ties, in the family's order), and the result names the gradient that decided.
CaseResult run_backward(const contract::TestCase& tc_in, const kernels::Registry& registry, const RunOptions& options) {
  const auto t0 = Clock::now();
  auto base = started_result(tc_in, options);
  const auto& tc = base.testcase;
  const auto& family = registry.family(tc.family);
  if (family.gradients.empty()) throw std::invalid_argument("family '" + tc.family + "' has no backward");
  const auto& ref = registry.variant(tc.family, tc.reference.variant);
  const auto& prod = registry.variant(tc.family, tc.production.variant);
  // An opaque production (exact=False) is run at W only: its gradients' algebra gates are not
  // applicable (run_gates), and the fp64 run that also checks an explicit backward against its
  // own forward's VJP never happens. The structural checks of its W gradients still apply.
  // A gradient is in its input's dtype: W for the activations, a fixed input's own (an fp32
  // router weight's gradient is fp32, judged in fp32 ULPs).
  base.output_format = tc.probe.dtype;
  const auto device = resolve_device(options.device);
  const MathModesScope math_modes(tc.math_modes);
  base.math_modes = math_modes.in_effect;
  const auto fixed = family.make_fixed(tc.probe, stats::derive_seed(tc.probe.seed, kFixedStream));
  const auto dy_seed = stats::derive_seed(tc.probe.seed, kUpstreamGradientStream);

  std::vector<std::string> names = tc.backward.gradients;
  if (names.empty())
    for (const auto& g : family.gradients) names.push_back(g.schema.name);
  std::vector<CaseResult> runs;
  for (const auto& name : names) {
    const auto* gradient = family.find_gradient(name);
    if (!gradient) throw std::invalid_argument("family '" + tc.family + "' has no gradient '" + name + "'");
    const auto t1 = Clock::now();
    CaseResult r = base;
    const auto axis_it = tc.backward.buckets.find(name);
    r.testcase.bucket_axis = axis_it != tc.backward.buckets.end() ? axis_it->second : gradient->schema.bucket_axes.front();
    GradientPair pair(r.testcase, family, *gradient, ref, prod, fixed, device, dy_seed, r.runtime);
    auto ids = [gradient, axis = r.testcase.bucket_axis, &probe = tc.probe](at::IntArrayRef shape) {
      return gradient->bucket_ids(axis, probe, shape);
    };
    auto out_format = tc.probe.dtype;
    if (const auto it = fixed.tensors().find(gradient->schema.input);
        it != fixed.tensors().end() && it->second.scalar_type() == torch::kFloat32)
      out_format = stats::FloatFormat::fp32;
    r.output_format = out_format;
    try {
      run_gates(r.testcase, family, out_format, pair, ids, device, options, t1, r);
    } catch (const std::exception& e) {
      throw std::runtime_error("gradient " + name + ": " + e.what());
    }
    r.verdict = stats::worst(r.algebra.verdict, stats::worst(r.bias.verdict, r.variance.verdict));
    r.runtime.seconds = seconds_since(t1);
    GradientPoint p;
    static_cast<SweepPoint&>(p) = point_of(name, "", r);
    p.input = gradient->schema.input;
    p.bucket_axis = r.testcase.bucket_axis;
    p.reduces = gradient->schema.reduces;
    p.reduction_size = gradient->reduction_size ? gradient->reduction_size(tc.probe) : 0;
    p.shape = r.output_shape;
    p.output_format = out_format;
    p.algebra_discrepancy = r.algebra.worst_discrepancy;
    p.algebra_reason = r.algebra.reason;
    p.own_forward_discrepancy = pair.own_forward_discrepancy();
    base.gradients.push_back(std::move(p));
    runs.push_back(std::move(r));
  }
  const auto [a, b, v, o] = deciding_parts(runs, itself);
  CaseResult out = std::move(base);
  out.algebra = runs[a].algebra;
  out.bias = runs[b].bias;
  out.variance = runs[v].variance;
  // Today's checks flag a backward when they flag any of its gradients (FlashAttention's tests
  // apply their rule per gradient).
  out.baselines = runs[o].baselines;
  for (const auto& r : runs) {
    for (auto [mine, theirs] : {std::pair{&out.baselines.assert_close, &r.baselines.assert_close},
                                std::pair{&out.baselines.flash_attention, &r.baselines.flash_attention},
                                std::pair{&out.baselines.dynamo_fp64, &r.baselines.dynamo_fp64}}) {
      if (theirs->flagged && !mine->flagged) *mine = *theirs;
    }
  }
  out.output_shape = runs[o].output_shape;
  out.nonfinite = runs[b].nonfinite;
  out.runtime.batch = runs[o].runtime.batch;
  for (const auto& r : runs) add_work(out, r);
  out.gradient_decided_by = {{"algebra", names[a]}, {"bias", names[b]}, {"variance", names[v]}, {"overall", names[o]}};
  finish(out, t0);
  return out;
}

// One probe setting: the case's direction.
CaseResult run_setting(const contract::TestCase& tc, const kernels::Registry& registry, const RunOptions& options) {
  return tc.direction == contract::Direction::backward ? run_backward(tc, registry, options)
                                                       : run_forward(tc, registry, options);
}

}  // namespace

CaseResult run_case(const contract::TestCase& tc, const kernels::Registry& registry, const RunOptions& options) {
  if (tc.sweep.empty()) return run_setting(tc, registry, options);
  // A swept case (issue 30: one probe certifies one region of the input space): the contract
  // and every setting run as cases of their own; each gate's result is the worst over them
  // (the first on ties, the contract first), and the result names the setting that decided.
  auto contract_case = tc;
  contract_case.sweep.clear();
  std::vector<std::pair<std::string, CaseResult>> runs;
  runs.emplace_back("contract", run_setting(contract_case, registry, options));
  for (const auto& s : tc.sweep) {
    auto one = *s.testcase;
    // The nightly's calibration (warn_K, fail_K, floors) set on the case applies to every setting.
    one.calibration = tc.calibration;
    one.gates = tc.gates;
    try {
      runs.emplace_back(s.name, run_setting(one, registry, options));
    } catch (const std::exception& e) {
      throw std::runtime_error("sweep setting '" + s.name + "': " + e.what());
    }
  }
  const auto [a, b, v, o] = deciding_parts(runs, second_of);
  CaseResult out = runs[o].second;
  out.algebra = runs[a].second.algebra;
  out.bias = runs[b].second.bias;
  out.variance = runs[v].second.variance;
  out.verdict = stats::worst(out.algebra.verdict, stats::worst(out.bias.verdict, out.variance.verdict));
  out.testcase = runs.front().second.testcase;
  out.testcase.sweep = tc.sweep;
  out.replicates = 0;
  out.runtime.seconds = out.runtime.kernel_seconds = out.runtime.draw_seconds = out.runtime.observe_seconds =
      out.runtime.stats_seconds = 0.0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i].second;
    add_work(out, r);
    out.runtime.seconds += r.runtime.seconds;
    out.sweep.push_back(point_of(runs[i].first, i == 0 ? std::string() : tc.sweep[i - 1].probe_text, r));
  }
  // A non-finite value stops the bias gate's own run: report the one behind the bias result
  // shown (its frontier is void), not another setting's.
  out.nonfinite = runs[b].second.nonfinite;
  out.decided_by = {{"algebra", runs[a].first}, {"bias", runs[b].first}, {"variance", runs[v].first},
                    {"overall", runs[o].first}};
  // The expectation holds for the case's worst verdicts, gate by gate.
  out.unexpected = check_expectation(out);
  return out;
}

contract::TestCase as_run(const contract::TestCase& tc, const RunOptions& options) {
  if (tc.sweep.empty()) return with_overrides(tc, options);
  // As run_case builds a swept case's result: the contract's case, with the sweep kept.
  auto contract_case = tc;
  contract_case.sweep.clear();
  auto out = with_overrides(contract_case, options);
  out.sweep = tc.sweep;
  return out;
}

std::vector<std::string> check_expectation(const CaseResult& r) {
  auto out = check_verdicts(r.testcase.expected, r.algebra.verdict, r.bias.verdict, r.variance.verdict);
  for (auto& m : check_gradients(r.testcase.expected, r.gradients)) out.push_back(std::move(m));
  return out;
}

}  // namespace kcert::engine
