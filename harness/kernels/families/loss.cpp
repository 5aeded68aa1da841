// Loss family: token cross-entropy over micro-batches, with the reductions and cast points
// the controls replay (L1: transformers#34191 gradient-accumulation normalization; L2:
// mlx#4520 log-sum-exp subtracted in bf16), and the fp32 forms of cross-entropy that real
// code writes (PyTorch's F.cross_entropy path, the fused kernels' lse - z_t with label
// smoothing, an online log-sum-exp over vocabulary chunks, a z-loss).
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
//
// Backward (issue 31): gradient dlogits (z's shape [tokens, vocab]; buckets position and
// microbatch, each pooling a row's vocabulary), with dy one value per token (the per-token
// loss's upstream gradient, reduction='none'). Autograd of each forward, except the explicit
// backwards of the fused cross-entropy kernels (BN16, BN19, BP10, BP14). The probe's
// targets.margin raises each target logit so rows are confident (p_t near 1), where BN16's
// cancellation shows; N(0,1) logits give p_t ~ 1/V and hide it.
#include <algorithm>
#include <cmath>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

Variant variant(std::string name, std::string description, KernelFn fn, std::vector<ParamSpec> params = {}) {
  return builtin_variant(std::move(name), std::move(description), std::move(params), std::move(fn));
}

// The parameters of the fp32 cross-entropy forms: PyTorch's label_smoothing e (the target
// distribution (1 - e)·onehot + e/V) and a z-loss coefficient (PaLM / t5x: + coef·lse²).
// Both default to 0, plain cross-entropy; a case passes them explicitly on both sides.
const std::vector<ParamSpec> kCeParams = {
    param::number("label_smoothing", 0.0).at_least(0).at_most(1).doc("F.cross_entropy's label_smoothing e"),
    param::number("z_loss", 0.0).at_least(0).doc("z-loss coefficient: coef·logsumexp(z)² added per token (0: none)"),
};
const std::vector<ParamSpec> kOnlineParams = {
    param::number("label_smoothing", 0.0).at_least(0).at_most(1).doc("F.cross_entropy's label_smoothing e"),
    param::number("z_loss", 0.0).at_least(0).doc("z-loss coefficient: coef·logsumexp(z)² added per token (0: none)"),
    param::integer("chunk", 4096).at_least(1).doc("vocabulary chunk of the online log-sum-exp"),
};

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

// Per-token cross-entropy logsumexp - z_t in the accumulation dtype, ignored tokens 0 (the
// accumulation variants' per-token loss).
torch::Tensor token_loss(const KernelInputs& in, const Precision& p) {
  const auto [lse, zt] = lse_and_target(in, p);
  return masked(lse - zt, in);
}

// PyTorch's F.cross_entropy on the upcast logits, reduction='none', as ATen computes it
// (cross_entropy_loss: log_softmax over the vocabulary, then nll_loss at the target; with
// label smoothing, (1 - e)·nll + (e/V)·(-Σ_c log_softmax_c)), ignored tokens 0. Logits
// [B, n, V] are flattened to [B·n, V] (class dimension 1, as the API wants).
torch::Tensor aten_cross_entropy(const KernelInputs& in, const Precision& p, double label_smoothing) {
  const auto z = p.up(in.at("z"));
  const auto b = z.size(0), n = z.size(1), vocab = z.size(2);
  const auto t = in.at("t").masked_fill(in.at("valid").logical_not().unsqueeze(0), -100);  // HF's ignore_index
  const auto loss = at::cross_entropy_loss(z.reshape({b * n, vocab}), t.reshape({b * n}), {}, at::Reduction::None,
                                           -100, label_smoothing);
  return masked(loss.view({b, n}), in);
}

// lse - e·Σz/V - (1 - e)·z_t in the accumulation dtype, the order of flash-attn's fused
// cross-entropy kernel (e = 0: lse - z_t, the fused kernels' plain form).
torch::Tensor lse_form(const torch::Tensor& lse, const torch::Tensor& zt, const torch::Tensor& z_sum, int64_t vocab,
                       double e) {
  if (e == 0.0) return lse - zt;
  return lse - e * z_sum / static_cast<double>(vocab) - (1.0 - e) * zt;
}

