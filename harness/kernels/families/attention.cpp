// Attention family: softmax(q k^T · scale + mask) v per head, with the cast points, masks,
// scales, head mappings and softmax structures the controls replay (A1, A3-A8, #1, #3,
// #5, #24-#27).
//
// Inputs: q [B, heads, tokens, head_dim], k and v [B, kv_heads, kv_tokens, head_dim] per
// replicate (the probe's shifted Gaussian, q and k multiplied by logits.qk_scale so the
// logit spread can be stressed). Output [B, heads, tokens, head_dim].
// Masks: causal with bottom-right alignment (query i sees key j iff j <= i + kv_tokens -
// tokens), optional sliding window; they are variant parameters, so a mask defect is the
// same variant with one parameter changed. Bucket axes: head (default), position,
// head_position.
//
// Backward (issue 31): gradients dq (q's shape), dk and dv (k's and v's: per kv head and key
// position, each a sum over the queries that attend it), all with the same bucket axes.
// Autograd of each forward, except FlashAttention-2's backward replayed (flash_bwd_*: P
// recomputed in fp32, dS = P∘(dP − rowsum(dO∘O)) rounded to W for the dQ/dK GEMMs, dQ
// accumulated over key tiles in fp32; BP1, BP9, BN11).
#include <algorithm>
#include <cmath>
#include <limits>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

const std::vector<ParamSpec> kAttentionParams = {
    param::flag("causal", true).doc("causal mask (bottom-right aligned)"),
    param::integer("window", 0).at_least(0).doc("sliding window W: key j visible from query i iff 0 <= i - j < W (0: no window)"),
    param::flag("window_inclusive", false).doc("admit W + 1 keys (0 <= i - j <= W): the A5 off-by-one"),
    param::number("softcap", 0.0).at_least(0).doc("logit soft-cap c·tanh(s/c), 0: none (Gemma 2: 50)"),
    param::number("scale", 0.0).at_least(0).doc("logit scale, 0: 1/sqrt(head_dim)"),
    param::text("kv_map", "interleave").one_of({"interleave", "tile"}).doc("GQA: query head h uses kv head h / G (repeat_interleave) or h mod kv_heads (tile, A7)"),
    param::flag("alibi", false).doc("add ALiBi 2^(-8(h+1)/H) · key index to the logits (fp32)"),
    param::integer("tile", 64).at_least(1).doc("key tile of the online-softmax variants"),
};

struct Setup {
  int64_t heads, kv_heads, tokens, kv_tokens, dim;
  double scale;
};

Setup setup(const KernelInputs& in, const ParamMap& prm) {
  const auto& q = in.at("q");
  const auto& k = in.at("k");
  Setup s{q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), prm.number("scale")};
  if (s.scale == 0.0) s.scale = 1.0 / std::sqrt(static_cast<double>(s.dim));
  return s;
}

// k or v expanded to the query heads.
torch::Tensor expand_kv(const torch::Tensor& t, int64_t heads, const ParamMap& prm) {
  const auto groups = heads / t.size(1);
  if (groups == 1) return t;
  return prm.string("kv_map") == "tile" ? t.repeat({1, groups, 1, 1}) : t.repeat_interleave(groups, 1);
}

// True where query i may attend key j: [tokens, kv_tokens].
torch::Tensor allowed(const Setup& s, const ParamMap& prm, const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const auto i = torch::arange(s.tokens, opts).unsqueeze(1) + (s.kv_tokens - s.tokens);
  const auto j = torch::arange(s.kv_tokens, opts).unsqueeze(0);
  auto ok = torch::ones({s.tokens, s.kv_tokens}, opts.dtype(torch::kBool));
  if (prm.boolean("causal")) ok = ok & (j <= i);
  if (const auto w = prm.integer("window"); w > 0) {
    ok = ok & (prm.boolean("window_inclusive") ? (i - j <= w) : (i - j < w));
  }
  return ok;
}

