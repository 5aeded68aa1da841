// RMSNorm family: y = x / rms(x) · gain over the hidden dimension, with the cast points of
// the public implementations the controls replay (../shared/controls/, N1-N7, #15-#19).
//
// Inputs: x [B, tokens, hidden] per replicate, w [hidden] fixed. Output [B, tokens, hidden].
// Bucket axes: channel (hidden index, the default) and row (token index).
//
// Backward (issue 31): gradients dx (x's shape; channel and row buckets) and dw (one element
// per channel; it sums over the replicate's tokens: the reduction size N). The variants'
// backward is autograd of their forward unless they declare one: the explicit backwards below
// replay fused kernels' reductions (../shared/controls/backward-catalog.md BN1, BN4, BN7,
// BN30, BP2, BP16).
#include <cmath>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

const std::vector<ParamSpec> kEpsParam = {
    param::number("eps", 1e-6).at_least(0).doc("added to the mean square before the square root; pass it explicitly on both sides")};

// u = up(x), r = 1/sqrt(mean(u²) + eps) over the hidden dimension, in the accumulation dtype.
torch::Tensor inverse_rms(const torch::Tensor& u, double eps) {
  return torch::rsqrt(u.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

// N4's production: its sum of squares adds one hidden unit at a time (evaluated whole, not in row blocks).
constexpr const char* kSequentialSumsq = "llama_bf16_sequential_sumsq";

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), kEpsParam, std::move(fn));
}

// ---- explicit backwards ------------------------------------------------------------------
//
// y = g·x·r with r = (mean(x²) + eps)^(-1/2), x̂ = x·r and gain g (w, or 1 + w for Gemma):
//   dx = r·(m − x̂·mean(m·x̂)),  m = dy·g   (per row)
//   dw = Σ_tokens dy·x̂                    (the +1 of a Gemma gain cancels)
// Under the exact policy every function below is that fp64 VJP; at the working precision
// each rounds where the kernel it replays does.

// How a replayed kernel reduces dW over a replicate's rows (tokens).
enum class DwReduction {
  fp32_partials,    // fp32 partials per program over contiguous row ranges, summed in fp32 (Liger row-wise, BP2)
  bf16_block_sums,  // per block of rows, the sum of W products rounded to W before the fp32 add (Liger block, BN1)
  bf16_accumulator, // a W accumulator: every add (per row chunk) rounds to W (BN30)
  none,             // not produced (BN7)
};

struct BackwardReplay {
  bool gemma_gain = false;    // gain 1 + w formed in fp32
  bool rstd_in_w = false;     // 1/RMS saved in the input dtype (BN4)
  DwReduction dw = DwReduction::fp32_partials;
};