// The online log-sum-exp over vocabulary chunks in the accumulation dtype: running max m and
// sum d, d·exp(m − m_new) + Σ exp(z − m_new) per chunk, lse = m + log d; and Σz, which label
// smoothing needs. Returns {lse, Σz}.
std::pair<torch::Tensor, torch::Tensor> online_lse(const torch::Tensor& z, std::int64_t chunk) {
  torch::Tensor m, d, z_sum;
  for (const auto& c : z.split(chunk, -1)) {
    const auto c_max = std::get<0>(c.max(-1));
    if (!m.defined()) {
      m = c_max;
      d = torch::exp(c - m.unsqueeze(-1)).sum(-1);
      z_sum = c.sum(-1);
    } else {
      const auto m_new = torch::maximum(m, c_max);
      d = d * torch::exp(m - m_new) + torch::exp(c - m_new.unsqueeze(-1)).sum(-1);
      m = m_new;
      z_sum = z_sum + c.sum(-1);
    }
  }
  return {m + torch::log(d), z_sum};
}

// + coef·lse·lse (Liger's lse_square_scale, flash-attn's and t5x's z-loss), when coef > 0.
torch::Tensor with_z_loss(const torch::Tensor& loss, const torch::Tensor& lse, double coef) {
  return coef > 0.0 ? loss + coef * lse * lse : loss;
}

// ---- explicit backwards (plain cross-entropy, no label smoothing or z-loss) ---------------
//
// loss_t = lse_t − z_{t,y}:  dz_{t,j} = dy_t·(softmax(z_t)_j − [j = y_t]), 0 on ignored tokens.
// The forward of these variants is token_ce_lse_minus_target_fp32's plain form.

enum class CeBackward {
  one_store,          // softmax and the gradient in fp32, one W store (Liger CE before #1268; BP10)
  from_online_lse,    // exp(z − lse) with lse from the online chunked log-sum-exp (levanter/Liger; BP14)
  target_rmw_w,       // non-target lanes as one_store; the target lane stored as p·dy in W, then
                      // loaded and dy subtracted, stored again (Liger #1268; BN16)
  scalar_grad_output, // every token scaled by its replicate's first dy (Liger FLCE reduction='none'; BN19)
  w_intermediate,     // softmax written to the W input buffer, then (p − onehot)·dy from it (TE fused CE; BN17)
  filtered,           // vocabulary blocks whose softmax entries are all below filter_eps skipped (CCE; BN22, BP7)
};

torch::Tensor plain_ce(const KernelInputs& in, const Precision& p, const ParamMap&) {
  const auto [lse, zt] = lse_and_target(in, p);
  return fp32_out(p, masked(lse - zt, in));
}

Gradients ce_backward(CeBackward how, const KernelInputs& in, const Precision& p, const ParamMap& prm,
                      const torch::Tensor& dy, const std::vector<std::string>& wrt) {
  Gradients out;
  if (std::find(wrt.begin(), wrt.end(), "z") == wrt.end()) return out;
  const auto z = p.up(in.at("z"));
  const auto t = in.at("t").unsqueeze(-1);
  auto d = p.up(dy);  // [B, n]
  if (how == CeBackward::scalar_grad_output) d = d.narrow(-1, 0, 1).expand_as(d);
  d = d * in.at("valid").to(z.scalar_type());  // ignored tokens get no gradient
  torch::Tensor prob;
  if (how == CeBackward::from_online_lse) {
    prob = torch::exp(z - online_lse(z, prm.integer("chunk")).first.unsqueeze(-1));
  } else {
    prob = torch::softmax(z, -1);
  }
  if (how == CeBackward::w_intermediate) prob = p.up(p.round_w(prob));
  if (how == CeBackward::filtered && !p.is_exact()) {
    // CCE skips a block of the vocabulary when no softmax entry in it reaches filter_eps:
    // its gradient stays 0 (the skipped p·dy are small and positive: one-signed per row).
    // The threshold is the working dtype's precision (CCE's "auto": 2^-12 for bf16), so the
    // fp64 run filters nothing: the same real function, a precision shortcut.
    const double eps = prm.number("filter_eps");
    const auto block = prm.integer("block");
    std::vector<torch::Tensor> kept;
    for (const auto& c : prob.split(block, -1)) {
      const auto live = (std::get<0>(c.max(-1, true)) >= eps).to(c.scalar_type());
      kept.push_back(c * live);
    }
    prob = torch::cat(kept, -1);
  }
  const auto dd = d.unsqueeze(-1);
  if (how == CeBackward::target_rmw_w) {
    auto g = p.round_w(prob * dd);  // every lane: p·dy stored in W
    const auto at_target = p.up(g.gather(-1, t)) - dd;  // loaded back, dy subtracted in fp32
    out["z"] = g.scatter(-1, t, p.round_w(at_target));
    return out;
  }
  const auto onehot = torch::zeros_like(prob).scatter(-1, t, 1.0);
  out["z"] = p.round_w((prob - onehot) * dd);
  return out;
}