// Whether a case has additive logit terms at all (most do not: skip a pass over the logits).
bool has_additive(const KernelInputs& in, const ParamMap& prm) {
  return prm.boolean("alibi") || in.at("row_bias").item<double>() != 0.0;
}

// Additive terms in the accumulation dtype: ALiBi and the probe's per-row bias.
torch::Tensor additive(const KernelInputs& in, const Setup& s, const ParamMap& prm, const torch::TensorOptions& opts) {
  auto add = torch::zeros({1, s.heads, 1, s.kv_tokens}, opts);
  if (prm.boolean("alibi")) {
    const auto h = torch::arange(1, s.heads + 1, opts);
    const auto slopes = torch::pow(2.0, -8.0 * h / static_cast<double>(s.heads));
    add = add + (slopes.view({s.heads, 1}) * torch::arange(s.kv_tokens, opts).view({1, s.kv_tokens})).view({1, s.heads, 1, s.kv_tokens});
  }
  return add + in.at("row_bias").to(opts.dtype());
}

torch::Tensor capped(const torch::Tensor& s, double cap) { return cap > 0.0 ? cap * torch::tanh(s / cap) : s; }

// Masked positions: -inf under fp64, finfo(W).min in W (what HF's additive mask uses).
torch::Tensor apply_mask(const torch::Tensor& s, const torch::Tensor& ok, const Precision& p, bool additive_min) {
  if (additive_min && !p.is_exact()) {
    const double lowest = -stats::max_finite(p.format());
    return torch::where(ok, s, torch::full_like(s, lowest));
  }
  return s.masked_fill(ok.logical_not(), -std::numeric_limits<double>::infinity());
}

// fp32 logits, fp32 softmax, one rounding of the output (the A1 reference; #5's reference).
torch::Tensor fp32_dense(const KernelInputs& in, const Precision& p, const ParamMap& prm, bool scale_q_first) {
  const auto s = setup(in, prm);
  const auto q = p.up(in.at("q"));
  const auto k = expand_kv(p.up(in.at("k")), s.heads, prm), v = expand_kv(p.up(in.at("v")), s.heads, prm);
  auto logits = scale_q_first ? torch::matmul(q * s.scale, k.transpose(-1, -2)) : torch::matmul(q, k.transpose(-1, -2)) * s.scale;
  logits = capped(logits, prm.number("softcap"));
  if (has_additive(in, prm)) logits = logits + additive(in, s, prm, logits.options());
  logits = apply_mask(logits, allowed(s, prm, q.device()), p, false);
  return p.round_w(torch::matmul(torch::softmax(logits, -1), v));
}