// Rows of x [..., tokens, hidden] as [rows, hidden] (a replicate's batch of one folds in).
torch::Tensor rows_of(const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

Gradients replayed_backward(const BackwardReplay& how, const KernelInputs& in, const Precision& p, const ParamMap& prm,
                            const torch::Tensor& dy, const std::vector<std::string>& wrt) {
  const auto& x_in = in.at("x");
  const auto u = p.up(x_in);
  auto r = inverse_rms(u, prm.number("eps"));
  if (how.rstd_in_w) r = p.up(p.round_w(r));
  const auto xhat = u * r;
  const auto gain = how.gemma_gain ? 1.0 + p.up(in.at("w")) : p.up(in.at("w"));
  const auto d = p.up(dy);
  Gradients out;
  for (const auto& name : wrt) {
    if (name == "x") {
      const auto m = d * gain;
      out["x"] = p.round_w(r * (m - xhat * (m * xhat).mean(-1, true)));
    } else if (name == "w") {
      const auto hidden = x_in.size(-1);
      // The kernels multiply dy by x̂ cast to W ((X * rstd).to(W) in Liger's llama mode).
      const auto xhat_w = p.up(p.round_w(xhat));
      const auto terms = rows_of(d * xhat_w);
      const auto rows = terms.size(0);
      const auto split = [&](std::int64_t parts) {
        parts = std::clamp<std::int64_t>(parts, 1, rows);
        return terms.tensor_split(parts, 0);
      };
      switch (how.dw) {
        case DwReduction::none:
          break;
        case DwReduction::fp32_partials: {
          auto acc = torch::zeros({hidden}, terms.options());
          for (const auto& part : split(prm.integer("programs"))) acc = acc + part.sum(0);
          out["w"] = p.round_w(acc);
          break;
        }
        case DwReduction::bf16_block_sums: {
          auto acc = torch::zeros({hidden}, terms.options());
          const auto block = std::max<std::int64_t>(1, prm.integer("block_rows"));
          const auto products = p.up(p.round_w(terms));  // tl.sum over a W tensor of W products
          for (std::int64_t at = 0; at < rows; at += block)
            acc = acc + p.up(p.round_w(products.narrow(0, at, std::min(block, rows - at)).sum(0)));
          out["w"] = p.round_w(acc);
          break;
        }
        case DwReduction::bf16_accumulator: {
          const auto chunks = prm.integer("chunks");
          auto acc = p.round_w(torch::zeros({hidden}, terms.options()));
          for (const auto& part : split(chunks > 0 ? chunks : rows)) acc = p.round_w(p.up(acc) + p.round_w(part.sum(0)));
          out["w"] = acc;
          break;
        }
      }
    }
  }
  return out;
}

const std::vector<ParamSpec>& replay_params(DwReduction dw) {
  static const std::vector<ParamSpec> partials = {
      kEpsParam.front(),
      param::integer("programs", 132).at_least(1).doc("fp32 dW partials (Liger: one per SM; 132 on an H100)")};
  static const std::vector<ParamSpec> blocks = {
      kEpsParam.front(),
      param::integer("block_rows", 16).at_least(1).doc("rows per tl.sum block whose dW partial is rounded to W")};
  static const std::vector<ParamSpec> accumulator = {
      kEpsParam.front(),
      param::integer("chunks", 0).at_least(0).doc("adds into the W dW accumulator per replicate (0: one per token)")};
  switch (dw) {
    case DwReduction::bf16_block_sums: return blocks;
    case DwReduction::bf16_accumulator: return accumulator;
    case DwReduction::none: return kEpsParam;
    case DwReduction::fp32_partials: break;
  }
  return partials;
}

// A variant with the given forward and a replayed backward.
Variant with_backward(std::string name, std::string description, KernelFn fn, BackwardReplay how) {
  auto v = builtin_variant(std::move(name), std::move(description), replay_params(how.dw), std::move(fn));
  v.backward = [how](const KernelInputs& in, const Precision& p, const ParamMap& prm, const torch::Tensor& dy,
                     const std::vector<std::string>& wrt) { return replayed_backward(how, in, p, prm, dy, wrt); };
  return v;
}

// LibTorch >= 2.4: at::rms_norm, the kernel behind torch.nn.RMSNorm and
// torch.nn.functional.rms_norm, on the W tensors as a migration would call it.
#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
constexpr const char* kAtenRmsNormUnavailable = "";
torch::Tensor aten_rms_norm(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto dt = p.is_exact() ? torch::kFloat64 : p.working_dtype();
  const auto x = in.at("x").to(dt);
  return p.round_w(at::rms_norm(x, {x.size(-1)}, in.at("w").to(dt), prm.number("eps")));
}
#else
constexpr const char* kAtenRmsNormUnavailable = "needs LibTorch >= 2.4 (at::rms_norm); this build has LibTorch " TORCH_VERSION;
torch::Tensor aten_rms_norm(const KernelInputs&, const Precision&, const ParamMap&) {
  throw std::logic_error(kAtenRmsNormUnavailable);
}
#endif

// HF LlamaRMSNorm's forward (the cast points of the `llama` variant).
torch::Tensor llama_forward(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto u = p.up(in.at("x"));
  const auto h = p.round_w(u * inverse_rms(u, prm.number("eps")));
  return p.round_w(p.up(in.at("w")) * p.up(h));  // a W x W product, rounded once
}

torch::Tensor gemma_forward(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto u = p.up(in.at("x"));
  return p.round_w(u * inverse_rms(u, prm.number("eps")) * (1.0 + p.up(in.at("w"))));
}

std::vector<Variant> backward_variants() {
  std::vector<Variant> v;
  v.push_back(with_backward(
      "liger_rowwise",
      "Liger RMSNorm (llama casting) fused backward: dx in fp32, rounded once; dW from fp32 partials per "
      "program summed in fp32 (BP2; Liger-Kernel#945, FlyDSL#795)",
      llama_forward, {}));
  v.push_back(with_backward(
      "liger_block_dw_bf16",
      "Liger RMSNorm block backward before #950: each block's dW partial, a tl.sum over W products, "
      "rounded to W before the fp32 add (BN1)",
      llama_forward, {.dw = DwReduction::bf16_block_sums}));
  v.push_back(with_backward(
      "saved_rstd_in_w",
      "fused backward with 1/RMS saved in the input dtype (BN4; helion#2273, Liger casting_mode none)",
      llama_forward, {.rstd_in_w = true}));
  v.push_back(with_backward(
      "missing_dw",
      "fused backward that returns no weight gradient (BN7; unsloth#4533: norm weights never update)",
      llama_forward, {.dw = DwReduction::none}));
  v.push_back(with_backward(
      "dw_bf16_accumulator",
      "dW accumulated in a W buffer, every add rounded to W (BN30; Megatron-LM#153, pytorch#106395, FlagGems#309)",
      llama_forward, {.dw = DwReduction::bf16_accumulator}));
  v.push_back(with_backward(
      "te_zero_centered_gamma",
      "TransformerEngine zero_centered_gamma fused backward: gain 1 + w formed in fp32, dx in fp32 rounded "
      "once, dW from fp32 partials (BP16; TE#67, #631)",
      gemma_forward, {.gemma_gain = true}));
  return v;
}

std::vector<Variant> rmsnorm_variants() {
  std::vector<Variant> v = backward_variants();
  v.push_back(variant("aten_rms_norm",
                      "LibTorch >= 2.4: at::rms_norm (torch.nn.RMSNorm) on the W input and weight", aten_rms_norm));
  v.back().unavailable = kAtenRmsNormUnavailable;
  v.push_back(variant(
      "llama",
      "HF LlamaRMSNorm cast points: normalize in fp32, round to W, then multiply by the W "
      "weight in W (two roundings)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto h = p.round_w(u * inverse_rms(u, prm.number("eps")));
        return p.round_w(p.up(in.at("w")) * p.up(h));  // a W x W product, rounded once
      }));
  v.push_back(variant(
      "llama_recip_sqrt",
      "as llama, but u / sqrt(ms + eps) instead of u * rsqrt(ms + eps) (positive #16)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto h = p.round_w(u / torch::sqrt(u.pow(2).mean(-1, true) + prm.number("eps")));
        return p.round_w(p.up(in.at("w")) * p.up(h));
      }));
  v.push_back(variant(
      "fused_weight_fp32",
      "TransformerEngine / Gemma cast points: multiply the weight in fp32 and round once "
      "(TE#1132 production side)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        return p.round_w(u * inverse_rms(u, prm.number("eps")) * p.up(in.at("w")));
      }));
  v.push_back(variant(
      "gemma",
      "Gemma zero-centred weight: gain (1 + w) formed in fp32, one rounding at the end",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        return p.round_w(u * inverse_rms(u, prm.number("eps")) * (1.0 + p.up(in.at("w"))));
      }));
  v.push_back(variant(
      "gemma_offset_in_w",
      "Gemma gain (1 + w) formed in the weight dtype W, i.e. rounded to W per channel before "
      "the fp32 multiply (N1: transformers#29402, vllm#3653, Liger#1462)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto gain = p.round_w(p.up(in.at("w")) + 1.0);  // `w + 1.0` on a W tensor stays W
        return p.round_w(u * inverse_rms(u, prm.number("eps")) * p.up(gain));
      }));
  v.push_back(variant(
      kSequentialSumsq,
      "as llama, but the sum of squares runs through a sequential W accumulator (every add "
      "rounds to W), the low-precision reduction of pytorch#66707 / minimind#301 (N4)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto hidden = x.size(-1);
        auto acc = p.round_w(torch::zeros_like(p.up(x.select(-1, 0))));
        for (int64_t j = 0; j < hidden; ++j) {
          const auto xj = p.up(x.select(-1, j));
          acc = p.round_w(p.up(acc) + p.round_w(xj * xj));
        }
        const auto ms = p.round_w(p.up(acc) / static_cast<double>(hidden));
        const auto u = p.up(x);
        const auto h = p.round_w(u * torch::rsqrt(p.up(ms) + prm.number("eps")).unsqueeze(-1));
        return p.round_w(p.up(in.at("w")) * p.up(h));
      }));
  v.push_back(variant(
      "llama_eps_outside_root",
      "as llama, but 1 / (sqrt(ms) + eps): eps outside the square root (N6; TE#364, tilelang#1243)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto h = p.round_w(u / (torch::sqrt(u.pow(2).mean(-1, true)) + prm.number("eps")));
        return p.round_w(p.up(in.at("w")) * p.up(h));
      }));
  v.push_back(variant(
      "llama_vector_norm",
      "as llama, with the mean square from ATen's linalg_vector_norm reduction kernel, "
      "r = rsqrt(n·n/H + eps) (positive #15: the LibTorch 1.13 substitute for at::rms_norm)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto n = at::linalg_vector_norm(u, 2, {-1}, /*keepdim=*/true);
        const auto h = p.round_w(u * torch::rsqrt(n * n / static_cast<double>(u.size(-1)) + prm.number("eps")));
        return p.round_w(p.up(in.at("w")) * p.up(h));
      }));
  v.push_back(variant(
      "llama_sum_times_inv_n",
      "as llama, with mean(u·u) written as sum(u·u) · (1/H) (positive #17)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto ms = (u * u).sum(-1, true) * (1.0 / static_cast<double>(u.size(-1)));
        const auto h = p.round_w(u * torch::rsqrt(ms + prm.number("eps")));
        return p.round_w(p.up(in.at("w")) * p.up(h));
      }));
  return v;
}

