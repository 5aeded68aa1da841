// RoPE family: rotary position embedding of one projection (q or k), NeoX/HF half-split
// layout: dims (i, i + D/2) form frequency pair i, rotated by angle pos · inv_freq_i with
// inv_freq_i = base^(-2i/D). Controls R1-R4, #20, #21.
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
  return v;
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
      {"positions.start", ParamType::integer, ParamValue{std::int64_t{1}}, 0.0, std::nullopt, {}, "first position"},
      {"positions.stride", ParamType::integer, ParamValue{std::int64_t{1}}, 1.0, std::nullopt, {},
       "distance between consecutive positions (probe long contexts without every position)"},
  };
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    const auto dim = probe.params.integer("shape.head_dim");
    if (dim % 2 != 0) return FieldError{"probe.shape.head_dim", "expected an even head dimension, got " + std::to_string(dim)};
    const auto last = probe.params.integer("positions.start") +
                      probe.params.integer("positions.stride") * (probe.params.integer("shape.tokens") - 1);
    if (last >= (std::int64_t{1} << 24)) {
      return FieldError{"probe.positions.stride", "positions reach " + std::to_string(last) + ", beyond 2^24 (not exact in fp32)"};
    }
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

}  // namespace kcert::kernels
