#include "harness/engine/gradient_pair.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>

#include "harness/engine/draw.hpp"
#include "harness/kernels/probe.hpp"
#include "harness/kernels/vjp.hpp"
#include "harness/stats/format.hpp"
#include "harness/stats/random.hpp"
#include "harness/stats/ulp.hpp"

namespace kcert::engine {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string shape_text(const torch::Tensor& t) { return t.defined() ? c10::str(t.sizes()) : std::string("undefined"); }

double max_abs(const torch::Tensor& t) { return t.numel() == 0 ? 0.0 : t.abs().max().item<double>(); }

}  // namespace

GradientPair::GradientPair(const contract::TestCase& tc, const kernels::Family& family,
                           const kernels::Family::Gradient& gradient, const kernels::Variant& reference,
                           const kernels::Variant& production, const kernels::KernelInputs& fixed_cpu,
                           torch::Device device, std::uint64_t dy_seed, Runtime& runtime)
    : tc_(tc),
      family_(family),
      gradient_(gradient),
      ref_(reference),
      prod_(production),
      device_(device),
      working_(numerics::Precision::working(tc.probe.dtype)),
      exact_(numerics::Precision::exact()),
      flipping_(numerics::Precision::exact_flipping_near_ties(tc.probe.dtype)),
      working_dtype_(numerics::to_dtype(tc.probe.dtype)),
      fixed_cpu_(fixed_cpu),
      fixed_w_(to_inputs(fixed_cpu, device, std::nullopt)),
      fixed_64_(to_inputs(fixed_cpu, device, torch::kFloat64)),
      fixed_input_(fixed_cpu.tensors().count(gradient.schema.input) > 0),
      dy_seed_(dy_seed),
      runtime_(runtime),
      wrt_{gradient.schema.input} {}

// A gradient of one replicate with the batch dimension of one the pipeline stacks along: a
// fixed input's gradient has the input's own shape.
torch::Tensor GradientPair::per_replicate(const torch::Tensor& g) const { return fixed_input_ ? g.unsqueeze(0) : g; }

torch::Tensor GradientPair::checked_production(torch::Tensor g, const torch::Tensor& like, const char* where) {
  const auto& name = gradient_.schema.name;
  std::string problem;
  if (!g.defined()) {
    problem = "production backward returned no gradient for " + gradient_.schema.input + " (" + name + ")";
  } else if (g.sizes() != like.sizes()) {
    problem = "production backward returned " + name + " of shape " + shape_text(g) + ", the reference " + shape_text(like);
  } else if (g.scalar_type() != like.scalar_type()) {
    problem = "production backward returned " + name + " as " + std::string(c10::toString(g.scalar_type())) +
              ", expected " + c10::toString(like.scalar_type()) + " (the input's dtype)";
  } else if (max_abs(g) == 0.0 && max_abs(like) > 0.0) {
    problem = "production backward returned an all-zero " + name + " where the reference's is not";
  }
  if (problem.empty()) return g;
  if (structural_.empty()) structural_ = problem + std::string(where);
  return torch::zeros_like(like);
}

torch::Tensor draw_dy(kernels::InputStream& stream, const torch::Tensor& y64, const contract::BackwardProbe& bw) {
  const auto device = y64.device();
  const auto shape = y64.sizes();
  // Rows: every axis but the last, flattened.
  const auto last = shape.empty() ? std::int64_t{1} : shape.back();
  const auto rows = y64.numel() / std::max<std::int64_t>(1, last);
  torch::Tensor dy;
  if (bw.dy_law == contract::DyLaw::heavy_tailed) {
    // Student t with 3 df, z / sqrt(chi²₃ / 3), from four normals per element.
    const auto z = stream.normal(shape, torch::kFloat64);
    auto chi = torch::zeros(shape, torch::kFloat64);
    for (int k = 0; k < 3; ++k) chi = chi + stream.normal(shape, torch::kFloat64).square();
    dy = (z / (chi / 3.0).sqrt()).to(device) * bw.dy_scale + bw.dy_shift;
  } else if (bw.dy_law == contract::DyLaw::loss_shaped) {
    // softmax(l) - onehot(t) per row: l ~ N(0, scale²), the target's logit raised by margin.
    auto logits = stream.normal({rows, last}, torch::kFloat64) * bw.dy_scale;
    const auto target = stream.integers(last, {rows});
    const auto onehot = torch::zeros({rows, last}, torch::kFloat64).scatter_(1, target.unsqueeze(1), 1.0);
    logits = logits + onehot * bw.dy_margin;
    dy = (torch::softmax(logits, 1) - onehot).reshape(shape).to(device);
  } else {
    dy = stream.normal(shape, torch::kFloat64).to(device) * bw.dy_scale + bw.dy_shift;
    if (bw.dy_law == contract::DyLaw::self_correlated) dy = dy + y64;
  }
  if (bw.dy_zero_rows > 0 || bw.dy_huge_row != 1.0) {
    auto flat = dy.reshape({rows, last}).clone();
    // Evenly spaced zero rows from row 0 (as the forward's outlier channels), at most every row.
    const auto n = std::min<std::int64_t>(bw.dy_zero_rows, rows);
    for (std::int64_t i = 0; i < n; ++i) flat[i * rows / n].zero_();
    if (bw.dy_huge_row != 1.0 && rows > 0) flat[rows - 1].mul_(bw.dy_huge_row);
    dy = flat.reshape(shape);
  }
  return dy;
}

