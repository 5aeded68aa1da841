// LayerNorm family: y = (x - mean) / sqrt(var + eps) · g + b over the hidden dimension, with
// the cast points and moment formulas the controls replay (N5, #13, #14, #18).
//
// Inputs: x [B, tokens, hidden] per replicate; g, b [hidden] fixed. Output [B, tokens, hidden].
// Bucket axes: channel (default) and row.
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

std::vector<Variant> layernorm_variants() {
  std::vector<Variant> v;
  v.push_back(variant("two_pass",
                      "two-pass moments in fp32: mean, then mean((u - mean)^2); affine in fp32; one rounding",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const auto u = p.up(in.at("x"));
                        const auto mu = u.mean(-1, true);
                        const auto var = (u - mu).pow(2).mean(-1, true);
                        return p.round_w(affine((u - mu) * torch::rsqrt(var + prm.number("eps")), in, p));
                      }));
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
  f.make_fixed = make_fixed;
  f.make_replicate = make_replicate;
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  for (auto& v : layernorm_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
