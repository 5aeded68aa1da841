// RoPE family: rotary position embedding of one projection (q or k), NeoX/HF half-split
// layout: dims (i, i + D/2) form frequency pair i, rotated by angle pos · inv_freq_i with
// inv_freq_i = base^(-2i/D). Controls R1-R4, #20-#22; the qkv_rope family (projection then
// rotation, #23) is at the end of this file and shares the helpers.
//
// Inputs: x [B, tokens, heads, head_dim] per replicate; pos [tokens] fixed (exact integers,
// pos_t = positions.start + positions.stride · t, so long contexts are probed without
// evaluating every position). Output like x.
// Bucket axes: position_frequency (one bucket per (token, pair), pooled over heads and the
// two lanes of the pair; the default), position, head.
#include <cmath>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

const std::vector<ParamSpec> kBaseParam = {
    {"base", ParamType::number, ParamValue{1e4}, 1.0, std::nullopt, {}, "RoPE base theta (1e4 Llama-2, 5e5 Llama-3)"}};

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), kBaseParam, std::move(fn));
}

// inv_freq_i = 1 / base^(2i/D), in the accumulation dtype.
torch::Tensor inverse_frequencies(const Precision& p, int64_t head_dim, double base, const torch::Tensor& like) {
  const auto i = torch::arange(0, head_dim, 2, like.options().dtype(p.accumulation_dtype()));
  return 1.0 / torch::pow(base, i / static_cast<double>(head_dim));
}

// Angles [tokens, D/2] = pos ⊗ inv_freq, in the accumulation dtype.
torch::Tensor angles(const torch::Tensor& pos, const torch::Tensor& inv) { return pos.unsqueeze(1) * inv.unsqueeze(0); }

// y = u·[cos, cos] + rotate_half(u)·[sin, sin] for x [B, T, H, D] and tables [T, D/2].
torch::Tensor rotate_half_split(const torch::Tensor& u, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto half = u.size(-1) / 2;
  const auto a = u.narrow(-1, 0, half), b = u.narrow(-1, half, half);
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // broadcast over heads
  return torch::cat({a * c - b * s, b * c + a * s}, -1);
}

torch::Tensor neox(const KernelInputs& in, const Precision& p, const torch::Tensor& th) {
  return p.round_w(rotate_half_split(p.up(in.at("x")), torch::cos(th), torch::sin(th)));
}

std::vector<Variant> rope_variants() {
  std::vector<Variant> v;
  v.push_back(variant("neox_fp32", "HF/NeoX half-split rotation, fp32 inv_freq, angles and tables, one rounding",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const auto& x = in.at("x");
                        const auto inv = inverse_frequencies(p, x.size(-1), prm.number("base"), p.up(x));
                        return neox(in, p, angles(p.up(in.at("pos")), inv));
                      }));
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
  return v;
}

// Positions pos_t = start + stride·t, shared by rope and qkv_rope.
const std::vector<ParamSpec> kPositionParams = {
    {"positions.start", ParamType::integer, ParamValue{std::int64_t{1}}, 0.0, std::nullopt, {}, "first position"},
    {"positions.stride", ParamType::integer, ParamValue{std::int64_t{1}}, 1.0, std::nullopt, {},
     "distance between consecutive positions (probe long contexts without every position)"},
};

// An even head dimension, and positions that stay exact integers in fp32.
std::optional<FieldError> check_rotary(const ProbeContract& probe) {
  const auto dim = probe.params.integer("shape.head_dim");
  if (dim % 2 != 0) return FieldError{"probe.shape.head_dim", "expected an even head dimension, got " + std::to_string(dim)};
  const auto last = probe.params.integer("positions.start") +
                    probe.params.integer("positions.stride") * (probe.params.integer("shape.tokens") - 1);
  if (last >= (std::int64_t{1} << 24)) {
    return FieldError{"probe.positions.stride", "positions reach " + std::to_string(last) + ", beyond 2^24 (not exact in fp32)"};
  }
  return std::nullopt;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t) {
  const auto tokens = probe.params.integer("shape.tokens");
  const auto start = probe.params.integer("positions.start");
  const auto stride = probe.params.integer("positions.stride");
  KernelInputs fixed;
  // Exact integers, held in fp64; kernels form positions with p.up(pos) (exact below 2^24).
  fixed.set("pos", torch::arange(tokens, torch::kFloat64) * static_cast<double>(stride) + static_cast<double>(start));
  return fixed;
}