// HF eager (LlamaAttention): every GEMM fp32-accumulated and rounded, logits rounded after
// the scale, the additive finfo.min mask added in W, softmax in fp32 rounded to W, PV rounded.
torch::Tensor eager(const KernelInputs& in, const Precision& p, const ParamMap& prm, bool fold_heads, bool grouped) {
  const auto s = setup(in, prm);
  const auto& q = in.at("q");
  torch::Tensor logits;
  torch::Tensor v;
  if (grouped && prm.string("kv_map") == "interleave") {
    // #27: q reshaped to (B, kv_heads, G·tokens, D), one GEMM per kv head, no repeat_kv.
    const auto g = s.heads / s.kv_heads, b = q.size(0);
    const auto qg = p.up(q).reshape({b, s.kv_heads, g * s.tokens, s.dim});
    const auto raw = torch::matmul(qg, p.up(in.at("k")).transpose(-1, -2));  // [B, kv, G·T, Tk]
    logits = p.round_w(raw).reshape({b, s.heads, s.tokens, s.kv_tokens});
    v = in.at("v");
  } else {
    const auto k = expand_kv(in.at("k"), s.heads, prm);
    if (fold_heads) {  // #26: heads folded into the batch for one bmm
      const auto b = q.size(0);
      logits = p.round_w(torch::bmm(p.up(q).reshape({b * s.heads, s.tokens, s.dim}),
                                    p.up(k).reshape({b * s.heads, s.kv_tokens, s.dim}).transpose(1, 2)))
                   .reshape({b, s.heads, s.tokens, s.kv_tokens});
    } else {
      logits = p.round_w(torch::matmul(p.up(q), p.up(k).transpose(-1, -2)));
    }
    v = expand_kv(in.at("v"), s.heads, prm);
  }
  auto sc = p.round_w(p.up(logits) * s.scale);
  if (prm.number("softcap") > 0.0) sc = p.round_w(capped(p.up(sc), prm.number("softcap")));
  if (has_additive(in, prm)) sc = p.round_w(p.up(sc) + additive(in, s, prm, p.up(sc).options()));
  sc = p.round_w(apply_mask(p.up(sc), allowed(s, prm, q.device()), p, true));
  const auto probs = p.round_w(torch::softmax(p.up(sc), -1));
  if (grouped && prm.string("kv_map") == "interleave") {
    const auto g = s.heads / s.kv_heads, b = q.size(0);
    const auto pg = p.up(probs).reshape({b, s.kv_heads, g * s.tokens, s.kv_tokens});
    return p.round_w(torch::matmul(pg, p.up(v))).reshape({b, s.heads, s.tokens, s.dim});
  }
  return p.round_w(torch::matmul(p.up(probs), p.up(v)));
}

// A1: logits materialized in W and a W softmax (every step rounded).
torch::Tensor w_logits_softmax(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto s = setup(in, prm);
  const auto k = expand_kv(in.at("k"), s.heads, prm), v = expand_kv(in.at("v"), s.heads, prm);
  const auto w = [&p](const torch::Tensor& t) { return p.up(p.round_w(t)); };
  auto sc = w(w(torch::matmul(p.up(in.at("q")), p.up(k).transpose(-1, -2))) * s.scale);
  if (has_additive(in, prm)) sc = w(sc + additive(in, s, prm, sc.options()));
  sc = apply_mask(sc, allowed(s, prm, sc.device()), p, false);
  const auto m = std::get<0>(sc.max(-1, true));
  const auto e = w(torch::exp(w(sc - m)));
  const auto probs = w(e / w(e.sum(-1, true)));
  return p.round_w(torch::matmul(probs, p.up(v)));
}

// #24 (FlashAttention-2 forward structure) and A8 (stale running max): online softmax over
// key tiles, fp32 state.
torch::Tensor online_softmax(const KernelInputs& in, const Precision& p, const ParamMap& prm, bool stale_max) {
  const auto s = setup(in, prm);
  const auto q = p.up(in.at("q"));
  const auto k = expand_kv(p.up(in.at("k")), s.heads, prm), v = expand_kv(p.up(in.at("v")), s.heads, prm);
  const auto ok = allowed(s, prm, q.device());
  const auto add = additive(in, s, prm, q.options());
  const auto tile = prm.integer("tile");
  const double inf = std::numeric_limits<double>::infinity();
  const double log2e = 1.4426950408889634;
  auto shape = q.sizes().vec();
  shape.back() = 1;
  auto m = torch::full(shape, -inf, q.options());
  auto l = torch::zeros(shape, q.options());
  auto acc = torch::zeros_like(q);
  const int64_t tiles = (s.kv_tokens + tile - 1) / tile;
  for (int64_t t = 0; t < tiles; ++t) {
    // FA2 walks tiles left to right; the sm90 kernel of A8 walks them right to left.
    const int64_t j = stale_max ? tiles - 1 - t : t;
    const int64_t start = j * tile, len = std::min(tile, s.kv_tokens - start);
    auto sb = torch::matmul(q, k.narrow(2, start, len).transpose(-1, -2)) * s.scale + add.narrow(3, start, len);
    sb = capped(sb, prm.number("softcap"));
    sb = sb.masked_fill(ok.narrow(1, start, len).logical_not(), -inf);
    auto m_new = torch::maximum(m, std::get<0>(sb.max(-1, true)));
    torch::Tensor alpha, probs;
    if (stale_max) {
      // flash-attention#2082: a fully masked first tile turns the running max into 0, kept.
      m_new = torch::where(torch::isinf(m_new), torch::zeros_like(m_new), m_new);
      alpha = torch::exp(m - m_new);
      probs = torch::exp(sb - m_new);
    } else {
      // exp2 with the scale's log2(e) folded in, alpha 0 while the max is still -inf.
      const auto safe = torch::where(torch::isinf(m_new), torch::zeros_like(m_new), m_new);
      alpha = torch::where(torch::isinf(m), torch::zeros_like(m), torch::exp2((m - safe) * log2e));
      probs = torch::exp2((sb - safe) * log2e);
    }
    l = l * alpha + probs.sum(-1, true);
    // FA2 casts P to W for its tensor-core PV GEMM; the stale-max replay keeps fp32 (the
    // catalog's replay).
    const auto pv = stale_max ? probs : p.up(p.round_w(probs));
    acc = acc * alpha + torch::matmul(pv, v.narrow(2, start, len));
    m = m_new;
  }
  // The kernels guard l = 0 (all exponentials underflowed) with the smallest normal of
  // their accumulator, so zeroed rows appear exactly when the accumulation dtype underflows.
  const double tiny = p.is_exact() ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
  return p.round_w(acc / l.clamp_min(tiny));
}

