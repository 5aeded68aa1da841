// Residual-add RMSNorm family: h = x + r (the new residual stream) and y = RMSNorm(h)·w,
// as fused kernels write both (controls N7, #19).
//
// Inputs: x, r [B, tokens, hidden] per replicate (r scaled by residual.scale, late-layer
// magnitudes); w [hidden] fixed. Output [B, tokens, 2·hidden]: h in the first half, y in the
// second, so both stores are judged. Bucket axes: channel (2·hidden buckets: residual
// channels then normalized channels; the default), row.
//
// Backward (issue 31): gradients dx, dr (x's shape; channel and row buckets; equal to each
// other: h = x + r) and dw (one element per channel, a sum over the replicate's tokens). The
// dy probe covers both outputs, the residual h and the normalized y. Autograd of each forward,
// except the fused pre-norm backward replayed before and after quack#53 (BN9).
#include <algorithm>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

const std::vector<ParamSpec> kEpsParam = {
    param::number("eps", 1e-6).at_least(0).doc("added to the mean square")};

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), kEpsParam, std::move(fn));
}

torch::Tensor inverse_rms(const torch::Tensor& u, double eps) { return torch::rsqrt(u.pow(2).mean(-1, true) + eps); }

// HF order: h = rb(x + r), then LlamaRMSNorm(h) with its cast points.
torch::Tensor hf_unfused(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto h = p.round_w(p.up(in.at("x")) + p.up(in.at("r")));
  const auto u = p.up(h);
  const auto y = p.round_w(p.up(in.at("w")) * p.up(p.round_w(u * inverse_rms(u, prm.number("eps")))));
  return torch::cat({h, y}, -1);
}

torch::Tensor fused_fp32_rne(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto s = p.up(in.at("x")) + p.up(in.at("r"));
  return torch::cat({p.round_w(s), p.round_w(s * inverse_rms(s, prm.number("eps")) * p.up(in.at("w")))}, -1);
}

// The fused pre-norm backward on fused_fp32_rne's forward, in fp32 with one rounding per
// gradient. dy = [dh | dy_y]; with ŝ = s·rstd and m = dy_y·w the norm's backward is
// norm_bwd(m) = rstd·(m − ŝ·mean(m·ŝ)) and
//   ds = dh + norm_bwd(dy_y·w)      (right: the residual's gradient passes the norm by)
//   ds = norm_bwd((dh + dy_y)·w)    (quack before #53: dres_out = (dres_out + dout)·dnorm(out))
// dx = dr = ds, dw = Σ_tokens dy_y·ŝ.
Gradients prenorm_backward(bool before_fix, const KernelInputs& in, const Precision& p, const ParamMap& prm,
                           const torch::Tensor& dy, const std::vector<std::string>& wrt) {
  const auto s = p.up(in.at("x")) + p.up(in.at("r"));
  const auto rstd = inverse_rms(s, prm.number("eps"));
  const auto shat = s * rstd;
  const auto hidden = s.size(-1);
  const auto d = p.up(dy);
  const auto dh = d.narrow(-1, 0, hidden), dy_y = d.narrow(-1, hidden, hidden);
  const auto w = p.up(in.at("w"));
  const auto norm_bwd = [&](const torch::Tensor& m) { return rstd * (m - shat * (m * shat).mean(-1, true)); };
  const auto ds = before_fix ? norm_bwd((dh + dy_y) * w) : dh + norm_bwd(dy_y * w);
  Gradients out;
  for (const auto& name : wrt) {
    if (name == "x" || name == "r") out[name] = p.round_w(ds);
    if (name == "w") out["w"] = p.round_w((dy_y * shat).reshape({-1, hidden}).sum(0));
  }
  return out;
}

