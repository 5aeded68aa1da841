// Linear (GEMM) family: y = x W^T + b, with the epilogue, split-K and backend variants the
// controls replay (G4, G6, #9, #12, #33), and weight-only quantized GEMMs (W8A16 / W4A16:
// integer codes q with per-output-channel or group-wise scales s along K).
//
// Inputs: x [B, tokens, in_features] per replicate; W [out_features, in_features] and
// b [out_features] fixed; q [out_features, in_features] (int8 codes) and s [out_features,
// groups] (fp32 tensor holding scales representable in weights.scale_dtype) fixed: with
// weights.kind quantized, W is the checkpoint dequantized to W (rb(q·s)); with the other
// kinds, q and s quantize W at weights.bits / weights.group so that every variant runs on
// every probe. The quantized variants take no bias; their real function is x·(q·s)^T.
// Output [B, tokens, out_features]. Bucket axes: channel (output feature, the default), row.
//
// Backward (issue 31): gradients dx (x's shape; buckets channel = input feature, row) and dW
// ([out, in]; buckets row = output feature, column = input feature; a sum over the replicate's
// tokens, the wgrad GEMM's K axis). Autograd of each forward, except the wgrad replays that
// chunk the token axis (chunked fused linear cross-entropy, micro-batched wgrad) with a W or
// an fp32 accumulator (BN18, BP6).
#include <algorithm>

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

// Split-K GEMM whose fp32 partials are summed in fp32 in chunk order, unrounded: x [.., K] and
// W [N, K] cut into `splits` chunks along K.
torch::Tensor splitk_fp32_sum(const torch::Tensor& x, const torch::Tensor& w, int64_t splits, const Precision& p) {
  const auto xs = k_chunks(x, splits);
  const auto ws = k_chunks(w, splits);
  auto y = gemm(xs[0], ws[0], p);
  for (std::size_t c = 1; c < xs.size(); ++c) y = y + gemm(xs[c], ws[c], p);
  return y;
}

// The scales expanded along K: s_full[j, k] = s[j, k / group_size].
torch::Tensor expand_scales(const torch::Tensor& s, int64_t k) { return s.repeat_interleave(k / s.size(-1), -1); }

// q·s formed in the accumulation dtype (exact in fp32 for 8-bit codes and scales of at most
// 16 significant bits: W, fp16 or bf16 scales).
torch::Tensor dequantized(const KernelInputs& in, const Precision& p) {
  const auto& q = in.at("q");
  return p.up(q) * expand_scales(p.up(in.at("s")), q.size(-1));
}