// A dy probe that carries nothing, or more than W holds, is the case's error, not a verdict
// (issue 53, item 9): every row zeroed (zero_rows >= rows) or a scale that underflows W gave
// all-zero gradients on both sides, and a negative control PASSed every gate; an fp16 dy that
// overflows gave inf gradients, and a correct pair FAILed with the production blamed.
void GradientPair::check_upstream_gradient(const torch::Tensor& dy, const torch::Tensor& dy_w) const {
  const auto& bw = tc_.backward;
  const std::string w(stats::traits(tc_.probe.dtype).name);
  const auto num = [](double v) { return stats::format_number(v); };
  const double largest = max_abs(dy_w);  // one reduction: inf or NaN when it overflowed, 0 when it carries nothing
  if (!std::isfinite(largest)) {
    throw std::invalid_argument("backward.dy: the upstream gradient overflows " + w + " (max |dy| " + num(max_abs(dy)) +
                                " before rounding; scale " + num(bw.dy_scale) + ", huge_row x" + num(bw.dy_huge_row) +
                                "): lower backward.dy.scale or huge_row");
  }
  if (largest == 0.0) {
    const auto last = dy.dim() == 0 ? std::int64_t{1} : dy.size(-1);
    const auto rows = dy.numel() / std::max<std::int64_t>(1, last);
    throw std::invalid_argument(
        "backward.dy: the upstream gradient is zero in " + w + " (zero_rows " + std::to_string(bw.dy_zero_rows) + " of " +
        std::to_string(rows) + " rows, scale " + num(bw.dy_scale) + ", max |dy| " + num(max_abs(dy)) +
        " before rounding): every gradient is zero on both sides and the gates would certify nothing");
  }
}

