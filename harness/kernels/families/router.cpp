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
//
// Backward (issue 31): gradients dh (h's shape; buckets channel = hidden unit, token) and
// dw_router (W_router [experts, hidden], in its own dtype; buckets expert = row, or column;
// a sum over the replicate's tokens). Autograd of each forward: the selected experts'
// weights carry the gradient, the top-k indices none (BN28: a softmax over one selected
// logit is constant, so the router gets no gradient at all). TF32 operand rounding is not
// differentiable here (vjp.hpp): the tf32 variants have no backward to certify.
#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

#include <limits>
#include <tuple>

namespace kcert::kernels {

namespace {

using numerics::Precision;

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), {}, std::move(fn));
}

// How far apart two fp64 scores may be and still count as a tie the working kernel cannot
// resolve, in spacings of the format it decides in at the row's largest |score|. Four
// spacings cover the rounding of the score itself plus the few ULPs of error an fp32
// softmax or sigmoid adds before the comparison (two outputs that tie exactly in fp32 differ
// in fp64 by at most those errors); a TF32 operand rounding (2^13 fp32 spacings) or a bf16
// logit (2^16) moves scores by far more, so such a flip stays a flip.
constexpr double kNearTieSpacings = 4.0;

// Under Precision::exact_flipping_near_ties: in every row whose k-th and (k+1)-th choices
// are a near tie, take the (k+1)-th instead of the k-th; other rows keep `idx` bit for bit.
// Under Precision::exact_noting_near_ties: `idx` unchanged, and those rows noted (the engine
// then computes the flipped oracle for them alone).
// `idx` lists the k chosen in descending order of `selected_on` (every rule here does);
// the margin is measured on `margin_on`, the quantity the working kernel rounds (the
// logits for a softmax: softmax is monotone, so the two orders agree), at `precision`
// significand bits.
torch::Tensor flip_near_ties(const Precision& p, const torch::Tensor& selected_on, const torch::Tensor& margin_on,
                             const torch::Tensor& idx, int precision) {
  if (!p.near_tie_format()) return idx;
  const auto k = idx.size(-1);
  const auto next = std::get<1>(selected_on.scatter(-1, idx, -std::numeric_limits<double>::infinity()).max(-1, true));
  const auto kth = idx.narrow(-1, k - 1, 1);
  const auto margin = margin_on.gather(-1, kth) - margin_on.gather(-1, next);
  const auto scale = std::get<0>(margin_on.abs().max(-1, true));
  const auto spacing = torch::exp2(torch::floor(torch::log2(scale))) * std::ldexp(1.0, 1 - precision);
  const auto near_tie = margin <= kNearTieSpacings * spacing;
  if (auto* notes = p.near_tie_notes()) {
    notes->rows = near_tie.squeeze(-1);
    ++notes->selections;
    return idx;
  }
  auto out = idx.clone();
  out.narrow(-1, k - 1, 1).copy_(torch::where(near_tie, next, kth));
  return out;
}

constexpr int kFp32Precision = 24, kTf32Precision = 11;

// Softmax over all experts, keep the top k, renormalize them to sum 1 (Mixtral,
// Qwen-MoE norm_topk_prob), scatter into a dense [.., experts] tensor. `precision`: the
// significand bits the working kernel's logits carry (near ties, see flip_near_ties).
torch::Tensor softmax_topk_renormalized(const Precision& p, const torch::Tensor& logits, int64_t k, int precision) {
  const auto probs = torch::softmax(logits, -1);
  const auto idx = flip_near_ties(p, probs, logits, std::get<1>(probs.topk(k, -1)), precision);
  const auto top = probs.gather(-1, idx);
  const auto weights = top / top.sum(-1, true);
  return torch::zeros_like(probs).scatter(-1, idx, weights);
}

int64_t top_k(const KernelInputs& in) { return in.at("top_k").item<int64_t>(); }

// The k largest entries of p per row: (values, indices), with the selection rule named.
std::pair<torch::Tensor, torch::Tensor> select_topk(const torch::Tensor& p, int64_t k, const std::string& rule) {
  if (rule == "topk") {
    auto [v, i] = p.topk(k, -1);
    return {v, i};
  }
  if (rule == "stable_sort") {  // descending, ties to the lowest expert id (#28)
    auto [v, i] = at::sort(p, /*stable=*/true, -1, /*descending=*/true);
    return {v.narrow(-1, 0, k), i.narrow(-1, 0, k)};
  }
  if (rule == "argmax_rounds") {  // k rounds of argmax, record, mask to -inf (#7)
    auto work = p.clone();
    std::vector<torch::Tensor> vs, is;
    for (int64_t r = 0; r < k; ++r) {
      auto [v, i] = work.max(-1, true);
      vs.push_back(v);
      is.push_back(i);
      work.scatter_(-1, i, -std::numeric_limits<double>::infinity());
    }
    return {torch::cat(vs, -1), torch::cat(is, -1)};
  }
  if (rule == "stable_sort_high_id") {  // ties to the highest expert id (M6)
    const auto e = p.size(-1);
    auto [v, i] = at::sort(p.flip(-1), /*stable=*/true, -1, /*descending=*/true);
    return {v.narrow(-1, 0, k), (e - 1) - i.narrow(-1, 0, k)};
  }
  throw std::invalid_argument("unknown selection rule " + rule);
}

