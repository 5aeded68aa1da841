// Linear (GEMM) family: y = x W^T + b, with the epilogue, split-K and backend variants the
// controls replay (G4, G6, #9, #12, #33).
//
// Inputs: x [B, tokens, in_features] per replicate; W [out_features, in_features] and
// b [out_features] fixed. Output [B, tokens, out_features]. Bucket axes: channel (output
// feature, the default), row.
#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

const std::vector<ParamSpec> kSplitParam = {
    param::integer("splits", 4).at_least(1).doc("K chunks of a split-K GEMM")};

Variant variant(std::string name, std::string description, KernelFn fn, std::vector<ParamSpec> params = {}) {
  return builtin_variant(std::move(name), std::move(description), std::move(params), std::move(fn));
}

// up(x) @ up(W)^T in the accumulation dtype: products of W values are exact there, so the
// result does not depend on the BLAS backend's bf16 paths (architecture.md).
torch::Tensor gemm(const torch::Tensor& x, const torch::Tensor& w, const Precision& p) {
  return torch::matmul(p.up(x), p.up(w).t());
}

std::vector<torch::Tensor> k_chunks(const torch::Tensor& t, int64_t splits) {
  return t.chunk(splits, -1);
}

std::vector<Variant> linear_variants() {
  std::vector<Variant> v;
  v.push_back(variant("fp32_fused_bias", "F.linear semantics: fp32 GEMM, bias added in fp32, one rounding",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return p.round_w(gemm(in.at("x"), in.at("W"), p) + p.up(in.at("b")));
                      }));
  v.push_back(variant("round_then_bias",
                      "GEMM output rounded to W, then the bias added in W: x @ W.T + b in eager bf16 "
                      "(G4: pytorch#115144)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return p.round_w(p.up(p.round_w(gemm(in.at("x"), in.at("W"), p))) + p.up(in.at("b")));
                      }));
  v.push_back(variant("aten_addmm_w",
                      "ATen addmm on the W tensors: on the oneDNN path the bias enters the fp32 epilogue "
                      "before the single rounding (#9)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto& x = in.at("x");
                        const auto dt = p.is_exact() ? torch::kFloat64 : p.working_dtype();
                        const auto x2 = x.to(dt).reshape({-1, x.size(-1)});
                        const auto y = at::addmm(in.at("b").to(dt), x2, in.at("W").to(dt).t());
                        auto shape = x.sizes().vec();
                        shape.back() = y.size(-1);
                        return p.round_w(y.reshape(shape));
                      }));
  v.push_back(variant("aten_matmul_w",
                      "ATen matmul on the W tensors with W stored (in, out) row-major, no bias (#12: "
                      "one rounding on the oneDNN path, bf16 accumulation on the fallback)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto dt = p.is_exact() ? torch::kFloat64 : p.working_dtype();
                        return p.round_w(at::matmul(in.at("x").to(dt), in.at("W").to(dt).t().contiguous()));
                      }));
  v.push_back(variant("fp32_no_bias", "fp32 GEMM without bias, one rounding (reference for #12 and #33)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return p.round_w(gemm(in.at("x"), in.at("W"), p));
                      }));
  v.push_back(variant("splitk_w_partials",
                      "split-K GEMM whose partial sums are rounded to W and reduced in W (G6: modular#7165, "
                      "TE#3440, FlagGems#5876)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const auto xs = k_chunks(in.at("x"), prm.integer("splits"));
                        const auto ws = k_chunks(in.at("W"), prm.integer("splits"));
                        auto y = p.round_w(gemm(xs[0], ws[0], p));
                        for (std::size_t c = 1; c < xs.size(); ++c) y = p.round_w(p.up(y) + p.up(p.round_w(gemm(xs[c], ws[c], p))));
                        return y;
                      },
                      kSplitParam));
  v.push_back(variant("splitk_fp32_partials", "split-K GEMM with fp32 partials summed in fp32, one rounding (#33)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const auto xs = k_chunks(in.at("x"), prm.integer("splits"));
                        const auto ws = k_chunks(in.at("W"), prm.integer("splits"));
                        auto y = gemm(xs[0], ws[0], p);
                        for (std::size_t c = 1; c < xs.size(); ++c) y = y + gemm(xs[c], ws[c], p);
                        return p.round_w(y);
                      },
                      kSplitParam));
  return v;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t seed) {
  const auto k = probe.params.integer("shape.in_features"), n = probe.params.integer("shape.out_features");
  const auto& kind = probe.params.string("weights.kind");
  InputStream stream(seed);
  auto w = stream.normal({n, k}, torch::kFloat64) / std::sqrt(static_cast<double>(k));
  auto b = stream.normal({n}, torch::kFloat64) * probe.params.number("weights.bias_scale");
  if (kind == "zero_sum") {
    w = w - w.mean(-1, true);  // rows sum to zero: outputs cancel the activations' DC shift
  } else if (kind == "cancelling") {
    // Rows with a large sum, and a bias that removes the DC it produces (the catalog's G4
    // contract: 0.1·Σ_k W_jk >> ||W_j||, b_j = -0.1·Σ_k W_jk).
    w = w + probe.params.number("weights.row_dc") / static_cast<double>(k);
    const auto dt = numerics::to_dtype(probe.dtype);
    b = -probe.shift * w.to(dt).to(torch::kFloat64).sum(-1);
  }
  KernelInputs fixed;
  fixed.set("W", w.to(numerics::to_dtype(probe.dtype)));
  fixed.set("b", b.to(numerics::to_dtype(probe.dtype)));
  return fixed;
}

}  // namespace

void register_linear_family(Registry& registry) {
  Family f;
  f.name = "linear";
  f.description = "linear layer y = x W^T + b: x [tokens, in_features], W [out_features, in_features], b [out_features]";
  f.bucket_axes = {"channel", "row"};
  f.probe_params = {
      param::integer("shape.tokens", 64).at_least(1).doc("tokens per replicate"),
      param::integer("shape.in_features", 1024).at_least(1).doc("K"),
      param::integer("shape.out_features", 256).at_least(1).doc("N"),
      param::text("weights.kind", "normal").one_of({"normal", "zero_sum", "cancelling"}).doc("normal: W ~ N(0, 1/K); zero_sum: rows sum to 0; cancelling: rows with a large sum and a bias cancelling it"),
      param::number("weights.bias_scale", 1.0).at_least(0).doc("b ~ N(0, bias_scale²) (normal, zero_sum)"),
      param::number("weights.row_dc", 100.0).at_least(0).doc("cancelling: each row sums to about row_dc"),
  };
  f.validate_probe = [](const ProbeContract& probe) { return check_outlier_count(probe, "shape.in_features"); };
  f.make_fixed = make_fixed;
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    return token_channel_activations(probe, "shape.tokens", "shape.in_features", seed);
  };
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  for (auto& v : linear_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