// #1 / #3: LibTorch's own SDPA on the W tensors (the math composite on a 1.13 CPU, the
// flash CPU kernel on >= 2.1); GQA by repeat_interleave as HF's repeat_kv.
// The operands of LibTorch's SDPA as a migrated model passes them: q, k, v in the working
// dtype (fp64 under the exact policy), k and v expanded to the query heads (HF's repeat_kv).
// SDPA has no window, softcap, ALiBi or Sq != Sk: such a case is refused, naming the variant.
struct SdpaOperands {
  Setup s;
  torch::Tensor q, k, v;
};
SdpaOperands sdpa_operands(const KernelInputs& in, const Precision& p, const ParamMap& prm, const std::string& variant) {
  const auto s = setup(in, prm);
  if (prm.integer("window") > 0 || prm.number("softcap") > 0.0 || prm.boolean("alibi") || s.tokens != s.kv_tokens) {
    throw std::invalid_argument(variant + ": only plain causal or unmasked attention (no window, softcap, alibi, Sq != Sk)");
  }
  const auto dt = p.is_exact() ? torch::kFloat64 : p.working_dtype();
  return {s, in.at("q").to(dt), expand_kv(in.at("k").to(dt), s.heads, prm), expand_kv(in.at("v").to(dt), s.heads, prm)};
}

torch::Tensor sdpa_aten(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto [s, q, k, v] = sdpa_operands(in, p, prm, "sdpa_aten");
  if (std::abs(s.scale - 1.0 / std::sqrt(static_cast<double>(s.dim))) > 1e-15) {
    throw std::invalid_argument("sdpa_aten: LibTorch 1.13's SDPA has no scale argument; leave scale at 0");
  }
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
  auto out = at::scaled_dot_product_attention(q, k, v, {}, 0.0, prm.boolean("causal"));
#else
  auto out = std::get<0>(at::_scaled_dot_product_attention(q, k, v, {}, 0.0, false, prm.boolean("causal")));
#endif
  return p.round_w(out);
}

