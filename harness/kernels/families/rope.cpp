// RoPE family: rotary position embedding of one projection (q or k), NeoX/HF half-split
// layout: dims (i, i + D/2) form frequency pair i, rotated by angle pos · inv_freq_i with
// inv_freq_i = base^(-2i/D). Controls R1-R4, #20-#22. Helpers shared with qkv_rope are in
// rotary.hpp.
//
// Inputs: x [B, tokens, heads, head_dim] per replicate; pos [tokens] fixed (exact integers,
// pos_t = positions.start + positions.stride · t, so long contexts are probed without
// evaluating every position). Output like x.
// Bucket axes: position_frequency (one bucket per (token, pair), pooled over heads and the
// two lanes of the pair; the default), position, head.
//
// Backward (issue 31): gradient dx (x's shape, the same buckets). RoPE is linear in x, so its
// backward is the rotation by -θ (sin negated); the explicit backwards replay that kernel
// (BP8) and a fused RoPE registered without a backward (BN26).
#include <cmath>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/kernels/rotary.hpp"

namespace kcert::kernels {

namespace {

using namespace rotary;
using numerics::Precision;

torch::Tensor neox(const KernelInputs& in, const Precision& p, const torch::Tensor& th) {
  return p.round_w(rotate_half_split(p.up(in.at("x")), torch::cos(th), torch::sin(th)));
}

// HF's apply_rotary_pos_emb: fp32 inverse frequencies, angles and tables, one rounding.
torch::Tensor neox_fp32(const KernelInputs& in, const Precision& p, const ParamMap& prm) {
  const auto& x = in.at("x");
  const auto inv = inverse_frequencies(p, x.size(-1), prm.number("base"), p.up(x));
  return neox(in, p, angles(p.up(in.at("pos")), inv));
}

std::vector<Variant> rope_variants() {
  std::vector<Variant> v;
  v.push_back(variant("neox_fp32", "HF/NeoX half-split rotation, fp32 inv_freq, angles and tables, one rounding", neox_fp32));
  v.push_back(variant(
      "gptj_pairs_fp32",
      "GPT-J/Meta adjacent-pair rotation (2i, 2i+1) applied to half-split data (R1: transformers#25199)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto th = angles(p.up(in.at("pos")), inverse_frequencies(p, u.size(-1), prm.number("base"), u));
        const auto c = torch::cos(th).unsqueeze(1), s = torch::sin(th).unsqueeze(1);
        using torch::indexing::Slice;
        const auto a = u.index({"...", Slice(0, torch::indexing::None, 2)});
        const auto b = u.index({"...", Slice(1, torch::indexing::None, 2)});
        return p.round_w(torch::stack({a * c - b * s, a * s + b * c}, -1).flatten(-2));
      }));
  v.push_back(variant(
      "neox_w_inv_freq",
      "inverse frequencies rounded to W before the angle (R2a: transformers#29496, a model-wide .to(bf16))",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto inv = p.up(p.round_w(inverse_frequencies(p, x.size(-1), prm.number("base"), p.up(x))));
        return neox(in, p, angles(p.up(in.at("pos")), inv));
      }));
  v.push_back(variant(
      "neox_w_positions",
      "positions rounded to W before the angle (R2b: transformers#25681; bf16 has no integers above 256)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto inv = inverse_frequencies(p, x.size(-1), prm.number("base"), p.up(x));
        return neox(in, p, angles(p.up(p.round_w(p.up(in.at("pos")))), inv));
      }));
  v.push_back(variant(
      "neox_w_tables",
      "exact fp32 angles, but cos/sin tables rounded to W and the rotation done with W "
      "multiplies and adds, each rounding (R3: flash-attention#823, modded-nanogpt#39)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto th = angles(p.up(in.at("pos")), inverse_frequencies(p, u.size(-1), prm.number("base"), u));
        const auto c = p.up(p.round_w(torch::cos(th))).unsqueeze(1), s = p.up(p.round_w(torch::sin(th))).unsqueeze(1);
        const auto half = u.size(-1) / 2;
        const auto a = u.narrow(-1, 0, half), b = u.narrow(-1, half, half);
        const auto w = [&p](const torch::Tensor& t) { return p.up(p.round_w(t)); };  // one W operation
        return p.round_w(torch::cat({w(a * c) - w(b * s), w(b * c) + w(a * s)}, -1));
      }));
  v.push_back(variant(
      "neox_inv_freq_exp_log",
      "inverse frequencies as exp(-(2i/D)·ln base) instead of 1/base^(2i/D): an fp32 ULP apart (R4, litgpt#1031)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto i = torch::arange(0, x.size(-1), 2, p.up(x).options());
        const auto inv = torch::exp(-(i / static_cast<double>(x.size(-1))) * std::log(prm.number("base")));
        return neox(in, p, angles(p.up(in.at("pos")), inv));
      }));
  v.push_back(variant(
      "complex_interleaved_fp32",
      "Meta-Llama structure: permute to interleaved pairs, multiply by the complex table cos + i sin "
      "(complex64; complex128 under fp64), permute back, one rounding (#20)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto half = u.size(-1) / 2;
        const auto th = angles(p.up(in.at("pos")), inverse_frequencies(p, u.size(-1), prm.number("base"), u));
        // (a_i, b_i) = (u_i, u_{i+D/2}) become the real and imaginary parts of pair i.
        const auto pairs = torch::stack({u.narrow(-1, 0, half), u.narrow(-1, half, half)}, -1).contiguous();
        const auto z = torch::view_as_complex(pairs) * torch::polar(torch::ones_like(th), th).unsqueeze(1);
        const auto r = torch::view_as_real(z);
        return p.round_w(torch::cat({r.select(-1, 0), r.select(-1, 1)}, -1));
      }));
  v.push_back(variant(
      "table_sliced_fp32",
      "cos/sin tables built once for max_position with the same fp32 expression, rows gathered by position (#21)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto pos = p.up(in.at("pos"));
        const auto max_pos = static_cast<int64_t>(pos.max().item<double>()) + 1;
        const auto inv = inverse_frequencies(p, x.size(-1), prm.number("base"), p.up(x));
        const auto table = angles(torch::arange(max_pos, pos.options()), inv);
        const auto rows = pos.to(torch::kLong);
        return p.round_w(rotate_half_split(p.up(x), torch::cos(table).index_select(0, rows),
                                           torch::sin(table).index_select(0, rows)));
      }));
  v.push_back(variant(
      "gptj_kernel_fp32_cache",
      "vLLM's rotary kernel structure (pos_encoding_kernels.cu, IS_NEOX=false): data permuted to "
      "interleaved pairs, fp32 cos/sin read from a (max_position, head_dim) cache built with einsum, "
      "x' = x·c - y·s, y' = y·c + x·s in fp32, one rounding, permuted back (#22)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto u = p.up(in.at("x"));
        const auto half = u.size(-1) / 2;
        const auto pos = p.up(in.at("pos"));
        const auto max_pos = static_cast<int64_t>(pos.max().item<double>()) + 1;
        const auto inv = inverse_frequencies(p, u.size(-1), prm.number("base"), u);
        const auto freqs = torch::einsum("i,j->ij", {torch::arange(max_pos, pos.options()), inv});
        const auto cache = torch::cat({torch::cos(freqs), torch::sin(freqs)}, -1);  // [max_pos, D]
        const auto rows = cache.index_select(0, pos.to(torch::kLong));
        const auto c = rows.narrow(-1, 0, half).unsqueeze(1), s = rows.narrow(-1, half, half).unsqueeze(1);
        // Interleave (u_i, u_{i+D/2}) into positions (2i, 2i+1), as the GPT-J layout stores them.
        const auto il = torch::stack({u.narrow(-1, 0, half), u.narrow(-1, half, half)}, -1).flatten(-2);
        using torch::indexing::Slice;
        const auto x = il.index({"...", Slice(0, torch::indexing::None, 2)});
        const auto y = il.index({"...", Slice(1, torch::indexing::None, 2)});
        const auto out_il = torch::stack({x * c - y * s, y * c + x * s}, -1).flatten(-2);
        // Back to half-split: even lanes are the first half, odd lanes the second.
        const auto out = torch::cat({out_il.index({"...", Slice(0, torch::indexing::None, 2)}),
                                     out_il.index({"...", Slice(1, torch::indexing::None, 2)})},
                                    -1);
        return p.round_w(out);
      }));
  // Explicit backwards, on neox_fp32's forward.
  {
    auto b = variant("neox_bwd_inverse_rotation",
                     "fused RoPE whose backward is the forward rotation with sin negated, fp32 tables, dy rotated "
                     "in fp32 and rounded once (BP8; candle#3612 fix, LoongForge#106, tt-mlir#9363)",
                     neox_fp32);
    b.backward = [](const KernelInputs& in, const Precision& p, const ParamMap& prm, const torch::Tensor& dy,
                    const std::vector<std::string>& wrt) {
      Gradients out;
      for (const auto& name : wrt) {
        if (name != "x") continue;
        const auto d = p.up(dy);
        const auto th = angles(p.up(in.at("pos")), inverse_frequencies(p, d.size(-1), prm.number("base"), d));
        out["x"] = p.round_w(rotate_half_split(d, torch::cos(th), -torch::sin(th)));
      }
      return out;
    };
    v.push_back(std::move(b));
  }
  {
    auto b = variant("neox_no_backward",
                     "fused RoPE called outside autograd (a raw kernel with no backward registered): no gradient "
                     "reaches x (BN26; candle#3612, LoongForge#106)",
                     neox_fp32);
    b.backward = [](const KernelInputs&, const Precision&, const ParamMap&, const torch::Tensor&,
                    const std::vector<std::string>&) { return Gradients{}; };
    v.push_back(std::move(b));
  }
  return v;
}