// The parametric router every MoE control is a parameter change of (M1, M3-M7, #6, #7,
// #28, #29): logits precision, scoring, order of softmax and top-k, renormalization,
// correction bias, routed scaling, tie rule.
torch::Tensor configurable_router(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto k = top_k(in);
  const auto& logits_in = prm.string("logits");
  torch::Tensor l;
  if (logits_in == "fp32") {
    l = torch::matmul(p.up(in.at("h")), p.up(in.at("W_router")).t());
  } else if (logits_in == "tf32") {
    l = torch::matmul(p.tf32(p.up(in.at("h"))), p.tf32(p.up(in.at("W_router"))).t());
  } else {  // "w": the router GEMM's result rounded to W (F.linear on bf16 tensors), M5
    l = p.up(p.round_w(torch::matmul(p.up(in.at("h")), p.up(p.round_w(p.up(in.at("W_router")))).t())));
  }
  // The precision the working kernel decides in: W when the logits or the probabilities
  // are rounded to it, fp32 otherwise (near ties, see flip_near_ties).
  const int decides_in = (logits_in == "w" || prm.boolean("round_probabilities"))
                             ? stats::traits(p.near_tie_format().value_or(stats::FloatFormat::fp32)).precision
                         : logits_in == "tf32" ? kTf32Precision
                                               : kFp32Precision;
  const auto& scoring = prm.string("scoring");
  const auto& order = prm.string("order");
  const auto& rule = prm.string("selection");
  torch::Tensor w, idx;
  if (scoring == "sigmoid") {
    // DeepSeek-V3: sigmoid scores, the correction bias steers selection only (M4 gathers
    // from score + b when bias_in_weights).
    const auto s = torch::sigmoid(l);
    const auto b = p.up(in.at("correction_bias"));
    const auto scores = s + b;
    idx = flip_near_ties(p, scores, scores, select_topk(scores, k, rule).second, decides_in);
    w = (prm.boolean("bias_in_weights") ? s + b : s).gather(-1, idx);
  } else if (order == "topk_softmax") {
    // top-k on the logits, softmax over the k selected (M1 with k = 1: the weight is 1).
    idx = flip_near_ties(p, l, l, select_topk(l, k, rule).second, decides_in);
    w = torch::softmax(l.gather(-1, idx), -1);
  } else {
    torch::Tensor probs;
    if (prm.string("softmax") == "fused_dtype") {  // #6
      probs = p.is_exact() ? at::softmax(l, -1) : at::softmax(p.round_w(l), -1, torch::kFloat);
    } else {
      const auto e = torch::exp(l - std::get<0>(l.max(-1, true)));
      probs = e / e.sum(-1, true);
    }
    if (prm.boolean("round_probabilities")) probs = p.up(p.round_w(probs));  // M5 variant / M6 ties
    idx = flip_near_ties(p, probs, l, select_topk(probs, k, rule).second, decides_in);
    w = probs.gather(-1, idx);
  }
  if (prm.boolean("renormalize") && order != "topk_softmax") w = w / w.sum(-1, true);
  const double rsf = prm.number("routed_scaling");
  // M7: the scaling multiply nested in the renormalize branch is lost when renorm is off.
  if (!(prm.boolean("scaling_only_with_renorm") && !prm.boolean("renormalize"))) w = w * rsf;
  const auto dense_shape = l.sizes();
  return p.round_w(torch::zeros(dense_shape, w.options()).scatter(-1, idx, w));
}

