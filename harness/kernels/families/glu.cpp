// GLU MLP family (SwiGLU): h = silu(x Wg^T) · (x Wu^T), with the gate/up fusion and
// activation cast points the controls replay (G3, #32).
//
// Inputs: x [B, tokens, hidden] per replicate; Wg, Wu [intermediate, hidden] fixed.
// Output [B, tokens, intermediate]. Bucket axes: channel (intermediate unit, the default), row.
//
// Backward (issue 31): gradients dx (buckets channel = hidden unit, row), dwg and dwu (per
// output row = intermediate unit, or per input column; they sum over the replicate's tokens).
// Autograd of each forward, except the explicit backwards replaying a fused dSwiGLU epilogue
// (BP13) and unsloth's swapped buffers (BN23).
#include <cmath>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), {}, std::move(fn));
}

// A projection as a bf16 GEMM on the oneDNN path computes it: fp32 products and sums, one rounding.
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w, const Precision& p) {
  return p.round_w(torch::matmul(p.up(x), p.up(w).t()));
}

// Llama MLP cast points: silu in fp32, rounded to W, then a W multiply by the up projection.
torch::Tensor silu_then_mul(const torch::Tensor& g, const torch::Tensor& u, const Precision& p) {
  const auto a = p.round_w(torch::silu(p.up(g)));
  return p.round_w(p.up(a) * p.up(u));
}

torch::Tensor fused_act_mul(const KernelInputs& in, const Precision& p, const ParamMap&) {
  const auto g = project(in.at("x"), in.at("Wg"), p), u = project(in.at("x"), in.at("Wu"), p);
  return p.round_w(torch::silu(p.up(g)) * p.up(u));
}

// The backward of h = silu(g)·u with g = x Wgᵀ, u = x Wuᵀ, as a fused kernel runs it: the
// dSwiGLU epilogue writes dg = dy·u·silu'(g) and du = dy·silu(g) to W, then one dgrad GEMM
// dx = [dg du]·[Wg; Wu] and the wgrad GEMMs dWg = dgᵀx, dWu = duᵀx, fp32 accumulation and one
// rounding each. `swapped`: unsloth's wrong buffers (each written into the other's).
Gradients fused_dswiglu_backward(bool swapped, const KernelInputs& in, const Precision& p, const torch::Tensor& dy,
                                 const std::vector<std::string>& wrt) {
  const auto x = p.up(in.at("x")), wg = p.up(in.at("Wg")), wu = p.up(in.at("Wu"));
  const auto g = p.up(project(in.at("x"), in.at("Wg"), p)), u = p.up(project(in.at("x"), in.at("Wu"), p));
  const auto d = p.up(dy);
  const auto s = torch::sigmoid(g);
  auto dg = p.up(p.round_w(d * u * s * (1.0 + g * (1.0 - s))));
  auto du = p.up(p.round_w(d * g * s));
  if (swapped) std::swap(dg, du);
  // Weight gradients sum over every leading (token) position: [I, H].
  const auto flat = [](const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); };
  Gradients out;
  for (const auto& name : wrt) {
    if (name == "x") out["x"] = p.round_w(torch::matmul(dg, wg) + torch::matmul(du, wu));
    if (name == "Wg") out["Wg"] = p.round_w(torch::matmul(flat(dg).t(), flat(x)));
    if (name == "Wu") out["Wu"] = p.round_w(torch::matmul(flat(du).t(), flat(x)));
  }
  return out;
}

Variant with_backward(std::string name, std::string description, bool swapped) {
  auto v = variant(std::move(name), std::move(description), fused_act_mul);
  v.backward = [swapped](const KernelInputs& in, const Precision& p, const ParamMap&, const torch::Tensor& dy,
                         const std::vector<std::string>& wrt) { return fused_dswiglu_backward(swapped, in, p, dy, wrt); };
  return v;
}