KernelInputs make_replicate(const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
  InputStream stream(seed);
  const auto tokens = probe.params.integer("shape.tokens"), heads = probe.params.integer("shape.heads"),
             dim = probe.params.integer("shape.head_dim");
  KernelInputs in;
  in.set("x", shifted_gaussian(probe, tokens * heads, dim, stream).view({tokens, heads, dim}));
  return in;
}

}  // namespace

void register_rope_family(Registry& registry) {
  Family f;
  f.name = "rope";
  f.description = "rotary position embedding, half-split layout: x [tokens, heads, head_dim], positions [tokens]";
  f.bucket_axes = {"position_frequency", "position", "head"};
  f.probe_params = {
      param::integer("shape.tokens", 256).at_least(1).doc("positions per replicate"),
      param::integer("shape.heads", 4).at_least(1).doc("heads"),
      param::integer("shape.head_dim", 64).at_least(4).doc("head dimension (even)"),
  };
  f.probe_params.insert(f.probe_params.end(), kPositionParams.begin(), kPositionParams.end());
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    if (auto e = check_rotary(probe)) return e;
    const auto dim = probe.params.integer("shape.head_dim");
    if (probe.outlier_count > dim) {
      return FieldError{"probe.outliers.count", "expected at most probe.shape.head_dim = " + std::to_string(dim)};
    }
    return std::nullopt;
  };
  f.make_fixed = [](const ProbeContract& probe, std::uint64_t) { return position_inputs(probe); };
  f.make_replicate = make_replicate;
  f.bucket_ids = bucket_ids;
  f.gradients.push_back(input_gradient({"dx", "x", {"position_frequency", "position", "head"}, "",
                                        "gradient of the input [tokens, heads, head_dim], per (position, frequency pair)"},
                                       bucket_ids));
  for (auto& v : rope_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}
}  // namespace kcert::kernels
