// qkv_rope family: the attention input projection followed by RoPE on q and k (#23).
//
// Inputs: x [B, tokens, hidden] per replicate; W_qkv [(heads + 2·kv_heads)·head_dim, hidden]
// (rows: q heads, then k heads, then v heads) and pos [tokens] fixed. Output
// [B, tokens, heads + 2·kv_heads, head_dim]: rotated q, rotated k, v. Bucket axes as rope's.
#include <cmath>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/kernels/rotary.hpp"

namespace kcert::kernels {

namespace {

using namespace rotary;
using numerics::Precision;


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

// One fused qkv = x @ W_qkv^T (fp32 GEMM, one rounding to W), split into q, k, v along the
// last dimension: [B, T, q·D], [B, T, kv·D], [B, T, kv·D].
std::vector<torch::Tensor> fused_qkv_parts(const KernelInputs& in, const Precision& p, const QkvShape& sh) {
  const auto qkv = p.round_w(torch::matmul(p.up(in.at("x")), p.up(in.at("W_qkv")).t()));
  return qkv.split_with_sizes({sh.q * sh.dim, sh.kv * sh.dim, sh.kv * sh.dim}, -1);
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
  v.push_back(variant(
      "fused_qkv_split_rotate_half",
      "Phi-3 / vLLM structure: one fused qkv = x @ W_qkv^T (fp32 GEMM, one rounding), sliced into q, k, v "
      "(Phi-3's qkv[..., :q_pos], vLLM's qkv.split), q and k rotated out of place by rotate_half in fp32 with "
      "fp32 cos/sin (the arithmetic of vLLM's neox rotary kernel with an fp32 cache), one rounding",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto sh = qkv_shape(in);
        const auto parts = fused_qkv_parts(in, p, sh);
        const auto heads = [&](const torch::Tensor& t, int64_t n) { return t.reshape({x.size(0), x.size(1), n, sh.dim}); };
        const auto c = qkv_tables(in, p, sh.dim, prm.number("base"), true);
        const auto s = qkv_tables(in, p, sh.dim, prm.number("base"), false);
        return torch::cat({p.round_w(rotate_half_split(p.up(heads(parts[0], sh.q)), c, s)),
                           p.round_w(rotate_half_split(p.up(heads(parts[1], sh.kv)), c, s)), heads(parts[2], sh.kv)},
                          2);
      }));
  v.push_back(variant(
      "fused_qkv_complex_interleaved",
      "one fused qkv GEMM (fp32, one rounding) split into q, k, v, then Meta Llama's apply_rotary_emb: each "
      "head's pairs (i, i + D/2) viewed as complex numbers (Meta's arithmetic on HF's permuted q/k weight layout, "
      "so the same real function as rotate_half), times the complex64 table polar(1, pos·inv_freq), view_as_real, one rounding (complex128 under fp64)",
      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
        const auto& x = in.at("x");
        const auto sh = qkv_shape(in);
        const auto parts = fused_qkv_parts(in, p, sh);
        const auto pos = p.up(in.at("pos"));
        const auto th = angles(pos, inverse_frequencies(p, sh.dim, prm.number("base"), pos));
        const auto freqs_cis = torch::polar(torch::ones_like(th), th).unsqueeze(1);  // [T, 1, D/2]
        const auto half = sh.dim / 2;
        const auto rotate = [&](const torch::Tensor& t, int64_t n) {
          const auto u = p.up(t.reshape({x.size(0), x.size(1), n, sh.dim}));
          // (a_i, b_i) = (u_i, u_{i+D/2}) as the real and imaginary parts of pair i.
          const auto pairs = torch::stack({u.narrow(-1, 0, half), u.narrow(-1, half, half)}, -1).contiguous();
          const auto r = torch::view_as_real(torch::view_as_complex(pairs) * freqs_cis);
          return p.round_w(torch::cat({r.select(-1, 0), r.select(-1, 1)}, -1));
        };
        return torch::cat({rotate(parts[0], sh.q), rotate(parts[1], sh.kv),
                           parts[2].reshape({x.size(0), x.size(1), sh.kv, sh.dim})},
                          2);
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
      param::integer("shape.tokens", 128).at_least(1).doc("positions per replicate"),
      param::integer("shape.hidden", 1024).at_least(1).doc("model width"),
      param::integer("shape.heads", 8).at_least(1).doc("query heads"),
      param::integer("shape.kv_heads", 2).at_least(1).doc("key/value heads (GQA)"),
      param::integer("shape.head_dim", 64).at_least(2).doc("head dimension (even)"),
  };
  f.probe_params.insert(f.probe_params.end(), kPositionParams.begin(), kPositionParams.end());
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    if (auto e = check_rotary(probe)) return e;
    if (auto e = check_kv_heads(probe)) return e;
    return check_outlier_count(probe, "shape.hidden");
  };
  f.make_fixed = [](const ProbeContract& probe, std::uint64_t seed) {
    auto fixed = position_inputs(probe);  // positions, as rope's
    const auto hidden = probe.params.integer("shape.hidden"), dim = probe.params.integer("shape.head_dim");
    const auto rows = (probe.params.integer("shape.heads") + 2 * probe.params.integer("shape.kv_heads")) * dim;
    InputStream stream(seed);
    const auto w = stream.normal({rows, hidden}) /
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
