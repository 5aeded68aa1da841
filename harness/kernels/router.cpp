// Router family: MoE gating, router GEMM → softmax → top-k → combine weights, with the
// precision variants the controls replay (G5: TF32-class operand rounding on the fp32
// router GEMM, pytorch#67384).
//
// Inputs: h [B, tokens, hidden] per replicate (W, the normalized hidden states);
// W_router [experts, hidden] fixed, kept in fp32 by default (HF's _keep_in_fp32_modules /
// DeepSeek-V3's fp32 gate) or rounded to W. Output [B, tokens, experts]: each token's
// combine weight per expert, 0 for the experts it does not route to, rounded to W once.
// An expert that flips in or out of a token's top-k moves that token's weights by their
// whole size: the variance gate sees it, the bias gate sees only a directional pattern.
// Bucket axes: expert (the default), token.
#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), {}, std::move(fn));
}

// Softmax over all experts, keep the top k, renormalize them to sum 1 (Mixtral,
// Qwen-MoE norm_topk_prob), scatter into a dense [.., experts] tensor.
torch::Tensor softmax_topk_renormalized(const torch::Tensor& logits, int64_t k) {
  const auto probs = torch::softmax(logits, -1);
  const auto [top, idx] = probs.topk(k, -1);
  const auto weights = top / top.sum(-1, true);
  return torch::zeros_like(probs).scatter(-1, idx, weights);
}

int64_t top_k(const KernelInputs& in) { return in.at("top_k").item<int64_t>(); }

std::vector<Variant> router_variants() {
  std::vector<Variant> v;
  v.push_back(variant("fp32_softmax_topk_renorm",
                      "router logits by an fp32 GEMM (fp32 operands, fp32 accumulation), softmax in fp32, top-k, "
                      "renormalized, weights rounded to W (HF Mixtral/Qwen-MoE with an fp32 gate)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto logits = torch::matmul(p.up(in.at("h")), p.up(in.at("W_router")).t());
                        return p.round_w(softmax_topk_renormalized(logits, top_k(in)));
                      }));
  v.push_back(variant("tf32_softmax_topk_renorm",
                      "the same router with both GEMM operands rounded to TF32 (10 mantissa bits), as an fp32 "
                      "matmul silently runs with TF32 enabled (G5: pytorch#67384, #53635, mlx#3860)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto logits = torch::matmul(p.tf32(p.up(in.at("h"))), p.tf32(p.up(in.at("W_router"))).t());
                        return p.round_w(softmax_topk_renormalized(logits, top_k(in)));
                      }));
  return v;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t seed) {
  const auto hidden = probe.params.integer("shape.hidden"), experts = probe.params.integer("shape.experts");
  auto gen = make_generator(seed);
  auto w = at::randn({experts, hidden}, gen, torch::TensorOptions().dtype(torch::kFloat32)) /
           std::sqrt(static_cast<double>(hidden));
  if (probe.params.string("router.weight_dtype") == "w") w = w.to(numerics::to_dtype(probe.dtype));
  KernelInputs fixed;
  fixed.set("W_router", w);
  fixed.set("top_k", torch::tensor(probe.params.integer("router.top_k"), torch::kInt64));
  return fixed;
}

}  // namespace

void register_router_family(Registry& registry) {
  Family f;
  f.name = "router";
  f.description = "MoE router: h [tokens, hidden] → logits [tokens, experts] → top-k combine weights (dense, W)";
  f.bucket_axes = {"expert", "token"};
  f.probe_params = {
      {"shape.tokens", ParamType::integer, ParamValue{std::int64_t{1024}}, 1.0, std::nullopt, {}, "tokens per replicate"},
      {"shape.hidden", ParamType::integer, ParamValue{std::int64_t{1024}}, 1.0, std::nullopt, {}, "model width"},
      {"shape.experts", ParamType::integer, ParamValue{std::int64_t{64}}, 2.0, std::nullopt, {}, "routed experts E"},
      {"router.top_k", ParamType::integer, ParamValue{std::int64_t{4}}, 1.0, std::nullopt, {}, "experts per token k"},
      {"router.weight_dtype", ParamType::string, ParamValue{std::string("fp32")}, std::nullopt, std::nullopt,
       {"fp32", "w"}, "fp32: the gate weight kept in fp32; w: rounded to the working dtype"},
  };
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    const auto k = probe.params.integer("router.top_k"), e = probe.params.integer("shape.experts");
    if (k >= e) return FieldError{"probe.router.top_k", "expected fewer than probe.shape.experts = " + std::to_string(e)};
    return check_outlier_count(probe, "shape.hidden");
  };
  f.make_fixed = make_fixed;
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    KernelInputs out;
    out.set("h", token_channel_activations(probe, "shape.tokens", "shape.hidden", seed).at("x"));
    return out;
  };
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis == "token" ? "row" : "channel", shape);
  };
  for (auto& v : router_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