KernelInputs make_replicate(const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
  auto gen = make_generator(seed);
  const auto tokens = probe.params.integer("shape.tokens"), heads = probe.params.integer("shape.heads"),
             dim = probe.params.integer("shape.head_dim");
  KernelInputs in;
  in.set("x", shifted_gaussian(probe, tokens * heads, dim, gen).view({tokens, heads, dim}));
  return in;
}

torch::Tensor bucket_ids(const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
  const auto tokens = shape[0], heads = shape[1], dim = shape[2], half = dim / 2;
  const auto opts = torch::TensorOptions().dtype(torch::kInt64);
  const auto t = torch::arange(tokens, opts).view({tokens, 1, 1}).expand({tokens, heads, dim});
  if (axis == "position") return t.contiguous();
  if (axis == "head") return torch::arange(heads, opts).view({1, heads, 1}).expand({tokens, heads, dim}).contiguous();
  const auto pair = torch::remainder(torch::arange(dim, opts), half).view({1, 1, dim}).expand({tokens, heads, dim});
  return (t * half + pair).contiguous();
}

}  // namespace

void register_rope_family(Registry& registry) {
  Family f;
  f.name = "rope";
  f.description = "rotary position embedding, half-split layout: x [tokens, heads, head_dim], positions [tokens]";
  f.bucket_axes = {"position_frequency", "position", "head"};
  f.probe_params = {
      {"shape.tokens", ParamType::integer, ParamValue{std::int64_t{256}}, 1.0, std::nullopt, {}, "positions per replicate"},
      {"shape.heads", ParamType::integer, ParamValue{std::int64_t{4}}, 1.0, std::nullopt, {}, "heads"},
      {"shape.head_dim", ParamType::integer, ParamValue{std::int64_t{64}}, 4.0, std::nullopt, {}, "head dimension (even)"},
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
  f.make_fixed = make_fixed;
  f.make_replicate = make_replicate;
  f.bucket_ids = bucket_ids;
  for (auto& v : rope_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

// ---------------------------------------------------------------------------------------
// qkv_rope family: the attention input projection followed by RoPE on q and k (#23).
//
// Inputs: x [B, tokens, hidden] per replicate; W_qkv [(heads + 2·kv_heads)·head_dim, hidden]
// (rows: q heads, then k heads, then v heads) and pos [tokens] fixed. Output
// [B, tokens, heads + 2·kv_heads, head_dim]: rotated q, rotated k, v. Bucket axes as rope's.

namespace {

struct QkvShape {
  int64_t q, kv, dim;
};

QkvShape qkv_shape(const KernelInputs& in) {
  const auto& w = in.at("W_qkv");
  const auto q_rows = in.at("q_rows").item<int64_t>(), dim = in.at("head_dim").item<int64_t>();
  return {q_rows / dim, (w.size(0) - q_rows) / (2 * dim), dim};
}

torch::Tensor qkv_tables(const KernelInputs& in, const Precision& p, int64_t dim, double base, bool cos) {
  const auto pos = p.up(in.at("pos"));
  const auto th = angles(pos, inverse_frequencies(p, dim, base, pos));
  return cos ? torch::cos(th) : torch::sin(th);
}

std::vector<Variant> qkv_rope_variants() {
  std::vector<Variant> v;
  v.push_back(variant(
      "separate_projections",
      "three fp32 GEMMs (q, k, v), each rounded to W into its own contiguous tensor, then q and k rotated "
      "with HF's rotate_half in fp32, one rounding (the reference of #23)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto sh = qkv_shape(in);
        const auto w = p.up(in.at("W_qkv"));
        const auto proj = [&](int64_t first_row, int64_t heads) {
          const auto y = p.round_w(torch::matmul(p.up(x), w.narrow(0, first_row, heads * sh.dim).t()));
          return y.view({x.size(0), x.size(1), heads, sh.dim});
        };
        const auto q = proj(0, sh.q), k = proj(sh.q * sh.dim, sh.kv), val = proj((sh.q + sh.kv) * sh.dim, sh.kv);
        const auto c = qkv_tables(in, p, sh.dim, prm.number("base"), true);
        const auto s = qkv_tables(in, p, sh.dim, prm.number("base"), false);
        return torch::cat({p.round_w(rotate_half_split(p.up(q), c, s)), p.round_w(rotate_half_split(p.up(k), c, s)), val},
                          2);
      }));
  v.push_back(variant(
      "fused_qkv_strided_inplace",
      "one fused qkv = x @ W_qkv^T by ATen's W GEMM, then q and k rotated in place on strided views of qkv "
      "(vLLM's query/key stride handling), one rounding each (#23)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto sh = qkv_shape(in);
        const auto dt = p.is_exact() ? torch::kFloat64 : p.working_dtype();
        auto qkv = at::matmul(x.to(dt), in.at("W_qkv").to(dt).t());  // [B, T, (q + 2kv)·D], W
        const auto c = qkv_tables(in, p, sh.dim, prm.number("base"), true);
        const auto s = qkv_tables(in, p, sh.dim, prm.number("base"), false);
        const auto rotate_in_place = [&](int64_t first_col, int64_t heads) {
          // A strided view into qkv (row stride (q + 2kv)·D), written through.
          auto view = qkv.narrow(-1, first_col, heads * sh.dim).view({x.size(0), x.size(1), heads, sh.dim});
          view.copy_(p.round_w(rotate_half_split(p.up(view), c, s)));
        };
        rotate_in_place(0, sh.q);
        rotate_in_place(sh.q * sh.dim, sh.kv);
        return p.round_w(qkv.view({x.size(0), x.size(1), sh.q + 2 * sh.kv, sh.dim}));
      }));
  return v;
}

}  // namespace

void register_qkv_rope_family(Registry& registry) {
  Family f;
  f.name = "qkv_rope";
  f.description =
      "attention input projection then RoPE on q and k: x [tokens, hidden], W_qkv [(heads + 2 kv_heads)·head_dim, hidden]";
  f.bucket_axes = {"position_frequency", "position", "head"};
  f.probe_params = {
      {"shape.tokens", ParamType::integer, ParamValue{std::int64_t{128}}, 1.0, std::nullopt, {}, "positions per replicate"},
      {"shape.hidden", ParamType::integer, ParamValue{std::int64_t{1024}}, 1.0, std::nullopt, {}, "model width"},
      {"shape.heads", ParamType::integer, ParamValue{std::int64_t{8}}, 1.0, std::nullopt, {}, "query heads"},
      {"shape.kv_heads", ParamType::integer, ParamValue{std::int64_t{2}}, 1.0, std::nullopt, {}, "key/value heads (GQA)"},
      {"shape.head_dim", ParamType::integer, ParamValue{std::int64_t{64}}, 2.0, std::nullopt, {}, "head dimension (even)"},
  };
  f.probe_params.insert(f.probe_params.end(), kPositionParams.begin(), kPositionParams.end());
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    if (auto e = check_rotary(probe)) return e;
    if (auto e = check_kv_heads(probe)) return e;
    return check_outlier_count(probe, "shape.hidden");
  };
  f.make_fixed = [](const ProbeContract& probe, std::uint64_t seed) {
    auto fixed = make_fixed(probe, seed);  // positions, as rope's
    const auto hidden = probe.params.integer("shape.hidden"), dim = probe.params.integer("shape.head_dim");
    const auto rows = (probe.params.integer("shape.heads") + 2 * probe.params.integer("shape.kv_heads")) * dim;
    auto gen = make_generator(seed);
    const auto w = at::randn({rows, hidden}, gen, torch::TensorOptions().dtype(torch::kFloat32)) /
                   std::sqrt(static_cast<double>(hidden));
    fixed.set("W_qkv", w.to(numerics::to_dtype(probe.dtype)));
    // Shape facts the kernels need, as integer tensors (left alone by the dtype conversions).
    fixed.set("q_rows", torch::tensor(probe.params.integer("shape.heads") * dim, torch::kInt64));
    fixed.set("head_dim", torch::tensor(dim, torch::kInt64));
    return fixed;
  };
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    return token_channel_activations(probe, "shape.tokens", "shape.hidden", seed);
  };
  f.bucket_ids = bucket_ids;
  for (auto& v : qkv_rope_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