Variant ce_with_backward(std::string name, std::string description, CeBackward how) {
  std::vector<ParamSpec> params;
  if (how == CeBackward::from_online_lse)
    params.push_back(param::integer("chunk", 4096).at_least(1).doc("vocabulary chunk of the online log-sum-exp"));
  if (how == CeBackward::filtered) {
    params.push_back(param::number("filter_eps", 1.0 / 4096.0).at_least(0).doc("skip a vocabulary block whose softmax entries are all below this at the working precision (CCE's bf16 default 2^-12; 0: no filtering, cce_exact)"));
    params.push_back(param::integer("block", 256).at_least(1).doc("vocabulary block of the filter"));
  }
  auto v = variant(std::move(name), std::move(description), plain_ce, std::move(params));
  v.backward = [how](const KernelInputs& in, const Precision& p, const ParamMap& prm, const torch::Tensor& dy,
                     const std::vector<std::string>& wrt) { return ce_backward(how, in, p, prm, dy, wrt); };
  return v;
}

std::vector<Variant> ce_backward_variants() {
  std::vector<Variant> v;
  v.push_back(ce_with_backward("ce_bwd_one_store",
                               "fused cross-entropy backward writing dlogits into the logits' storage: softmax and "
                               "(p - onehot)·dy in fp32, one W store (BP10; Liger CE before #1268)",
                               CeBackward::one_store));
  v.push_back(ce_with_backward("ce_bwd_from_online_lse",
                               "cross-entropy backward from the saved log-sum-exp of the online chunked forward: "
                               "(exp(z - lse) - onehot)·dy in fp32, one rounding (BP14; marin#8241, Liger FLCE)",
                               CeBackward::from_online_lse));
  v.push_back(ce_with_backward("ce_bwd_target_rmw_w",
                               "Liger #1268: p·dy stored in W on every lane, then the target lane loaded, dy "
                               "subtracted and stored again; (p_t - 1)·dy cancels after a W rounding (BN16; "
                               "Liger-Kernel#1329)",
                               CeBackward::target_rmw_w));
  v.push_back(ce_with_backward("ce_bwd_w_intermediate",
                               "TransformerEngine fused CE before #3193: the softmax written to the bf16 input buffer, "
                               "(p - onehot)·dy formed from it and rounded again (BN17; TE#2325, Megatron-LM#7339)",
                               CeBackward::w_intermediate));
  v.push_back(ce_with_backward("cce_bwd_filtered",
                               "cut cross-entropy backward with gradient filtering: vocabulary blocks whose softmax "
                               "entries are all below filter_eps skipped (BN22; filter_eps 0 is cce_exact, BP7; "
                               "apple/ml-cross-entropy#14, #18)",
                               CeBackward::filtered));
  v.push_back(ce_with_backward("ce_bwd_scalar_grad_output",
                               "Liger FLCE with reduction='none': grad_output loaded as a scalar, every token scaled "
                               "by the first token's dy (BN19; Liger-Kernel#968, #1298)",
                               CeBackward::scalar_grad_output));
  return v;
}

// Final-logit soft-capping (Gemma 2: 30): z' = c·tanh(z/c) in fp32, then lse(z') − z'_t.
// `padded_lanes`: the kernel's vocabulary rounded up to whole blocks of `block` lanes, the
// padding loaded as −inf and soft-capped to the finite −c, so each padded lane adds e^(−c) to
// the sum (unsloth#10616). Backwards by autograd.
torch::Tensor softcapped_ce(const KernelInputs& in, const Precision& p, const ParamMap& prm, bool padded_lanes) {
  const double c = prm.number("softcap");
  const auto z = p.up(in.at("z"));
  const auto zc = c * torch::tanh(z / c);
  auto lse = torch::logsumexp(zc, -1);
  if (padded_lanes) {
    const auto vocab = z.size(-1), block = prm.integer("block");
    const auto pad = (vocab + block - 1) / block * block - vocab;
    if (pad > 0) lse = torch::logaddexp(lse, torch::full_like(lse, std::log(static_cast<double>(pad)) - c));
  }
  const auto zt = zc.gather(-1, in.at("t").unsqueeze(-1)).squeeze(-1);
  return fp32_out(p, masked(lse - zt, in));
}