std::vector<Variant> glu_variants() {
  std::vector<Variant> v;
  v.push_back(with_backward("fused_dswiglu_dgrad",
                            "fused_act_mul_fp32's forward; backward by a fused dSwiGLU epilogue (dg, du rounded to W) "
                            "and one dgrad GEMM over [Wg; Wu] (BP13: cudnn-frontend#609)",
                            false));
  v.push_back(with_backward("swiglu_bwd_wrong_buffers",
                            "as fused_dswiglu_dgrad, with dg and du written into each other's buffer (BN23: "
                            "unsloth#3314)",
                            true));
  v.push_back(variant("llama_separate",
                      "Llama MLP: separate gate and up projections, silu rounded to W, then a W multiply",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return silu_then_mul(project(in.at("x"), in.at("Wg"), p), project(in.at("x"), in.at("Wu"), p), p);
                      }));
  v.push_back(variant("fused_gate_up",
                      "Phi-3 structure: one projection by [Wg; Wu], chunked into gate and up, same activation (#32)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto gu = project(in.at("x"), torch::cat({in.at("Wg"), in.at("Wu")}, 0), p);
                        const auto parts = gu.chunk(2, -1);
                        return silu_then_mul(parts[0], parts[1], p);
                      }));
  v.push_back(variant("liger_fused_gate_up_silu_mul",
                      "Liger-Kernel's LigerPhi3SwiGLUMLP: one projection by [Wg; Wu] chunked into gate and up, "
                      "then its SiLU-mul Triton kernel: silu(a) = a·sigmoid(a) on the fp32 gate, times the W up "
                      "value promoted to fp32, one rounding at the store",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto gu = project(in.at("x"), torch::cat({in.at("Wg"), in.at("Wu")}, 0), p);
                        const auto parts = gu.chunk(2, -1);
                        const auto g = p.up(parts[0]);
                        return p.round_w(g * torch::sigmoid(g) * p.up(parts[1]));
                      }));
  v.push_back(variant("fused_act_mul_fp32",
                      "fused GLU epilogue: silu(g)·u in fp32 and one rounding (G3: mistral.rs#1867, TE#717)",
                      fused_act_mul));
  return v;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t seed) {
  const auto h = probe.params.integer("shape.hidden"), i = probe.params.integer("shape.intermediate");
  InputStream stream(seed);
  const double s = probe.params.number("weights.gain") / std::sqrt(static_cast<double>(h));
  KernelInputs fixed;
  fixed.set("Wg", (stream.normal({i, h}, torch::kFloat64) * s).to(numerics::to_dtype(probe.dtype)));
  fixed.set("Wu", (stream.normal({i, h}, torch::kFloat64) * s).to(numerics::to_dtype(probe.dtype)));
  return fixed;
}

}  // namespace

void register_glu_family(Registry& registry) {
  Family f;
  f.name = "glu";
  f.description = "SwiGLU MLP up-projection: x [tokens, hidden], Wg and Wu [intermediate, hidden]";
  f.bucket_axes = {"channel", "row"};
  f.probe_params = {
      param::integer("shape.tokens", 32).at_least(1).doc("tokens per replicate"),
      param::integer("shape.hidden", 1024).at_least(1).doc("hidden size"),
      param::integer("shape.intermediate", 2048).at_least(1).doc("intermediate size"),
      param::number("weights.gain", 1.0).at_least(0).doc("projection weights ~ N(0, gain²/hidden): pre-activations of order gain"),
  };
  f.validate_probe = [](const ProbeContract& probe) { return check_outlier_count(probe, "shape.hidden"); };
  f.make_fixed = make_fixed;
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    return token_channel_activations(probe, "shape.tokens", "shape.hidden", seed);
  };
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  f.gradients.push_back(input_gradient({"dx", "x", {"channel", "row"}, "", "gradient of the input, per token and hidden unit"}, token_channel_buckets()));
  for (const auto& [name, input] : {std::pair{"dwg", "Wg"}, std::pair{"dwu", "Wu"}}) {
    f.gradients.push_back(weight_gradient(
        {name, input, {"row", "column"}, "tokens",
         std::string("gradient of ") + input + " [intermediate, hidden]: per output row (intermediate unit) or input column"},
        matrix_buckets(), "shape.tokens"));
  }
  for (auto& v : glu_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