// dx = dy·W in fp32, one rounding; dW = Σ over `chunks` token chunks of dyᵀx (fp32 GEMMs),
// accumulated in W (every chunk's add rounds: BN18) or in fp32 and rounded once (BP6).
Gradients chunked_wgrad(bool w_accumulator, const KernelInputs& in, const Precision& p, const ParamMap& prm,
                        const torch::Tensor& dy, const std::vector<std::string>& wrt) {
  const auto x = p.up(in.at("x")), w = p.up(in.at("W")), d = p.up(dy);
  Gradients out;
  for (const auto& name : wrt) {
    if (name == "x") out["x"] = p.round_w(torch::matmul(d, w));
    if (name != "W") continue;
    const auto xs = x.reshape({-1, x.size(-1)}), ds = d.reshape({-1, d.size(-1)});
    const auto parts = std::clamp<std::int64_t>(prm.integer("chunks"), 1, xs.size(0));
    const auto xc = xs.tensor_split(parts, 0), dc = ds.tensor_split(parts, 0);
    auto acc = torch::zeros({ds.size(-1), xs.size(-1)}, xs.options());
    if (w_accumulator) acc = p.round_w(acc);
    for (std::size_t i = 0; i < xc.size(); ++i) {
      const auto partial = torch::matmul(dc[i].t(), xc[i]);
      acc = w_accumulator ? p.round_w(p.up(acc) + partial) : acc + partial;
    }
    out["W"] = w_accumulator ? acc : p.round_w(acc);
  }
  return out;
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
  for (const bool w_acc : {true, false}) {
    auto b = variant(w_acc ? "wgrad_chunked_w_accumulator" : "wgrad_chunked_fp32_accumulator",
                     w_acc ? "fp32 GEMM forward; wgrad over token chunks added into a W dW buffer, every chunk's add "
                             "rounding (BN18: axolotl#1601, Liger-Kernel#1391, OLMo-core#370, marin#8368)"
                           : "fp32 GEMM forward; wgrad over token chunks accumulated in fp32, rounded once (BP6: "
                             "Liger FLCE accum_dtype=float32)",
                     [](const KernelInputs& in, const Precision& p, const ParamMap&) { return p.round_w(gemm(in.at("x"), in.at("W"), p)); },
                     {param::integer("chunks", 16).at_least(1).doc("token chunks of the wgrad")});
    b.backward = [w_acc](const KernelInputs& in, const Precision& p, const ParamMap& prm, const torch::Tensor& dy,
                         const std::vector<std::string>& wrt) { return chunked_wgrad(w_acc, in, p, prm, dy, wrt); };
    v.push_back(std::move(b));
  }
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
                        return p.round_w(splitk_fp32_sum(in.at("x"), in.at("W"), prm.integer("splits"), p));
                      },
                      kSplitParam));
  v.push_back(variant("quant_dequant_w",
                      "weight-only quantized GEMM, dequantize then GEMM: q·s rounded to W (HF/torchao's dequantize "
                      "then F.linear; Marlin's and exllama's in-register dequantization to the activation dtype), "
                      "then an fp32-accumulated GEMM, one rounding",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return p.round_w(gemm(in.at("x"), p.round_w(dequantized(in, p)), p));
                      }));
  v.push_back(variant("quant_dequant_w_splitk",
                      "as quant_dequant_w with K split into chunks whose fp32 partial GEMMs are summed in fp32, "
                      "one rounding (Marlin's stripe partition with an fp32 global reduce: vLLM's use_fp32_reduce)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        return p.round_w(splitk_fp32_sum(in.at("x"), p.round_w(dequantized(in, p)), prm.integer("splits"), p));
                      },
                      kSplitParam));
  v.push_back(variant("quant_dequant_fp32",
                      "q·s dequantized in fp32 (no rounding to W), then an fp32 GEMM, one rounding (ATen's "
                      "_weight_int8pack_mm x86 kernels: float(q)·s in fp32 fused-multiply-added into an fp32 "
                      "accumulator; torchao's dequantize_affine with output_dtype=float32)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return p.round_w(gemm(in.at("x"), dequantized(in, p), p));
                      }));
  v.push_back(variant("quant_scale_fp32_acc",
                      "scale on the fp32 accumulator: per group g, acc_g = Σ_k∈g q_jk·x_k in fp32, y = Σ_g s_jg·acc_g "
                      "in fp32 in group order, one rounding (per channel: y = s_j·Σ_k q_jk·x_k, ATen's "
                      "_weight_int8pack_mm aarch64 kernel, reduce(acc)·scale; group-wise: MLX's quantized qdot, "
                      "scale·Σ q·x per group accumulated in fp32, its affine bias term 0 for symmetric codes)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto& x = in.at("x");
                        const auto q = p.up(in.at("q")), s = p.up(in.at("s"));
                        const auto groups = s.size(-1), size = q.size(-1) / groups;
                        const auto xu = p.up(x);
                        torch::Tensor y;
                        for (int64_t g = 0; g < groups; ++g) {
                          const auto acc = torch::matmul(xu.narrow(-1, g * size, size), q.narrow(-1, g * size, size).t());
                          const auto term = acc * s.select(-1, g);
                          y = g == 0 ? term : y + term;
                        }
                        return p.round_w(y);
                      }));
  v.push_back(variant("quant_scale_after_round",
                      "per-channel scale applied after the accumulator is rounded: y = rb(rb(Σ_k q_jk·x_k)·rb(s_j)) "
                      "(Marlin's per-column 4-bit write-out: the fp32 accumulator converted to W, then __hmul2 by the scale; "
                      "torchao's int8 weight-only eager path (x @ q.T) * scales); "
                      "per-channel scales only (weights.group 0)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto& s = in.at("s");
                        if (s.size(-1) != 1) {
                          throw std::invalid_argument("quant_scale_after_round applies a per-channel scale: it needs "
                                                      "probe.weights.group 0");
                        }
                        const auto acc = p.round_w(gemm(in.at("x"), in.at("q"), p));
                        return p.round_w(p.up(acc) * p.up(p.round_w(p.up(s).squeeze(-1))));
                      }));
  v.push_back(variant("quant_dequant_w_scales_in_w",
                      "as quant_dequant_w, but the checkpoint's scales are first converted to W (fp16 or fp32 "
                      "scales cast to bf16: GPTQModel#2722's AWQ bf16 path), a per-row/group gain error",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto& q = in.at("q");
                        const auto s = p.up(p.round_w(p.up(in.at("s"))));
                        return p.round_w(gemm(in.at("x"), p.round_w(p.up(q) * expand_scales(s, q.size(-1))), p));
                      }));
  return v;
}

