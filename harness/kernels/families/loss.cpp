// Loss family: token cross-entropy over micro-batches, with the reductions and cast points
// the controls replay (L1: transformers#34191 gradient-accumulation normalization; L2:
// mlx#4520 log-sum-exp subtracted in bf16).
//
// Inputs: logits z [B, tokens, vocab] per replicate (W, N(shift, scale²)), targets t
// [B, tokens] per replicate (uniform over the vocabulary); fixed: valid [tokens] (false =
// ignore_index, placed as trailing padding in each micro-batch) and microbatch [tokens].
// The tokens are microbatches × tokens_per_microbatch, micro-batch by micro-batch.
//
// Output contract: fp32 per-token values (HF upcasts logits, so its loss is fp32), 0 for
// ignored tokens. The "token" variants return the per-token loss; the "accum" variants
// return each token's contribution to the accumulated loss (its loss times the weight the
// reduction gives it), whose sum is the loss that is back-propagated.
// Bucket axes: position (one bucket per token slot, the default), microbatch.
#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), {}, std::move(fn));
}

// The fp32 output contract: fp32 under the working policy, fp64 (unrounded) under the exact one.
torch::Tensor fp32_out(const Precision& p, const torch::Tensor& t) {
  return p.is_exact() ? t.to(torch::kFloat64) : t.to(torch::kFloat32);
}

// logsumexp over the vocabulary and the target logit, both in the accumulation dtype.
std::pair<torch::Tensor, torch::Tensor> lse_and_target(const KernelInputs& in, const Precision& p) {
  const auto z = p.up(in.at("z"));
  const auto t = in.at("t").unsqueeze(-1);
  return {torch::logsumexp(z, -1), z.gather(-1, t).squeeze(-1)};
}

torch::Tensor masked(const torch::Tensor& loss, const KernelInputs& in) {
  return torch::where(in.at("valid"), loss, torch::zeros_like(loss));
}

// Per-token cross-entropy in the accumulation dtype, ignored tokens 0.
torch::Tensor token_loss(const KernelInputs& in, const Precision& p) {
  const auto [lse, zt] = lse_and_target(in, p);
  return masked(lse - zt, in);
}

std::vector<Variant> loss_variants() {
  std::vector<Variant> v;
  v.push_back(variant("token_ce_fp32",
                      "per-token cross-entropy logsumexp(up(z)) - up(z)[t] in fp32, fp32 out (F.cross_entropy on "
                      "upcast logits, reduction='none')",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return fp32_out(p, token_loss(in, p));
                      }));
  v.push_back(variant("token_ce_lse_w",
                      "log-sum-exp computed in fp32 but rounded to W, then lse - z[t] subtracted in W and upcast "
                      "(L2: mlx#4520's fallback, TE#3193 fused CE intermediates)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto [lse, zt] = lse_and_target(in, p);
                        return fp32_out(p, masked(p.up(p.round_w(p.up(p.round_w(lse)) - zt)), in));
                      }));
  v.push_back(variant("accum_global_token_mean",
                      "each token's share of the accumulated loss: summed token losses over all micro-batches "
                      "divided by the total number of valid tokens (full-batch semantics, transformers#34191 fix)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto loss = token_loss(in, p);
                        const auto n = in.at("valid").sum().to(loss.scalar_type());
                        return fp32_out(p, loss / n);
                      }));
  v.push_back(variant("accum_microbatch_mean",
                      "each token's share when every micro-batch is averaged over its own valid tokens and the "
                      "M means are averaged (L1: the pre-fix gradient accumulation, transformers#34191)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto loss = token_loss(in, p);
                        const auto& mb = in.at("microbatch");
                        const auto m = mb.max().item<std::int64_t>() + 1;
                        const auto counts = torch::zeros({m}, loss.options())
                                                .index_add_(0, mb, in.at("valid").to(loss.scalar_type()));
                        return fp32_out(p, loss / (counts.index_select(0, mb) * static_cast<double>(m)));
                      }));
  return v;
}

std::int64_t total_tokens(const ProbeContract& probe) {
  return probe.params.integer("shape.microbatches") * probe.params.integer("shape.tokens");
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t) {
  const auto m = probe.params.integer("shape.microbatches"), t = probe.params.integer("shape.tokens");
  const auto lo = probe.params.number("ignore.min"), hi = probe.params.number("ignore.max");
  auto valid = torch::ones({m * t}, torch::kBool);
  auto mb = torch::empty({m * t}, torch::kInt64);
  for (std::int64_t j = 0; j < m; ++j) {
    // Micro-batch j ignores a fraction spread linearly from ignore.min to ignore.max, as
    // trailing padding, so valid-token counts differ between micro-batches.
    const double f = m > 1 ? lo + (hi - lo) * static_cast<double>(j) / static_cast<double>(m - 1) : lo;
    const auto ignored = std::min<std::int64_t>(t - 1, static_cast<std::int64_t>(std::llround(f * static_cast<double>(t))));
    valid.narrow(0, j * t + (t - ignored), ignored).fill_(false);
    mb.narrow(0, j * t, t).fill_(j);
  }
  KernelInputs fixed;
  fixed.set("valid", valid);
  fixed.set("microbatch", mb);
  return fixed;
}

KernelInputs make_replicate(const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
  InputStream stream(seed);
  const auto n = total_tokens(probe), vocab = probe.params.integer("shape.vocab");
  KernelInputs in;
  in.set("z", shifted_gaussian(probe, n, vocab, stream));
  in.set("t", stream.integers(vocab, {n}));
  return in;
}

}  // namespace

void register_loss_family(Registry& registry) {
  Family f;
  f.name = "loss";
  f.description =
      "token cross-entropy over micro-batches: logits [tokens, vocab] in W, targets [tokens]; fp32 per-token outputs";
  f.bucket_axes = {"position", "microbatch"};
  f.probe_params = {
      param::integer("shape.microbatches", 1).at_least(1).doc("micro-batches accumulated into one step"),
      param::integer("shape.tokens", 64).at_least(1).doc("tokens per micro-batch"),
      param::integer("shape.vocab", 32768).at_least(2).doc("vocabulary size"),
      param::number("ignore.min", 0.0).at_least(0).at_most(0.99).doc("fraction of ignored (padding) tokens in the first micro-batch"),
      param::number("ignore.max", 0.0).at_least(0).at_most(0.99).doc("fraction in the last micro-batch (linear in between)"),
  };
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    if (probe.params.number("ignore.max") < probe.params.number("ignore.min")) {
      return FieldError{"probe.ignore.max", "expected at least probe.ignore.min"};
    }
    return check_outlier_count(probe, "shape.vocab");
  };
  f.make_fixed = make_fixed;
  f.make_replicate = make_replicate;
  f.bucket_ids = [](const std::string& axis, const ProbeContract& probe, at::IntArrayRef shape) {
    const auto n = shape[0];
    const auto ids = torch::arange(n, torch::TensorOptions().dtype(torch::kInt64));
    if (axis == "microbatch") return torch::div(ids, probe.params.integer("shape.tokens"), "floor");
    return ids;
  };
  f.output_format = [](const ProbeContract&) { return stats::FloatFormat::fp32; };
  for (auto& v : loss_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