std::vector<Variant> residual_variants() {
  std::vector<Variant> v;
  v.push_back(variant("hf_unfused", "HF: h = rb(x + r), then LlamaRMSNorm(h) (two roundings before the weight)",
                      hf_unfused));
  v.push_back(variant("vllm_fused_add",
                      "vLLM fused_add_rms_norm structure: one pass writes h in W, squares the stored W value in "
                      "fp32, keeps the (W)(x·r)·w cast points (#19)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        // One kernel, same arithmetic: the residual add in W, then the reduction over the stored h.
                        const auto h = p.round_w(p.up(in.at("x")) + p.up(in.at("r")));
                        const auto hf = p.up(h);
                        const auto ss = (hf * hf).sum(-1, true) / static_cast<double>(hf.size(-1));
                        const auto normed = p.round_w(hf * torch::rsqrt(ss + prm.number("eps")));
                        return torch::cat({h, p.round_w(p.up(normed) * p.up(in.at("w")))}, -1);
                      }));
  v.push_back(variant("add_then_fp32_weight_norm",
                      "h = rb(x + r) by an unfused W add (Megatron-LM's bias-dropout-add), then TransformerEngine's "
                      "RMSNorm of the stored h: normalize in fp32, weight multiplied in fp32, one rounding",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const auto h = p.round_w(p.up(in.at("x")) + p.up(in.at("r")));
                        const auto u = p.up(h);
                        return torch::cat({h, p.round_w(p.up(in.at("w")) * (u * inverse_rms(u, prm.number("eps"))))}, -1);
                      }));
  v.push_back(variant("fused_fp32_rne",
                      "fp32 residual sum s, stored to W by round-to-nearest; RMSNorm from the fp32 s, (s·rstd)·w in "
                      "fp32, one rounding (FlashInfer's FusedAddRMSNormKernel since flashinfer#587)",
                      fused_fp32_rne));
  v.push_back(variant("fused_fp32_truncating",
                      "as fused_fp32_rne, but both stores truncate toward zero (N7: ROCm/aiter#5151, IRON#139, "
                      "tt-metal#57408)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const auto s = p.up(in.at("x")) + p.up(in.at("r"));
                        return torch::cat({p.trunc_w(s), p.trunc_w(s * inverse_rms(s, prm.number("eps")) * p.up(in.at("w")))}, -1);
                      }));
  for (const bool before_fix : {false, true}) {
    auto b = variant(before_fix ? "quack_prenorm_bwd_before_53" : "quack_prenorm_bwd",
                     before_fix ? "fused pre-norm (residual add + RMSNorm) backward before quack#53: the residual's "
                                  "gradient sent through the norm's backward with the output's (BN9)"
                                : "fused pre-norm (residual add + RMSNorm) backward, fp32, one rounding per gradient: the "
                                  "residual's gradient added after the norm's backward (quack#53's fix)",
                     fused_fp32_rne);
    b.backward = [before_fix](const KernelInputs& in, const Precision& p, const ParamMap& prm, const torch::Tensor& dy,
                              const std::vector<std::string>& wrt) { return prenorm_backward(before_fix, in, p, prm, dy, wrt); };
    v.push_back(std::move(b));
  }
  return v;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t seed) {
  InputStream stream(seed);
  const auto hidden = probe.params.integer("shape.hidden");
  KernelInputs fixed;
  fixed.set("w", (1.0 + probe.params.number("weights.spread") * stream.normal({hidden}, torch::kFloat64))
                     .to(numerics::to_dtype(probe.dtype)));
  return fixed;
}

KernelInputs make_replicate(const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
  InputStream stream(seed);
  const auto tokens = probe.params.integer("shape.tokens"), hidden = probe.params.integer("shape.hidden");
  KernelInputs in;
  in.set("x", shifted_gaussian(probe, tokens, hidden, stream));
  ProbeContract residual = probe;
  residual.scale *= probe.params.number("residual.scale");
  residual.shift *= probe.params.number("residual.scale");
  in.set("r", shifted_gaussian(residual, tokens, hidden, stream));
  return in;
}

}  // namespace

void register_residual_rmsnorm_family(Registry& registry) {
  Family f;
  f.name = "residual_rmsnorm";
  f.description = "residual add + RMSNorm: x, r [tokens, hidden], w [hidden]; output [h | y] [tokens, 2·hidden]";
  f.bucket_axes = {"channel", "row"};
  f.probe_params = {
      param::integer("shape.tokens", 256).at_least(1).doc("tokens per replicate"),
      param::integer("shape.hidden", 1024).at_least(2).doc("hidden size"),
      param::number("weights.spread", 0.1).at_least(0).doc("w = 1 + spread·N(0,1)"),
      param::number("residual.scale", 1.0).at_least(0).doc("the residual stream r is drawn with shift and scale multiplied by this (late layers: 4)"),
  };
  f.validate_probe = [](const ProbeContract& probe) { return check_outlier_count(probe, "shape.hidden"); };
  f.row_separable = true;
  f.make_fixed = make_fixed;
  f.make_replicate = make_replicate;
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  for (const auto& [name, input] : {std::pair{"dx", "x"}, std::pair{"dr", "r"}}) {
    f.gradients.push_back(input_gradient({name, input, {"channel", "row"}, "",
                                          std::string("gradient of ") + (input[0] == 'x' ? "the block's output x" : "the residual r") +
                                              " [tokens, hidden] (dx = dr: h = x + r)"},
                                         token_channel_buckets()));
  }
  f.gradients.push_back(weight_gradient(
      {"dw", "w", {"element"}, "tokens", "gradient of the norm weight: one element per channel, a sum over the replicate's tokens"},
      element_buckets(), "shape.tokens"));
  for (auto& v : residual_variants()) {
    v.in_row_blocks = true;  // every forward here is row for row
    f.variants.emplace(v.schema.name, std::move(v));
  }
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
