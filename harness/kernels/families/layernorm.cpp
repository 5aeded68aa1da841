// LayerNorm family: y = (x - mean) / sqrt(var + eps) · g + b over the hidden dimension, with
// the cast points and moment formulas the controls replay (N5, #13, #14, #18).
//
// Inputs: x [B, tokens, hidden] per replicate; g, b [hidden] fixed. Output [B, tokens, hidden].
// Bucket axes: channel (default) and row.
//
// Backward (issue 31): gradients dx (x's shape; channel and row buckets), dg and db (one
// element per channel; sums over the replicate's tokens). Autograd of each forward, except
// the explicit backwards replaying fused kernels' dgamma/dbeta reductions (BN2, BN3, and
// Liger's fp32 partials as the positive beside them).
#include <algorithm>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

const std::vector<ParamSpec> kEpsParam = {
    param::number("eps", 1e-5).at_least(0).doc("added to the variance; pass it on both sides")};

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), kEpsParam, std::move(fn));
}

torch::Tensor affine(const torch::Tensor& normalized, const KernelInputs& in, const Precision& p) {
  return normalized * p.up(in.at("g")) + p.up(in.at("b"));
}

// ---- explicit backwards ------------------------------------------------------------------
//
// y = g·x̂ + b with x̂ = (x − μ)·r, r = (var + eps)^(-1/2), per row; m = dy·g:
//   dx = r·(m − mean(m) − x̂·mean(m·x̂))
//   dg = Σ_tokens dy·x̂,  db = Σ_tokens dy
// Under the exact policy each function below is that fp64 VJP; at the working precision each
// rounds where the kernel it replays does. The forward is two_pass's.

// How a replayed kernel reduces dgamma/dbeta over a replicate's rows.
enum class DgReduction {
  fp32_partials,     // fp32 partials per program over contiguous row ranges, summed in fp32, one rounding (Liger)
  bf16_atomic,       // per block of rows an fp32 partial, atomically added into a W buffer: each add rounds (BN2)
};

struct LayerNormReplay {
  DgReduction reduction = DgReduction::fp32_partials;
  bool stats_in_w = false;  // mean and 1/std truncated to W before the dgamma partials (BN3)
};

Gradients layernorm_backward(const LayerNormReplay& how, const KernelInputs& in, const Precision& p,
                             const ParamMap& prm, const torch::Tensor& dy, const std::vector<std::string>& wrt) {
  const auto u = p.up(in.at("x"));
  const auto mu = u.mean(-1, true);
  const auto r = torch::rsqrt((u - mu).pow(2).mean(-1, true) + prm.number("eps"));
  const auto xhat = (u - mu) * r;
  const auto d = p.up(dy);
  const auto hidden = u.size(-1);
  const auto rows_of = [hidden](const torch::Tensor& t) { return t.reshape({-1, hidden}); };
  // Σ over rows of `terms` [rows, hidden] the way the replayed kernel reduces it.
  const auto reduce = [&](const torch::Tensor& terms) {
    const auto rows = terms.size(0);
    if (how.reduction == DgReduction::bf16_atomic) {
      const auto block = std::max<std::int64_t>(1, prm.integer("block_rows"));
      auto acc = p.round_w(torch::zeros({hidden}, terms.options()));
      for (std::int64_t at = 0; at < rows; at += block)
        acc = p.round_w(p.up(acc) + terms.narrow(0, at, std::min(block, rows - at)).sum(0));
      return acc;
    }
    auto acc = torch::zeros({hidden}, terms.options());
    const auto parts = std::clamp<std::int64_t>(prm.integer("programs"), 1, rows);
    for (const auto& part : terms.tensor_split(parts, 0)) acc = acc + part.sum(0);
    return p.round_w(acc);
  };
  Gradients out;
  for (const auto& name : wrt) {
    if (name == "x") {
      const auto m = d * p.up(in.at("g"));
      out["x"] = p.round_w(r * (m - m.mean(-1, true) - xhat * (m * xhat).mean(-1, true)));
    } else if (name == "g") {
      auto xh = xhat;
      if (how.stats_in_w) xh = (u - p.up(p.round_w(mu))) * p.up(p.round_w(r));
      out["g"] = reduce(rows_of(d * xh));
    } else if (name == "b") {
      out["b"] = reduce(rows_of(d));
    }
  }
  return out;
}

torch::Tensor two_pass(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto u = p.up(in.at("x"));
  const auto mu = u.mean(-1, true);
  const auto var = (u - mu).pow(2).mean(-1, true);
  return p.round_w(affine((u - mu) * torch::rsqrt(var + prm.number("eps")), in, p));
}

Variant with_backward(std::string name, std::string description, LayerNormReplay how) {
  std::vector<ParamSpec> params = kEpsParam;
  if (how.reduction == DgReduction::bf16_atomic)
    params.push_back(param::integer("block_rows", 32).at_least(1).doc("rows per block whose fp32 dgamma/dbeta partial is added into the W buffer"));
  else
    params.push_back(param::integer("programs", 132).at_least(1).doc("fp32 dgamma/dbeta partials (one per SM; 132 on an H100)"));
  auto v = builtin_variant(std::move(name), std::move(description), std::move(params), two_pass);
  v.backward = [how](const KernelInputs& in, const Precision& p, const ParamMap& prm, const torch::Tensor& dy,
                     const std::vector<std::string>& wrt) { return layernorm_backward(how, in, p, prm, dy, wrt); };
  return v;
}