PairOutputs GradientPair::evaluate(std::uint64_t first, std::int64_t count) {
  const auto td = Clock::now();
  const auto stacked = draw_replicates(family_, tc_.probe, fixed_cpu_, tc_.probe.seed, first, count);
  const auto batch_w = to_inputs(stacked, device_, std::nullopt);
  const auto batch_64 = to_inputs(stacked, device_, torch::kFloat64);
  runtime_.draw_seconds += seconds_since(td);
  const auto& input = gradient_.schema.input;
  const auto& bw = tc_.backward;
  std::vector<torch::Tensor> ref, prod, oracle, oracle_alt;
  last_64_.clear();
  last_dy64_.clear();
  input_bytes_fp64_ = 0;
  for (std::int64_t j = 0; j < count; ++j) {
    const auto in_w = merge(fixed_w_, narrow_batch(batch_w, j, 1));
    const auto in_64 = merge(fixed_64_, narrow_batch(batch_64, j, 1));
    const auto t0 = Clock::now();
    torch::Tensor y64;
    // A selecting family's forward notes its near ties (numerics::Precision::NearTieNotes):
    // a replicate without one needs no second oracle, the flipped run would give the first's
    // bits (issue 37).
    std::optional<bool> has_near_tie;
    {
      torch::NoGradGuard no_grad;
      if (family_.selects) {
        auto notes = std::make_shared<numerics::Precision::NearTieNotes>();
        y64 = ref_.fn(in_64, numerics::Precision::exact_noting_near_ties(tc_.probe.dtype, notes), tc_.reference.params);
        if (notes->selections == 1 && notes->rows.defined() && notes->rows.scalar_type() == torch::kBool)
          has_near_tie = notes->rows.any().item<bool>();
      } else {
        y64 = ref_.fn(in_64, exact_, tc_.reference.params);
      }
    }
    // dy: N(shift, scale²) from the replicate's own dy stream, plus the oracle's output for
    // the self-correlated kind; rounded to W, and the oracle gets exactly that W value.
    kernels::InputStream stream(stats::derive_seed(dy_seed_, first + static_cast<std::uint64_t>(j)));
    const auto dy = draw_dy(stream, y64, bw);
    const auto dy_w = dy.to(working_dtype_);
    check_upstream_gradient(dy, dy_w);
    const auto dy_64 = dy_w.to(torch::kFloat64);
    const auto t1 = Clock::now();
    runtime_.draw_seconds += std::chrono::duration<double>(t1 - t0).count();

    auto r = kernels::variant_vjp(ref_, in_w, wrt_, working_, tc_.reference.params, dy_w)[input];
    if (!r.defined())
      throw std::invalid_argument("reference variant '" + tc_.reference.variant + "' gives no gradient for input '" + input + "'");
    if (r.scalar_type() != in_w.at(input).scalar_type())
      throw std::invalid_argument("reference variant '" + tc_.reference.variant + "' returned " + gradient_.schema.name + " as " +
                                  c10::toString(r.scalar_type()) + ", expected " + c10::toString(in_w.at(input).scalar_type()) +
                                  " (the input's dtype)");
    auto o = kernels::variant_vjp(ref_, in_64, wrt_, exact_, tc_.reference.params, dy_64)[input];
    if (!o.defined() || o.sizes() != r.sizes())
      throw std::invalid_argument("reference variant '" + tc_.reference.variant + "' under the fp64 policy gives " +
                                  gradient_.schema.name + " of shape " + shape_text(o) + ", at W " + shape_text(r));
    auto p = checked_production(kernels::variant_vjp(prod_, in_w, wrt_, working_, tc_.production.params, dy_w)[input], r, "");
    runtime_.kernel_seconds += seconds_since(t1);
    ref.push_back(per_replicate(r));
    prod.push_back(per_replicate(p));
    oracle.push_back(per_replicate(o.to(torch::kFloat64)));
    if (family_.selects) {
      // A token whose top-k the working precision cannot resolve routes its gradient through
      // either expert set: each side's error is taken against the closer of the two oracles.
      auto alt = has_near_tie == false ? o : kernels::variant_vjp(ref_, in_64, wrt_, flipping_, tc_.reference.params, dy_64)[input];
      if (!alt.defined() || alt.sizes() != o.sizes())
        throw std::invalid_argument("reference variant '" + tc_.reference.variant + "' changed " + gradient_.schema.name +
                                    "'s shape when near ties were flipped");
      oracle_alt.push_back(per_replicate(alt.to(torch::kFloat64)));
    }
    for (const auto& [n, t] : in_64.tensors()) input_bytes_fp64_ += static_cast<double>(t.nbytes());
    last_64_.push_back(in_64);
    last_dy64_.push_back(dy_64);
  }
  input_bytes_fp64_ /= static_cast<double>(std::max<std::int64_t>(1, count));
  PairOutputs out;
  out.ref = torch::cat(ref);
  out.prod = torch::cat(prod);
  out.oracle = torch::cat(oracle);
  if (!oracle_alt.empty()) out.oracle_alt = torch::cat(oracle_alt);
  return out;
}

torch::Tensor GradientPair::production_fp64(std::int64_t k) {
  const auto ta = Clock::now();
  const auto& input = gradient_.schema.input;
  std::vector<torch::Tensor> out;
  for (std::int64_t j = 0; j < k && j < static_cast<std::int64_t>(last_64_.size()); ++j) {
    const auto& in = last_64_[static_cast<std::size_t>(j)];
    const auto& dy = last_dy64_[static_cast<std::size_t>(j)];
    const auto like = kernels::variant_vjp(ref_, in, wrt_, exact_, tc_.reference.params, dy)[input];
    auto g = kernels::variant_vjp(prod_, in, wrt_, exact_, tc_.production.params, dy)[input];
    if (g.defined() && g.sizes() == like.sizes() && g.scalar_type() != torch::kFloat64) g = g.to(torch::kFloat64);
    g = checked_production(g, like, " (fp64 run)");
    if (prod_.backward) {
      // The production's own forward through autograd: is its backward that function's?
      try {
        const auto own = kernels::autograd_vjp(prod_.fn, in, wrt_, exact_, tc_.production.params, dy)[input];
        if (own.defined() && own.sizes() == g.sizes()) {
          const auto d = max_abs(g - own) / std::max(max_abs(own), 1e-300);
          own_forward_discrepancy_ = std::max(own_forward_discrepancy_, d);
        }
      } catch (const std::exception&) {  // a forward autograd cannot differentiate: not measured
      }
    }
    out.push_back(per_replicate(g));
  }
  runtime_.kernel_seconds += seconds_since(ta);
  return torch::cat(out);
}

}  // namespace kcert::engine
