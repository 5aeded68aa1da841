#include "harness/engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "harness/engine/observations.hpp"
#include "harness/gates/bias_gate.hpp"
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

KernelInputs to_inputs(const KernelInputs& in, torch::Device device, std::optional<torch::Dtype> dtype) {
  KernelInputs out;
  for (const auto& [name, t] : in.tensors()) {
    auto moved = t.to(device);
    // Only floating inputs change precision; positions, masks and ids keep their type.
    if (dtype && moved.is_floating_point()) moved = moved.to(*dtype);
    out.set(name, moved);
  }
  return out;
}

KernelInputs merge(const KernelInputs& a, const KernelInputs& b) {
  KernelInputs out = a;
  for (const auto& [name, t] : b.tensors()) out.set(name, t);
  return out;
}

KernelInputs narrow_batch(const KernelInputs& batched, std::int64_t k) {
  KernelInputs out;
  for (const auto& [name, t] : batched.tensors()) out.set(name, t.narrow(0, 0, k));
  return out;
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

std::int64_t automatic_batch(std::int64_t elements_per_replicate) {
  // About 4 Mi output elements per call: large enough to amortize dispatch, small enough
  // that the fp64 copies stay far below memory limits.
  const std::int64_t target = std::int64_t{1} << 22;
  return std::clamp<std::int64_t>(target / std::max<std::int64_t>(1, elements_per_replicate), 1, 256);
}

struct AlgebraState {
  double worst = 0.0;
  gates::Location where;
  bool pattern_mismatch = false;
  int replicates = 0;
};

// d_r = max_i |prod_i - ref_i| / max(max_i |ref_i|, tiny) under the fp64 policy, with
// NaN/Inf patterns required to agree.
void algebra_compare(const torch::Tensor& ref64_t, const torch::Tensor& prod64_t, std::int64_t first,
                     const BucketLayout& layout, at::IntArrayRef shape, AlgebraState& st) {
  const auto ref64 = ref64_t.to(torch::kCPU).contiguous();
  const auto prod64 = prod64_t.to(torch::kCPU).contiguous();
  const auto n = static_cast<std::int64_t>(layout.ids.size());
  const double* r = ref64.data_ptr<double>();
  const double* p = prod64.data_ptr<double>();
  for (std::int64_t b = 0; b < ref64.size(0); ++b, r += n, p += n) {
    double max_ref = 0.0, max_diff = 0.0;
    std::int64_t arg = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const bool fr = std::isfinite(r[i]), fp = std::isfinite(p[i]);
      if (!fr || !fp) {
        const bool same = (std::isnan(r[i]) && std::isnan(p[i])) || (!fr && !fp && r[i] == p[i]);
        if (!same && !st.pattern_mismatch) {
          st.pattern_mismatch = true;
          st.where = {first + b, i, unravel(i, shape), layout.ids[static_cast<std::size_t>(i)]};
        }
        continue;
      }
      max_ref = std::max(max_ref, std::fabs(r[i]));
      const double d = std::fabs(p[i] - r[i]);
      if (d > max_diff) {
        max_diff = d;
        arg = i;
      }
    }
    const double d_r = max_diff / std::max(max_ref, std::numeric_limits<double>::min());
    if (d_r > st.worst || st.replicates == 0) {
      if (!st.pattern_mismatch) st.where = {first + b, arg, unravel(arg, shape), layout.ids[static_cast<std::size_t>(arg)]};
      st.worst = std::max(st.worst, d_r);
    }
    ++st.replicates;
  }
}

// Counts, replicate by replicate, what today's checks would say.
class BaselineTally {
 public:
  void observe(const ReplicateObservation& o, std::uint64_t replicate, stats::FloatFormat working) {
    const double eps = stats::ulp_spacing(std::min(o.peak, stats::max_finite(working)), working);
    const double fa_allowed = 2.0 * o.e_ref + eps;
    const double dyn_allowed = 3.0 * o.rmse_ref + 1e-5;
    const bool close = o.close_violations > 0.0, fa = o.e_prod > fa_allowed, dyn = o.rmse_prod > dyn_allowed;
    if (replicate == 0) {
      out_.assert_close = {close, 0.0, o.close_violations};
      out_.flash_attention = {fa, 0.0, o.e_prod / fa_allowed};
      out_.dynamo_fp64 = {dyn, 0.0, o.rmse_prod / dyn_allowed};
    }
    close_ += close;
    fa_ += fa;
    dyn_ += dyn;
    ++n_;
  }
  Baselines finish() const {
    Baselines b = out_;
    if (n_ > 0) {
      b.assert_close.fraction = static_cast<double>(close_) / static_cast<double>(n_);
      b.flash_attention.fraction = static_cast<double>(fa_) / static_cast<double>(n_);
      b.dynamo_fp64.fraction = static_cast<double>(dyn_) / static_cast<double>(n_);
    }
    return b;
  }

 private:
  Baselines out_;
  std::uint64_t close_ = 0, fa_ = 0, dyn_ = 0, n_ = 0;
};