const std::vector<ParamSpec> kRouterParams = {
    param::text("logits", "fp32").one_of({"fp32", "tf32", "w"}).doc("router GEMM: fp32 operands and result, TF32 operands, or result rounded to W"),
    param::text("scoring", "softmax").one_of({"softmax", "sigmoid"}).doc("softmax over experts (Mixtral) or sigmoid scores with a selection-only correction bias (DeepSeek-V3)"),
    param::text("order", "softmax_topk").one_of({"softmax_topk", "topk_softmax"}).doc("softmax then top-k, or top-k on logits then softmax over the k"),
    param::text("softmax", "manual").one_of({"manual", "fused_dtype"}).doc("exp(l - max)/sum in the accumulation dtype, or at::softmax(W logits, dtype=float) (#6)"),
    param::text("selection", "topk").one_of({"topk", "stable_sort", "argmax_rounds", "stable_sort_high_id"}).doc("how the k experts are chosen (tie rules)"),
    param::flag("renormalize", true).doc("divide the k weights by their sum"),
    param::flag("round_probabilities", false).doc("round the probabilities to W before the top-k"),
    param::flag("bias_in_weights", false).doc("sigmoid scoring: gather the weights from score + correction bias (M4)"),
    param::number("routed_scaling", 1.0).at_least(0).doc("routed_scaling_factor"),
    param::flag("scaling_only_with_renorm", false).doc("apply routed_scaling only inside the renormalize branch (M7)"),
};

std::vector<Variant> router_variants() {
  std::vector<Variant> v;
  v.push_back(variant("fp32_softmax_topk_renorm",
                      "router logits by an fp32 GEMM (fp32 operands, fp32 accumulation), softmax in fp32, top-k, "
                      "renormalized, weights rounded to W (HF Mixtral/Qwen-MoE with an fp32 gate)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto logits = torch::matmul(p.up(in.at("h")), p.up(in.at("W_router")).t());
                        return p.round_w(softmax_topk_renormalized(p, logits, top_k(in), kFp32Precision));
                      }));
  v.push_back(variant("tf32_softmax_topk_renorm",
                      "the same router with both GEMM operands rounded to TF32 (10 mantissa bits), as an fp32 "
                      "matmul silently runs with TF32 enabled (G5: pytorch#67384, #53635, mlx#3860)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto logits = torch::matmul(p.tf32(p.up(in.at("h"))), p.tf32(p.up(in.at("W_router"))).t());
                        return p.round_w(softmax_topk_renormalized(p, logits, top_k(in), kTf32Precision));
                      }));
  v.push_back(builtin_variant("configurable",
                              "parametric router: logits precision, scoring, softmax/top-k order, selection rule, "
                              "renormalization, correction bias, routed scaling (M1, M3-M7, #6, #7, #28, #29)",
                              kRouterParams, configurable_router));
  return v;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t seed) {
  const auto hidden = probe.params.integer("shape.hidden"), experts = probe.params.integer("shape.experts");
  InputStream stream(seed);
  auto w = stream.normal({experts, hidden}) /
           std::sqrt(static_cast<double>(hidden));
  if (probe.params.string("router.weight_dtype") == "w") w = w.to(numerics::to_dtype(probe.dtype));
  KernelInputs fixed;
  fixed.set("W_router", w);
  fixed.set("top_k", torch::tensor(probe.params.integer("router.top_k"), torch::kInt64));
  // DeepSeek-V3's load-balancing bias: fixed per expert, U(-spread, spread), fp32.
  const double spread = probe.params.number("router.correction_bias");
  fixed.set("correction_bias", (stream.uniform({experts}) * 2.0 - 1.0) * spread);
  return fixed;
}

}  // namespace

void register_router_family(Registry& registry) {
  Family f;
  f.name = "router";
  f.description = "MoE router: h [tokens, hidden] → logits [tokens, experts] → top-k combine weights (dense, W)";
  f.bucket_axes = {"expert", "token"};
  f.selects = true;
  f.probe_params = {
      param::integer("shape.tokens", 1024).at_least(1).doc("tokens per replicate"),
      param::integer("shape.hidden", 1024).at_least(1).doc("model width"),
      param::integer("shape.experts", 64).at_least(2).doc("routed experts E"),
      param::integer("router.top_k", 4).at_least(1).doc("experts per token k"),
      param::number("router.correction_bias", 0.0).at_least(0).doc("spread of the per-expert correction bias b ~ U(-spread, spread) (sigmoid scoring)"),
      param::text("router.weight_dtype", "fp32").one_of({"fp32", "w"}).doc("fp32: the gate weight kept in fp32; w: rounded to the working dtype"),
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
  f.gradients.push_back(input_gradient(
      {"dh", "h", {"channel", "token"}, "", "gradient of the hidden states, per token and hidden unit"},
      token_channel_buckets("token")));
  f.gradients.push_back(weight_gradient({"dw_router", "W_router", {"expert", "column"}, "tokens",
                                         "gradient of the router weight [experts, hidden]: per expert (row) or hidden unit (column)"},
                                        matrix_buckets(), "shape.tokens"));
  for (auto& v : router_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