std::optional<FieldError> validate(const ProbeContract& probe) {
  if (auto err = check_outlier_count(probe, "shape.hidden")) return err;
  const auto hidden = probe.params.integer("shape.hidden");
  const auto& large = probe.params.number_list("weights.large");
  if (static_cast<std::int64_t>(large.size()) > hidden) {
    return FieldError{"probe.weights.large", "expected at most probe.shape.hidden = " + std::to_string(hidden) +
                                                 " values, got " + std::to_string(large.size())};
  }
  return std::nullopt;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t seed) {
  const auto hidden = probe.params.integer("shape.hidden");
  const auto& kind = probe.params.string("weights.kind");
  const double spread = probe.params.number("weights.spread");
  InputStream stream(seed);
  torch::Tensor w;
  if (kind == "around_one") {
    w = 1.0 + spread * stream.normal({hidden}, torch::kFloat64);
  } else {  // zero_centred: Gemma stores w with the gain 1 + w
    w = (stream.uniform({hidden}).to(torch::kFloat64) * 2.0 - 1.0) * spread;
  }
  const auto& large = probe.params.number_list("weights.large");
  for (std::size_t i = 0; i < large.size(); ++i) w[static_cast<std::int64_t>(i)] = large[i];
  KernelInputs fixed;
  fixed.set("w", w.to(numerics::to_dtype(probe.dtype)));
  return fixed;
}