std::vector<Variant> backward_variants() {
  std::vector<Variant> v;
  v.push_back(with_backward("liger_partials",
                            "Liger LayerNorm fused backward: dx in fp32 rounded once, dgamma/dbeta from fp32 partials "
                            "per program summed in fp32 (BP2; Liger-Kernel#815, #945)",
                            {}));
  v.push_back(with_backward("llmc_dweight_bf16_atomic",
                            "llm.c layernorm_backward kernel 2: each block's fp32 dweight/dbias partial atomically added "
                            "into the bf16 gradient buffer, every add rounding (BN2; llm.c#428, #476)",
                            {.reduction = DgReduction::bf16_atomic}));
  v.push_back(with_backward("rocm_stats_truncated",
                            "ROCm cuLoadWriteStridedInputs: mean and 1/std truncated from fp32 to the input dtype before "
                            "the dgamma partials (BN3; pytorch#140259)",
                            {.stats_in_w = true}));
  return v;
}

std::vector<Variant> layernorm_variants() {
  std::vector<Variant> v;
  v.push_back(variant("two_pass",
                      "two-pass moments in fp32: mean, then mean((u - mean)^2); affine in fp32; one rounding",
                      two_pass));
  v.push_back(variant("onepass_fp32", "one-pass moments var = E[u^2] - E[u]^2 in fp32 (positive #18)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const auto u = p.up(in.at("x"));
                        const auto mu = u.mean(-1, true);
                        const auto var = (u.pow(2).mean(-1, true) - mu * mu).clamp_min(0.0);
                        return p.round_w(affine((u - mu) * torch::rsqrt(var + prm.number("eps")), in, p));
                      }));
  v.push_back(variant(
      "onepass_w_intermediates",
      "one-pass moments with E[x^2], E[x] and the difference rounded to W: catastrophic "
      "cancellation on mean-shifted rows (N5; pytorch#51102, burn#5607)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto ex2 = p.round_w(u.pow(2).mean(-1, true));
        const auto mu = p.round_w(u.mean(-1, true));
        const auto var = p.up(p.round_w(p.up(ex2) - p.up(p.round_w(p.up(mu) * p.up(mu))))).clamp_min(0.0);
        return p.round_w(affine((u - p.up(mu)) * torch::rsqrt(var + prm.number("eps")), in, p));
      }));
  v.push_back(variant("aten_layer_norm",
                      "ATen's layer_norm kernel on the upcast input with upcast g, b, then one rounding "
                      "(positives #13, #14: the real fp32 kernel; bf16 layer_norm rounds intermediates on 1.13)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const auto u = p.up(in.at("x"));
                        return p.round_w(at::layer_norm(u, {u.size(-1)}, p.up(in.at("g")), p.up(in.at("b")),
                                                        prm.number("eps")));
                      }));
  for (auto& b : backward_variants()) v.push_back(std::move(b));
  return v;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t seed) {
  const auto hidden = probe.params.integer("shape.hidden");
  InputStream stream(seed);
  KernelInputs fixed;
  fixed.set("g", (1.0 + probe.params.number("weights.spread") * stream.normal({hidden}, torch::kFloat64)).to(numerics::to_dtype(probe.dtype)));
  fixed.set("b", (probe.params.number("weights.bias_spread") * stream.normal({hidden}, torch::kFloat64)).to(numerics::to_dtype(probe.dtype)));
  return fixed;
}

KernelInputs make_replicate(const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
  return token_channel_activations(probe, "shape.tokens", "shape.hidden", seed);
}

}  // namespace

void register_layernorm_family(Registry& registry) {
  Family f;
  f.name = "layernorm";
  f.description = "LayerNorm over the hidden dimension: x [tokens, hidden], gain g and bias b [hidden]";
  f.bucket_axes = {"channel", "row"};
  f.probe_params = {
      param::integer("shape.tokens", 512).at_least(1).doc("tokens per replicate"),
      param::integer("shape.hidden", 256).at_least(2).doc("hidden size"),
      param::number("weights.spread", 0.1).at_least(0).doc("g = 1 + spread·N(0,1)"),
      param::number("weights.bias_spread", 0.1).at_least(0).doc("b = bias_spread·N(0,1)"),
  };
  f.validate_probe = [](const ProbeContract& probe) { return check_outlier_count(probe, "shape.hidden"); };
  f.row_separable = true;
  f.make_fixed = make_fixed;
  f.make_replicate = make_replicate;
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  f.gradients.push_back(input_gradient({"dx", "x", {"channel", "row"}, "", "gradient of the input, per token and channel"}, token_channel_buckets()));
  for (const auto& [name, input] : {std::pair{"dg", "g"}, std::pair{"db", "b"}}) {
    f.gradients.push_back(weight_gradient({name, input, {"element"}, "tokens",
                                           std::string("gradient of the ") + (input[0] == 'g' ? "gain" : "bias") +
                                               ": one element per channel, a sum over the replicate's tokens"},
                                          element_buckets(), "shape.tokens"));
  }
  for (auto& v : layernorm_variants()) {
    v.in_row_blocks = true;  // every forward here is row for row
    f.variants.emplace(v.schema.name, std::move(v));
  }
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