// LibTorch 2.x: SDPA with its scale argument, required to dispatch to the flash CPU kernel
// (at::_scaled_dot_product_flash_attention_for_cpu: key blocks, fp32 running max and sum,
// bf16 P V). Which backend the public function will take is asked of the same selector it
// uses, at::_fused_sdp_choice, with the same arguments; anything but flash under the working
// precision is an error, so a PASS of this variant is a PASS of the flash kernel. Under the
// fp64 policy (the algebra run) the selector may pick either; the function is the same.
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
constexpr const char* kSdpaFlashUnavailable = "";
// at::sdp::SDPBackend (ATen/native/transformers/sdp_utils_cpp.h): error -1, math 0, flash 1,
// efficient 2, cudnn 3, overrideable 4.
constexpr int64_t kFlashBackend = 1;
torch::Tensor sdpa_flash(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto [s, q, k, v] = sdpa_operands(in, p, prm, "sdpa_flash_cpu");
  const bool causal = prm.boolean("causal");
  const auto backend = at::_fused_sdp_choice(q, k, v, {}, 0.0, causal, s.scale);
  if (!p.is_exact() && backend != kFlashBackend) {
    throw std::runtime_error("sdpa_flash_cpu: scaled_dot_product_attention would not take the flash kernel here (backend " +
                             std::to_string(backend) + ", dtype " + std::string(c10::toString(q.scalar_type())) +
                             ", device " + q.device().str() + "); this variant exists to certify that kernel");
  }
  return p.round_w(at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal, s.scale));
}
#else
constexpr const char* kSdpaFlashUnavailable =
    "needs LibTorch >= 2.1 (scaled_dot_product_attention's flash CPU kernel); this build has LibTorch " TORCH_VERSION;
torch::Tensor sdpa_flash(const KernelInputs&, const Precision&, const ParamMap&) {
  throw std::logic_error(kSdpaFlashUnavailable);
}
#endif

// ---- FlashAttention-2's backward, replayed ---------------------------------------------
//
// With S = q kᵀ·scale + additive, L = cap(S) masked, P = softmax(L), O the forward's output:
//   dV = Pᵀ dO,  dP = dO Vᵀ,  dL = P∘(dP − rowsum(dO∘O)),  dS = dL∘cap'(S),
//   dQ = dS K·scale,  dK = dSᵀ Q·scale  (summed over a kv head's query heads under GQA).
// FA2 recomputes P in fp32 from the saved log-sum-exp, feeds P and dS to its GEMMs in W, and
// accumulates dQ over key tiles in fp32 (atomicAdd: the order varies; deterministic=True fixes
// it). The forward is online_softmax_fp32's (#24).

struct FlashBackward {
  bool reversed_dq_order = false;  // dQ's key tiles added last to first (another atomicAdd order, BP1)
  enum class Softcap { pre_cap, from_capped, ignored } softcap = Softcap::pre_cap;
  // pre_cap: cap' = 1 − tanh(S/c)² from the scores before the cap; from_capped: 1 − (L/c)²
  // from the capped scores (BP9); ignored: no cap' at all (the unguarded varlen path, BN11).
};

// A gradient of the query-head expansion folded back onto the kv heads (expand_kv's VJP).
torch::Tensor fold_kv(const torch::Tensor& g, int64_t kv_heads, const ParamMap& prm) {
  const auto heads = g.size(1);
  const auto groups = heads / kv_heads;
  if (groups == 1) return g;
  auto sizes = g.sizes().vec();
  if (prm.string("kv_map") == "tile") {
    sizes[1] = kv_heads;
    sizes.insert(sizes.begin() + 1, groups);
    return g.reshape(sizes).sum(1);
  }
  sizes[1] = groups;
  sizes.insert(sizes.begin() + 1, kv_heads);
  return g.reshape(sizes).sum(2);
}