// Symmetric quantization of w [N, K] (fp64) at `bits` with groups of `group` along K
// (0: one group per output channel): s = absmax/qmax rounded to the scale format, q =
// clamp(round(w/s), -2^(bits-1), qmax), as GPTQ/AWQ/torchao's symmetric schemes store them.
std::pair<torch::Tensor, torch::Tensor> quantize(const torch::Tensor& w, int64_t bits, int64_t group,
                                                 const std::string& scale_dtype, torch::Dtype working) {
  const auto n = w.size(0), k = w.size(1), size = group == 0 ? k : group;
  const double qmax = static_cast<double>((int64_t{1} << (bits - 1)) - 1), qmin = -qmax - 1.0;
  const auto wg = w.view({n, k / size, size});
  auto s = wg.abs().amax(-1) / qmax;
  s = torch::where(s > 0, s, torch::ones_like(s));
  const auto store = scale_dtype == "fp32" ? torch::kFloat32 : scale_dtype == "fp16" ? torch::kHalf : working;
  s = s.to(store).to(torch::kFloat32);
  const auto q = torch::clamp(torch::round(wg / s.to(torch::kFloat64).unsqueeze(-1)), qmin, qmax).view({n, k});
  return {q.to(torch::kInt8), s};
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
  const auto dt = numerics::to_dtype(probe.dtype);
  const auto group = probe.params.integer("weights.group");
  // Codes of the weights as the checkpoint stores them (for kinds other than quantized, of W
  // as rounded to W).
  const auto [q, s] = quantize(kind == "quantized" ? w : w.to(dt).to(torch::kFloat64), probe.params.integer("weights.bits"),
                               group, probe.params.string("weights.scale_dtype"), dt);
  KernelInputs fixed;
  if (kind == "quantized") {
    // The checkpoint dequantized to W, as a bf16 model of it is evaluated: q·s rounded once.
    fixed.set("W", (q.to(torch::kFloat32) * expand_scales(s, k)).to(dt));
  } else {
    fixed.set("W", w.to(dt));
  }
  fixed.set("b", b.to(dt));
  fixed.set("q", q);
  fixed.set("s", s);
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
      param::text("weights.kind", "normal").one_of({"normal", "zero_sum", "cancelling", "quantized"}).doc("normal: W ~ N(0, 1/K); zero_sum: rows sum to 0; cancelling: rows with a large sum and a bias cancelling it; quantized: normal weights quantized to integer codes q and scales s (weights.bits, weights.group, weights.scale_dtype), W = rb(q·s)"),
      param::number("weights.bias_scale", 1.0).at_least(0).doc("b ~ N(0, bias_scale²) (normal, zero_sum)"),
      param::number("weights.row_dc", 100.0).at_least(0).doc("cancelling: each row sums to about row_dc"),
      param::integer("weights.bits", 8).at_least(2).at_most(8).doc("quantized codes: signed integers in [-2^(bits-1), 2^(bits-1) - 1] (8: int8, 4: int4)"),
      param::integer("weights.group", 0).at_least(0).doc("quantization group along K (128: group-wise scales); 0: one scale per output channel"),
      param::text("weights.scale_dtype", "w").one_of({"w", "fp16", "fp32"}).doc("the format the checkpoint stores its scales in (w: the working dtype)"),
  };
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    const auto group = probe.params.integer("weights.group"), k = probe.params.integer("shape.in_features");
    // A group under 16 is not a real layout, and the scaled-partials variant runs one GEMM per
    // group: group 1 at K = 4096 is 4096 kernel calls per batch.
    if (group > 0 && group < 16) {
      return FieldError{"probe.weights.group", "expected 0 (per-channel scales) or a group of at least 16, got " +
                                                   std::to_string(group)};
    }
    if (group > 0 && k % group != 0) {
      return FieldError{"probe.weights.group", "expected a divisor of probe.shape.in_features (" + std::to_string(k) +
                                                   "), got " + std::to_string(group)};
    }
    return check_outlier_count(probe, "shape.in_features");
  };
  f.make_fixed = make_fixed;
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    return token_channel_activations(probe, "shape.tokens", "shape.in_features", seed);
  };
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  f.gradients.push_back(input_gradient({"dx", "x", {"channel", "row"}, "", "gradient of the input, per token and input feature"}, token_channel_buckets()));
  f.gradients.push_back(weight_gradient(
      {"dW", "W", {"row", "column"}, "tokens", "gradient of the weight [out, in]: per output feature (row) or input feature (column)"},
      matrix_buckets(), "shape.tokens"));
  for (auto& v : linear_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