KernelInputs make_replicate(const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
  return token_channel_activations(probe, "shape.tokens", "shape.hidden", seed);
}

}  // namespace

void register_rmsnorm_family(Registry& registry) {
  Family f;
  f.name = "rmsnorm";
  f.description = "RMSNorm over the hidden dimension: x [tokens, hidden], weight w [hidden]";
  f.bucket_axes = {"channel", "row"};
  f.probe_params = {
      param::integer("shape.tokens", 512).at_least(1).doc("tokens per replicate"),
      param::integer("shape.hidden", 256).at_least(2).doc("hidden size"),
      param::text("weights.kind", "around_one").one_of({"around_one", "zero_centred"}).doc("around_one: w = 1 + spread·N(0,1) (Llama); zero_centred: w ~ U(-spread, spread), gain 1 + w (Gemma)"),
      param::number("weights.spread", 0.1).at_least(0).doc("spread of the weight law"),
      param::number_list("weights.large", {}).doc("values written over the first weights (real checkpoints have a few large gains, e.g. 15.8)"),
  };
  f.validate_probe = validate;
  f.row_separable = true;
  f.make_fixed = make_fixed;
  f.make_replicate = make_replicate;
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  f.gradients = {
      input_gradient({"dx", "x", {"channel", "row"}, "", "gradient of the input, per token and channel"},
                     token_channel_buckets()),
      weight_gradient({"dw", "w", {"element"}, "tokens", "gradient of the weight: one element per channel, a sum over the replicate's tokens"},
                      element_buckets(), "shape.tokens")};
  for (auto& v : rmsnorm_variants()) {
    v.in_row_blocks = v.schema.name != kSequentialSumsq;  // that one: an operator call per hidden unit
    f.variants.emplace(v.schema.name, std::move(v));
  }
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