std::vector<Variant> loss_variants() {
  std::vector<Variant> v;
  v.push_back(variant(
      "token_ce_fp32",
      "PyTorch's F.cross_entropy on upcast logits, reduction='none' (ATen cross_entropy_loss: log_softmax "
      "in fp32, then nll_loss at the target; label_smoothing as PyTorch defines it), fp32 out; with z_loss, "
      "+ coef·logsumexp(up(z))² in fp32 (OLMo's torch z-loss)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        auto loss = aten_cross_entropy(in, p, prm.number("label_smoothing"));
        if (prm.number("z_loss") > 0.0) {
          // OLMo's cross_entropy_loss: z_squared = logits.logsumexp(-1).pow(2); z_loss = coef·z_squared.
          const auto z_squared = torch::logsumexp(p.up(in.at("z")), -1).pow(2);
          loss = masked(loss + prm.number("z_loss") * z_squared, in);
        }
        return fp32_out(p, loss);
      },
      kCeParams));
  v.push_back(variant(
      "token_ce_lse_minus_target_fp32",
      "logsumexp(up(z)) - up(z)[t] in fp32, fp32 out (the fused cross-entropy kernels' form: Liger, "
      "flash-attn); with label smoothing lse - e·Σz/V - (1 - e)·z_t (flash-attn's order), with z_loss "
      "+ coef·lse·lse (Liger's lse_square_scale); kcert's token_ce_fp32 before issue 30",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto [lse, zt] = lse_and_target(in, p);
        const auto e = prm.number("label_smoothing");
        const auto z_sum = e == 0.0 ? lse : p.up(in.at("z")).sum(-1);
        return fp32_out(p, masked(with_z_loss(lse_form(lse, zt, z_sum, in.at("z").size(-1), e), lse,
                                              prm.number("z_loss")),
                                  in));
      },
      kCeParams));
  v.push_back(variant(
      "token_ce_online_lse_fp32",
      "online log-sum-exp over vocabulary chunks in fp32: running max m and sum d, d·exp(m - m_new) + "
      "Σ exp(z - m_new) per chunk, lse = m + log d (Liger's fused (linear) cross-entropy, flash-attn's "
      "Triton cross-entropy), then the lse form with label smoothing and z-loss as token_ce_lse_minus_target_fp32",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto z = p.up(in.at("z"));
        const auto zt = z.gather(-1, in.at("t").unsqueeze(-1)).squeeze(-1);
        const auto [lse, z_sum] = online_lse(z, prm.integer("chunk"));
        return fp32_out(p, masked(with_z_loss(lse_form(lse, zt, z_sum, z.size(-1), prm.number("label_smoothing")),
                                              lse, prm.number("z_loss")),
                                  in));
      },
      kOnlineParams));
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
  for (auto& b : ce_backward_variants()) v.push_back(std::move(b));
  const ParamSpec softcap = param::number("softcap", 30.0).at_least(1e-3).doc("final-logit soft-cap c (Gemma 2: 30)");
  v.push_back(variant("token_ce_softcap_fp32",
                      "final-logit soft-cap c·tanh(z/c) in fp32, then logsumexp - z'_t in fp32 (Gemma 2's "
                      "final_logit_softcapping before the loss)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return softcapped_ce(in, p, prm, false); },
                      {softcap}));
  v.push_back(variant("ce_softcap_padded_lanes",
                      "fused soft-capped CE whose padded vocabulary lanes are loaded as -inf and soft-capped to -c, "
                      "adding e^(-c) per padded lane to the sum, forward and backward (BN20: unsloth#10616)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return softcapped_ce(in, p, prm, true); },
                      {softcap, param::integer("block", 4096).at_least(1).doc("vocabulary lanes per block (Triton BLOCK_SIZE)")}));
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
  auto z = shifted_gaussian(probe, n, vocab, stream);
  const auto t = stream.integers(vocab, {n});
  if (const double margin = probe.params.number("targets.margin"); margin != 0.0) {
    // The target logit raised by the margin, rounded back to W (confident rows).
    const auto zt = z.gather(-1, t.unsqueeze(-1)).to(torch::kFloat64) + margin;
    z = z.scatter(-1, t.unsqueeze(-1), zt.to(z.scalar_type()));
  }
  in.set("z", z);
  in.set("t", t);
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
      param::number("targets.margin", 0.0).at_least(0).at_most(1000).doc("added to each target logit (rounded to W): confident rows, p_t near 1 (0: none)"),
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
  // The forward's per-token buckets, spread over each row's vocabulary.
  const auto token_ids = f.bucket_ids;
  f.gradients.push_back(input_gradient(
      {"dlogits", "z", {"position", "microbatch"}, "",
       "gradient of the logits [tokens, vocab]: one bucket per token (or micro-batch), pooling its vocabulary"},
      [token_ids](const std::string& axis, const ProbeContract& probe, at::IntArrayRef shape) {
        return token_ids(axis, probe, shape.slice(0, 1)).unsqueeze(1).expand({shape[0], shape[1]}).contiguous();
      }));
  for (auto& v : loss_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