std::string location_text(const gates::Location& l) {
  std::string idx;
  for (auto i : l.index) idx += (idx.empty() ? "" : ",") + std::to_string(i);
  return "replicate " + std::to_string(l.replicate) + ", element [" + idx + "], bucket " + std::to_string(l.bucket);
}

}  // namespace

CaseResult run_case(const testcase::TestCase& tc_in, const kernels::Registry& registry, const RunOptions& options) {
  const auto t0 = Clock::now();
  CaseResult result;
  result.testcase = tc_in;
  auto& tc = result.testcase;
  if (options.replicates) {
    tc.gates.replicates = *options.replicates;
    tc.gates.max_replicates = std::max(tc.gates.max_replicates, tc.gates.replicates);
    tc.gates.algebra_replicates = static_cast<int>(std::min<std::uint64_t>(tc.gates.algebra_replicates, tc.gates.replicates));
  }
  if (options.seed) tc.probe.seed = *options.seed;
  if (tc.gates.replicates < 2) throw std::invalid_argument("replicates must be at least 2");
  tc.gates.variance.seed = stats::derive_seed(tc.probe.seed, kBootstrapStream);

  const auto& family = registry.family(tc.family);
  const auto& ref = registry.variant(tc.family, tc.reference.variant);
  const auto& prod = registry.variant(tc.family, tc.production.variant);
  const auto device = resolve_device(options.device);
  const auto working = Precision::working(tc.probe.dtype);
  const auto out_format = family.output_format ? family.output_format(tc.probe) : tc.probe.dtype;
  const auto out_dtype = numerics::to_dtype(out_format);
  result.output_format = out_format;
  const auto exact = Precision::exact();
  result.torch_version = numerics::torch_version();
  result.runtime.device = options.device;
  result.runtime.threads = at::get_num_threads();

  const auto fixed_cpu = family.make_fixed(tc.probe, stats::derive_seed(tc.probe.seed, kFixedStream));
  const auto fixed_w = to_inputs(fixed_cpu, device, std::nullopt);
  const auto fixed_64 = to_inputs(fixed_cpu, device, torch::kFloat64);

  std::optional<gates::BiasAccumulator> bias;
  std::optional<BucketLayout> layout;
  std::vector<double> khat;
  AlgebraState algebra;
  std::vector<std::int64_t> out_shape;
  double kernel_seconds = 0.0;
  BaselineTally baselines;

  const std::uint64_t R = tc.gates.replicates;
  std::uint64_t target = R;
  std::uint64_t done = 0;
  std::int64_t batch = options.batch;
  gates::VarianceResult variance;

  while (true) {
    while (done < target) {
      const std::int64_t b = batch > 0 ? std::min<std::int64_t>(batch, static_cast<std::int64_t>(target - done))
                                       : static_cast<std::int64_t>(std::min<std::uint64_t>(target - done, 1));
      // Draw each replicate from its own stream, then stack along the batch dimension.
      const auto td = Clock::now();
      std::map<std::string, std::vector<torch::Tensor>> parts;
      for (std::int64_t j = 0; j < b; ++j) {
        const auto rep = family.make_replicate(tc.probe, fixed_cpu, stats::derive_seed(tc.probe.seed, done + static_cast<std::uint64_t>(j)));
        for (const auto& [name, t] : rep.tensors()) parts[name].push_back(t);
      }
      KernelInputs stacked;
      for (auto& [name, list] : parts) stacked.set(name, torch::stack(list));
      const auto batch_w = to_inputs(stacked, device, std::nullopt);
      const auto batch_64 = to_inputs(stacked, device, torch::kFloat64);
      const auto in_w = merge(fixed_w, batch_w);
      const auto in_64 = merge(fixed_64, batch_64);
      result.runtime.draw_seconds += seconds_since(td);

      const auto tk = Clock::now();
      torch::Tensor ref_w, prod_w, oracle;
      {
        torch::NoGradGuard no_grad;
        ref_w = ref.fn(in_w, working, tc.reference.params);
        prod_w = prod.fn(in_w, working, tc.production.params);
        oracle = ref.fn(in_64, exact, tc.reference.params);
      }
      kernel_seconds += seconds_since(tk);
      check_output(ref_w, "reference variant '" + tc.reference.variant + "'", b, out_dtype);
      check_output(prod_w, "production variant '" + tc.production.variant + "'", b, out_dtype);
      check_output(oracle, "reference variant '" + tc.reference.variant + "' under the fp64 policy", b, torch::kFloat64);
      if (prod_w.sizes() != ref_w.sizes() || oracle.sizes() != ref_w.sizes()) {
        throw std::invalid_argument("reference and production outputs differ in shape: " + c10::str(ref_w.sizes()) +
                                    " vs " + c10::str(prod_w.sizes()));
      }

      if (!layout) {
        out_shape.assign(ref_w.sizes().begin() + 1, ref_w.sizes().end());
        layout = make_bucket_layout(family.bucket_ids(tc.bucket_axis, tc.probe, out_shape), out_shape);
        bias.emplace(static_cast<std::size_t>(layout->buckets));
        if (batch <= 0) batch = automatic_batch(static_cast<std::int64_t>(layout->ids.size()));
        result.runtime.batch = batch;
      }

      const auto to = Clock::now();
      // Algebra: production under the fp64 policy on the first N_alg replicates.
      const auto n_alg = static_cast<std::uint64_t>(tc.gates.algebra_replicates);
      if (done < n_alg) {
        const auto k = static_cast<std::int64_t>(std::min<std::uint64_t>(n_alg - done, static_cast<std::uint64_t>(b)));
        torch::Tensor prod64;
        {
          const auto ta = Clock::now();
          torch::NoGradGuard no_grad;
          prod64 = prod.fn(merge(fixed_64, narrow_batch(batch_64, k)), exact, tc.production.params);
          kernel_seconds += seconds_since(ta);
        }
        check_output(prod64, "production variant '" + tc.production.variant + "' under the fp64 policy", k, torch::kFloat64);
        algebra_compare(oracle.narrow(0, 0, k), prod64, static_cast<std::int64_t>(done), *layout, out_shape, algebra);
      }

      auto obs = observe(ref_w, prod_w, oracle, *layout, static_cast<std::int64_t>(done), out_shape, out_format);
      if (obs.nonfinite) {
        result.nonfinite = obs.nonfinite;
        done += static_cast<std::uint64_t>(b);
        break;
      }
      for (const auto& o : obs.replicates) {
        if (done < R) {
          bias->add(o.delta, o.magnitude, o.abs_oracle);  // the bias gate's R is pre-declared
          baselines.observe(o, done, out_format);
        }
        khat.push_back(k_hat(o, out_format));
        ++done;
      }
      result.runtime.observe_seconds += seconds_since(to);
      if (options.progress) options.progress(Progress{&tc.id, done, target, seconds_since(t0)});
    }
    if (result.nonfinite) break;

    const auto ts = Clock::now();
    auto analysis = stats::analyze_tail(khat, tc.gates.variance);
    result.runtime.stats_seconds += seconds_since(ts);
    const auto step = stats::next_sampling_step(analysis, done, tc.gates.max_replicates);
    variance.looks.push_back(done);
    variance.tail = std::move(analysis);
    variance.stop = step.reason;
    variance.unstable = step.unstable;
    if (step.stop) break;
    target = step.next_replicates;
  }

  result.replicates = done;
  result.output_shape = out_shape;
  result.baselines = baselines.finish();
  variance.khat = khat;

  // Algebra verdict.
  auto& alg = result.algebra;
  alg.replicates = algebra.replicates;
  alg.tolerance = tc.gates.algebra_tolerance;
  alg.worst_discrepancy = algebra.worst;
  alg.worst = algebra.where;
  if (algebra.pattern_mismatch) {
    alg.verdict = Verdict::fail;
    alg.reason = "NaN/Inf patterns differ under the fp64 policy at " + location_text(algebra.where);
  } else if (algebra.worst > alg.tolerance) {
    alg.verdict = Verdict::fail;
    alg.reason = "different real functions: max relative discrepancy " + std::to_string(algebra.worst) + " > " +
                 std::to_string(alg.tolerance) + " at " + location_text(algebra.where);
  } else {
    alg.verdict = Verdict::pass;
    alg.reason = "same function on " + std::to_string(algebra.replicates) + " fp64 replicates (max discrepancy " +
                 std::to_string(algebra.worst) + ")";
  }

  if (result.nonfinite) {
    const auto& nf = *result.nonfinite;
    const std::string why = "non-finite output (" + nf.value + ") from the " + nf.side + " at " + location_text(nf.where);
    result.bias.verdict = Verdict::fail;
    result.bias.reason = why;
    result.bias.axis = tc.bucket_axis;
    variance.verdict = Verdict::fail;
    variance.reason = why;
    result.variance = variance;
    result.verdict = Verdict::fail;
  } else {
    result.bias = bias->decide(tc.gates.bias, tc.gates.bias_deciding, out_format, tc.bucket_axis);
    variance.verdict = variance.tail.verdict;
    variance.reason = variance.tail.reason + (variance.unstable ? " (unstable: R_max reached)" : "");
    result.variance = variance;
    result.verdict = stats::worst(alg.verdict, stats::worst(result.bias.verdict, result.variance.verdict));
  }
  result.runtime.kernel_seconds = kernel_seconds;
  result.runtime.seconds = seconds_since(t0);
  result.unexpected = check_expectation(result);
  return result;
}

std::vector<std::string> check_expectation(const CaseResult& r) {
  std::vector<std::string> out;
  const auto& e = r.testcase.expected.gates;
  auto check = [&](const char* gate, Verdict got) {
    const auto it = e.find(gate);
    if (it == e.end()) return;
    if (std::find(it->second.begin(), it->second.end(), got) != it->second.end()) return;
    std::string want;
    for (auto v : it->second) want += (want.empty() ? "" : "|") + std::string(stats::to_string(v));
    out.push_back(std::string(gate) + ": expected " + want + ", got " + std::string(stats::to_string(got)));
  };
  check("algebra", r.algebra.verdict);
  check("bias", r.bias.verdict);
  check("variance", r.variance.verdict);
  return out;
}

}  // namespace kcert::engine