Gradients flash_backward(const FlashBackward& how, const KernelInputs& in, const Precision& p, const ParamMap& prm,
                         const torch::Tensor& dy, const std::vector<std::string>& wrt) {
  const auto s = setup(in, prm);
  const auto q = p.up(in.at("q"));
  const auto k = expand_kv(p.up(in.at("k")), s.heads, prm), v = expand_kv(p.up(in.at("v")), s.heads, prm);
  const double cap = prm.number("softcap");
  const auto raw = torch::matmul(q, k.transpose(-1, -2)) * s.scale + additive(in, s, prm, q.options());
  const auto logits = capped(raw, cap);
  const auto probs = torch::softmax(apply_mask(logits, allowed(s, prm, q.device()), p, false), -1);
  const auto d_out = p.up(dy);
  const auto out = p.up(online_softmax(in, p, prm, false));  // the O the forward saved
  Gradients grads;
  const auto wants = [&wrt](const char* name) { return std::find(wrt.begin(), wrt.end(), name) != wrt.end(); };
  if (wants("v")) {
    const auto p_w = p.up(p.round_w(probs));
    grads["v"] = p.round_w(fold_kv(torch::matmul(p_w.transpose(-1, -2), d_out), s.kv_heads, prm));
  }
  if (!wants("q") && !wants("k")) return grads;
  const auto dp = torch::matmul(d_out, v.transpose(-1, -2));
  const auto rowsum = (d_out * out).sum(-1, true);
  auto ds = probs * (dp - rowsum);
  if (cap > 0.0 && how.softcap != FlashBackward::Softcap::ignored) {
    const auto t = how.softcap == FlashBackward::Softcap::from_capped ? logits / cap : torch::tanh(raw / cap);
    ds = ds * (1.0 - t * t);
  }
  const auto ds_w = p.up(p.round_w(ds));
  if (wants("q")) {
    const auto tile = std::max<int64_t>(1, prm.integer("tile"));
    const int64_t tiles = (s.kv_tokens + tile - 1) / tile;
    auto dq = torch::zeros_like(q);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t j = how.reversed_dq_order ? tiles - 1 - t : t;
      const int64_t start = j * tile, len = std::min(tile, s.kv_tokens - start);
      dq = dq + torch::matmul(ds_w.narrow(3, start, len), k.narrow(2, start, len)) * s.scale;
    }
    grads["q"] = p.round_w(dq);
  }
  if (wants("k")) grads["k"] = p.round_w(fold_kv(torch::matmul(ds_w.transpose(-1, -2), q) * s.scale, s.kv_heads, prm));
  return grads;
}

// BN12: FA4's create_softcap_scoremod computed scores·tanh(scores) instead of
// softcap·tanh(scores/softcap); otherwise fp32_dense. Its backward is autograd's.
torch::Tensor softcap_scores_tanh(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto s = setup(in, prm);
  const auto q = p.up(in.at("q"));
  const auto k = expand_kv(p.up(in.at("k")), s.heads, prm), v = expand_kv(p.up(in.at("v")), s.heads, prm);
  auto logits = torch::matmul(q, k.transpose(-1, -2)) * s.scale;
  if (prm.number("softcap") > 0.0) logits = logits * torch::tanh(logits);
  if (has_additive(in, prm)) logits = logits + additive(in, s, prm, logits.options());
  logits = apply_mask(logits, allowed(s, prm, q.device()), p, false);
  return p.round_w(torch::matmul(torch::softmax(logits, -1), v));
}

std::vector<Variant> attention_variants() {
  const auto v = [](std::string name, std::string description, KernelFn fn) {
    return builtin_variant(std::move(name), std::move(description), kAttentionParams, std::move(fn));
  };
  std::vector<Variant> out;
  out.push_back(v("eager_hf",
                  "HF eager attention cast points: rb(q k^T), rb(· scale), additive finfo.min mask in W, "
                  "rb(softmax in fp32), rb(p v)",
                  [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return eager(in, p, prm, false, false); }));
  out.push_back(v("eager_heads_folded", "eager cast points with the heads folded into the batch for one bmm (#26)",
                  [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return eager(in, p, prm, true, false); }));
  out.push_back(v("eager_gqa_grouped",
                  "eager cast points, GQA without repeat_kv: q reshaped per kv head, one GEMM per kv head (#27)",
                  [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return eager(in, p, prm, false, true); }));
  out.push_back(v("fp32_dense", "fp32 logits (scale after the GEMM), optional softcap and ALiBi in fp32, fp32 softmax, one rounding",
                  [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return fp32_dense(in, p, prm, false); }));
  out.push_back(v("fp32_scale_q_first", "as fp32_dense with q multiplied by the scale in fp32 before the GEMM (#25)",
                  [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return fp32_dense(in, p, prm, true); }));
  out.push_back(v("w_logits_softmax", "logits materialized in W and a W softmax, every step rounded (A1: maxtext#1225)",
                  w_logits_softmax));
  out.push_back(v("online_softmax_fp32",
                  "FlashAttention-2 forward structure: key tiles, fp32 running max/sum/accumulator, exp2 with log2(e) "
                  "folded, P rounded to W for the PV GEMM (#24)",
                  [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return online_softmax(in, p, prm, false); }));
  out.push_back(v("online_softmax_stale_max",
                  "online softmax over key tiles right to left whose running max becomes 0 after a fully masked "
                  "tile and is kept (A8: flash-attention#2082)",
                  [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return online_softmax(in, p, prm, true); }));
  out.push_back(v("sdpa_aten", "LibTorch's scaled_dot_product_attention on the W tensors (#1, #3)", sdpa_aten));
  out.push_back(v("sdpa_flash_cpu",
                  "LibTorch >= 2.1: scaled_dot_product_attention with an explicit scale, checked to dispatch to the "
                  "flash CPU kernel (at::_fused_sdp_choice) under the working precision",
                  sdpa_flash));
  out.back().unavailable = kSdpaFlashUnavailable;
  out.push_back(v("fp32_dense_softcap_scores_tanh",
                  "as fp32_dense with the soft-cap written scores·tanh(scores) instead of c·tanh(scores/c), "
                  "forward and (autograd) backward (BN12: flash-attention#2402, unsloth-zoo#593)",
                  softcap_scores_tanh));
  const auto flash = [&v](std::string name, std::string description, FlashBackward how) {
    auto b = v(std::move(name), std::move(description),
               [](const KernelInputs& in, const Precision& p, const ParamMap& prm) { return online_softmax(in, p, prm, false); });
    b.backward = [how](const KernelInputs& in, const Precision& p, const ParamMap& prm, const torch::Tensor& dy,
                       const std::vector<std::string>& wrt) { return flash_backward(how, in, p, prm, dy, wrt); };
    return b;
  };
  out.push_back(flash("flash_bwd_fp32",
                      "FlashAttention-2 forward (#24) and backward: P recomputed in fp32, P and dS rounded to W for "
                      "the GEMMs, dQ accumulated over key tiles in fp32 in tile order (deterministic=True)",
                      {}));
  out.push_back(flash("flash_bwd_fp32_atomic_order",
                      "as flash_bwd_fp32 with dQ's key tiles accumulated last to first: another order of FA2's "
                      "atomicAdd (BP1: flash-attention#414, #988)",
                      {.reversed_dq_order = true}));
  out.push_back(flash("flash_bwd_softcap_recompute",
                      "as flash_bwd_fp32 with the soft-cap derivative recomputed from the capped scores, 1 - (L/c)², "
                      "instead of 1 - tanh(S/c)² (BP9: flash-attention#1033, tokamax#1121)",
                      {.softcap = FlashBackward::Softcap::from_capped}));
  out.push_back(flash("flash_bwd_softcap_unguarded",
                      "as flash_bwd_fp32 with the soft-cap derivative missing from the backward while the forward "
                      "caps (BN11: flash-attention#2544, the varlen backward without softcap support)",
                      {.softcap = FlashBackward::Softcap::ignored}));
  return out;
}

}  // namespace

void register_attention_family(Registry& registry) {
  Family f;
  f.name = "attention";
  f.description = "softmax attention: q [heads, tokens, head_dim], k and v [kv_heads, kv_tokens, head_dim]";
  f.bucket_axes = {"head", "position", "head_position"};
  f.probe_params = {
      param::integer("shape.heads", 8).at_least(1).doc("query heads"),
      param::integer("shape.kv_heads", 8).at_least(1).doc("key/value heads (divides heads)"),
      param::integer("shape.tokens", 128).at_least(1).doc("query positions"),
      param::integer("shape.kv_tokens", 0).at_least(0).doc("key positions (0: as many as queries; more: queries are the last tokens)"),
      param::integer("shape.head_dim", 64).at_least(1).doc("head dimension"),
      param::number("logits.qk_scale", 1.0).at_least(0).doc("q and k multiplied by this (logit spread grows with its square)"),
      param::number("logits.row_bias", 0.0).doc("constant added to every logit (a softmax is invariant to it; A8's stress: -150)"),
  };
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    if (auto e = check_kv_heads(probe)) return e;
    const auto kv = probe.params.integer("shape.kv_tokens");
    if (kv != 0 && kv < probe.params.integer("shape.tokens")) {
      return FieldError{"probe.shape.kv_tokens", "expected 0 or at least probe.shape.tokens"};
    }
    return check_outlier_count(probe, "shape.head_dim");
  };
  f.make_fixed = [](const ProbeContract& probe, std::uint64_t) {
    KernelInputs fixed;
    fixed.set("row_bias", torch::tensor(probe.params.number("logits.row_bias"), torch::kFloat64));
    return fixed;
  };
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    InputStream stream(seed);
    const auto h = probe.params.integer("shape.heads"), hkv = probe.params.integer("shape.kv_heads");
    const auto t = probe.params.integer("shape.tokens"), d = probe.params.integer("shape.head_dim");
    const auto tk = probe.params.integer("shape.kv_tokens") > 0 ? probe.params.integer("shape.kv_tokens") : t;
    const double qk = probe.params.number("logits.qk_scale");
    const auto dt = numerics::to_dtype(probe.dtype);
    KernelInputs in;
    // Drawn in W, then scaled in fp32 and rounded again, so the scaled values are W values.
    in.set("q", (shifted_gaussian(probe, h * t, d, stream).to(torch::kFloat32) * qk).to(dt).view({h, t, d}));
    in.set("k", (shifted_gaussian(probe, hkv * tk, d, stream).to(torch::kFloat32) * qk).to(dt).view({hkv, tk, d}));
    in.set("v", shifted_gaussian(probe, hkv * tk, d, stream).view({hkv, tk, d}));
    return in;
  };
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    const auto h = shape[0], t = shape[1], d = shape[2];
    const auto opts = torch::TensorOptions().dtype(torch::kInt64);
    const auto head = torch::arange(h, opts).view({h, 1, 1}).expand({h, t, d});
    const auto pos = torch::arange(t, opts).view({1, t, 1}).expand({h, t, d});
    if (axis == "position") return pos.contiguous();
    if (axis == "head_position") return (head * t + pos).contiguous();
    return head.contiguous();
  };
  const auto head_position_ids = f.bucket_ids;
  for (const auto& [name, input] : {std::pair{"dq", "q"}, std::pair{"dk", "k"}, std::pair{"dv", "v"}}) {
    const bool query = input[0] == 'q';
    auto g = input_gradient({name, input, {"head", "position", "head_position"}, query ? "" : "queries",
                             query ? std::string("gradient of the queries [heads, tokens, head_dim]")
                                   : std::string("gradient of ") + input +
                                         " [kv_heads, kv_tokens, head_dim]: a sum over the queries attending each key"},
                            head_position_ids);
    // dk and dv sum over the queries of their kv head's group.
    if (!query)
      g.reduction_size = [](const ProbeContract& probe) -> std::int64_t {
        return probe.params.integer("shape.tokens") * (probe.params.integer("shape.heads") / probe.params.integer("shape.kv_heads"));
      };
    f.gradients.push_back(std::move(g));
  }
  for (auto& v : attention_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
