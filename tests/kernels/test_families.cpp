// Kernel-level checks of every family against an independent LibTorch formulation
// (nn::functional or a textbook formula), so that a wrong reduction, a wrong top-k or a
// wrong strided write breaks a test, not only a control.
#include <torch/nn/functional.h>  // the independent formulations; kcert itself does not use nn

#include "tests/catch_torch.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "harness/engine/engine.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/numerics/runtime.hpp"
#include "harness/store/json.hpp"
#include "harness/testcase/loader.hpp"
#include "tests/kernels/builtin_registry.hpp"

namespace F = torch::nn::functional;
using kcert::kernels::KernelInputs;
using kcert::kernels::ParamMap;
using kcert::numerics::Precision;

namespace {

const kcert::kernels::Registry& registry() { return kcert::test::builtin_registry(); }

kcert::kernels::ProbeContract probe(const std::string& family, std::map<std::string, kcert::kernels::ParamValue> set) {
  kcert::kernels::ProbeContract p;
  p.shift = 0.0;
  p.scale = 3.0;
  for (const auto& spec : registry().family(family).probe_params) {
    if (spec.default_value) p.params.set(spec.name, *spec.default_value);
  }
  for (auto& [k, v] : set) p.params.set(k, v);
  return p;
}

// One replicate with a leading batch dimension of 1, fixed inputs merged in.
KernelInputs inputs(const std::string& family, const kcert::kernels::ProbeContract& p, std::uint64_t seed) {
  const auto& f = registry().family(family);
  auto in = f.make_fixed(p, seed);
  const auto rep = f.make_replicate(p, in, seed + 1);
  for (const auto& [name, t] : rep.tensors()) in.set(name, t.unsqueeze(0));
  return in;
}

torch::Tensor run(const std::string& family, const std::string& variant, const KernelInputs& in, const Precision& pr,
                  ParamMap params = {}) {
  const auto& v = registry().variant(family, variant);
  for (const auto& spec : v.schema.params) {
    if (!params.has(spec.name) && spec.default_value) params.set(spec.name, *spec.default_value);
  }
  torch::NoGradGuard g;
  return v.fn(in, pr, params);
}

}  // namespace

TEST_CASE("loss family reductions match F.cross_entropy with ignore_index", "[families][loss]") {
  const auto p = probe("loss", {{"shape.microbatches", std::int64_t{3}},
                                {"shape.tokens", std::int64_t{20}},
                                {"shape.vocab", std::int64_t{50}},
                                {"ignore.min", 0.1},
                                {"ignore.max", 0.8}});
  const auto in = inputs("loss", p, 7);
  const auto w = Precision::working(kcert::stats::FloatFormat::bf16);
  const auto z = in.at("z")[0].to(torch::kFloat32);
  auto t = in.at("t")[0].clone();
  t.masked_fill_(in.at("valid").logical_not(), -100);  // HF's ignore_index
  const auto ce = [](const torch::Tensor& zz, const torch::Tensor& tt) {
    return F::cross_entropy(zz, tt, F::CrossEntropyFuncOptions().ignore_index(-100));
  };

  const auto global = run("loss", "accum_global_token_mean", in, w);
  CHECK(global.scalar_type() == torch::kFloat32);
  CHECK(global.sum().item<double>() == Approx(ce(z, t).item<double>()).epsilon(1e-5));

  // Pre-#34191: the mean of the micro-batch means (counts 18, 11, 4 valid tokens differ).
  double mean_of_means = 0.0;
  for (int m = 0; m < 3; ++m) mean_of_means += ce(z.narrow(0, 20 * m, 20), t.narrow(0, 20 * m, 20)).item<double>() / 3.0;
  const auto per_mb = run("loss", "accum_microbatch_mean", in, w);
  CHECK(per_mb.sum().item<double>() == Approx(mean_of_means).epsilon(1e-5));
  CHECK(std::abs(per_mb.sum().item<double>() - global.sum().item<double>()) > 1e-3);  // the defect is visible

  const auto token = run("loss", "token_ce_fp32", in, w)[0];
  const auto expected = F::cross_entropy(z, t, F::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kNone));
  CHECK(torch::allclose(token, expected, 1e-5, 1e-5));

  // L2: lse rounded to bf16 and subtracted in bf16: within a bf16 ULP of lse of the fp32 loss.
  const auto lse_w = run("loss", "token_ce_lse_w", in, w)[0];
  const auto lse = torch::logsumexp(z, -1);
  const auto bound = torch::where(in.at("valid"), lse.abs() * std::ldexp(1.0, -7), torch::zeros_like(lse));
  CHECK(((lse_w - token).abs() <= bound).all().item<bool>());
  CHECK(((lse_w - token).abs() > 0).any().item<bool>());
}

TEST_CASE("loss cases are judged in their fp32 output contract", "[families][loss][engine]") {
  kcert::testcase::FamilySchemas schemas;
  for (const auto& name : registry().family_names()) schemas.emplace(name, registry().family(name).schema());
  const std::string yaml =
      "schema: 1\nid: l2\nkind: negative\nfamily: loss\nmechanism: m\nreferences: []\n"
      "reference: {variant: token_ce_fp32}\nproduction: {variant: token_ce_lse_w}\n"
      "probe: {dtype: bf16, seed: 3, shift: 0.0, scale: 3.0, shape: {tokens: 8, vocab: 4096}}\n"
      "gates: {replicates: 32, max_replicates: 64}\n";
  const auto tc = kcert::testcase::parse_testcase(yaml, "l2.yaml", schemas);
  const auto r = kcert::engine::run_case(tc, registry(), {});
  CHECK(r.output_format == kcert::stats::FloatFormat::fp32);
  CHECK(kcert::store::to_json(r)["output_dtype"] == "fp32");
  // In fp32 ULPs the bf16 subtraction is thousands of ULPs off; in bf16 ULPs it would not be.
  CHECK(r.variance.verdict == kcert::stats::Verdict::fail);
  CHECK(r.algebra.verdict == kcert::stats::Verdict::pass);
}

TEST_CASE("router weights are the renormalized top-k of softmax(h W^T)", "[families][router]") {
  const auto p = probe("router", {{"shape.tokens", std::int64_t{32}},
                                  {"shape.hidden", std::int64_t{64}},
                                  {"shape.experts", std::int64_t{16}},
                                  {"router.top_k", std::int64_t{3}}});
  const auto in = inputs("router", p, 11);
  CHECK(in.at("W_router").scalar_type() == torch::kFloat32);  // the gate is kept in fp32
  const auto w = Precision::working(kcert::stats::FloatFormat::bf16);
  const auto gates = run("router", "fp32_softmax_topk_renorm", in, w)[0].to(torch::kFloat64);
  const auto logits = F::linear(in.at("h")[0].to(torch::kFloat64), in.at("W_router").to(torch::kFloat64));
  const auto chosen = std::get<1>(logits.topk(3, -1));
  CHECK(((gates > 0).sum(-1) == 3).all().item<bool>());
  CHECK(gates.gather(-1, chosen).gt(0).all().item<bool>());
  CHECK(torch::allclose(gates.sum(-1), torch::ones({32}, torch::kFloat64), 0, 3 * std::ldexp(1.0, -8)));
  const auto probs = torch::softmax(logits, -1).gather(-1, chosen);
  CHECK(torch::allclose(gates.gather(-1, chosen), probs / probs.sum(-1, true), 0, std::ldexp(1.0, -8)));
  // Under the exact policy TF32 rounding vanishes: both variants are one function.
  const auto ex = Precision::exact();
  KernelInputs in64;
  for (const auto& [n, t] : in.tensors()) in64.set(n, t.is_floating_point() ? t.to(torch::kFloat64) : t);
  CHECK(torch::equal(run("router", "fp32_softmax_topk_renorm", in64, ex), run("router", "tf32_softmax_topk_renorm", in64, ex)));
}

TEST_CASE("the flipped oracle resolves only near ties the other way, at the precision the router decides in",
          "[families][router][selection]") {
  // W_router = I, so the logits are h itself: row 0 holds a tie 1e-9 apart (far below an
  // fp32 spacing at 2, 2.4e-7), row 1 a margin of 1e-3 (above fp32's resolution, below
  // bf16's 4 x 2^-6), row 2 a clear margin of 0.1.
  KernelInputs in;
  in.set("h", torch::tensor({2.0, 1.0, 1.0 + 1e-9, 0.0, /**/ 2.0, 1.0, 1.001, 0.0, /**/ 2.0, 1.0, 0.9, 0.0},
                            torch::kFloat64).view({1, 3, 4}));
  in.set("W_router", torch::eye(4, torch::kFloat64));
  in.set("top_k", torch::tensor(std::int64_t{2}));
  in.set("correction_bias", torch::zeros({4}, torch::kFloat64));
  const auto ex = Precision::exact();
  const auto flip = Precision::exact_flipping_near_ties(kcert::stats::FloatFormat::bf16);
  const auto selected = [](const torch::Tensor& t, std::int64_t row) { return (t[0][row] != 0).to(torch::kInt64); };
  const auto set_of = [](std::vector<std::int64_t> v) { return torch::tensor(v, torch::kInt64); };
  for (const auto* variant : {"fp32_softmax_topk_renorm", "configurable"}) {
    INFO(variant);
    const auto oracle = run("router", variant, in, ex);
    const auto alt = run("router", variant, in, flip);
    CHECK(torch::equal(selected(oracle, 0), set_of({1, 0, 1, 0})));
    CHECK(torch::equal(selected(alt, 0), set_of({1, 1, 0, 0})));  // the near tie, the other way
    CHECK(torch::equal(alt[0][1], oracle[0][1]));                   // fp32 resolves 1e-3: bit for bit
    CHECK(torch::equal(alt[0][2], oracle[0][2]));
    // The alternative is a real router output: its weights are the renormalized softmax of
    // the other pair, summing to 1.
    CHECK(alt[0][0].sum().item<double>() == Approx(1.0));
    // Noting the near ties computes the oracle bit for bit and names the rows the flipping
    // policy changes: the engine evaluates the flipped oracle only there.
    auto notes = std::make_shared<Precision::NearTieNotes>();
    const auto noting = Precision::exact_noting_near_ties(kcert::stats::FloatFormat::bf16, notes);
    CHECK(torch::equal(run("router", variant, in, noting), oracle));
    CHECK(notes->selections == 1);
    REQUIRE(notes->rows.defined());
    CHECK(torch::equal(notes->rows, (alt != oracle).any(-1)));
    CHECK(torch::equal(notes->rows, torch::tensor({true, false, false}).view({1, 3})));
  }
  // Logits rounded to bf16 decide at bf16's resolution: the 1e-3 margin is a near tie too.
  ParamMap w_logits;
  w_logits.set("logits", std::string("w"));
  const auto oracle = run("router", "configurable", in, ex, w_logits);
  const auto alt = run("router", "configurable", in, flip, w_logits);
  CHECK(torch::equal(selected(alt, 1), set_of({1, 1, 0, 0})));
  CHECK(torch::equal(selected(oracle, 1), set_of({1, 0, 1, 0})));
  CHECK(torch::equal(alt[0][2], oracle[0][2]));  // 0.1 stays resolved
}

TEST_CASE("fused qkv with in-place strided RoPE equals separate projections", "[families][qkv_rope]") {
  const auto p = probe("qkv_rope", {{"shape.tokens", std::int64_t{6}},
                                    {"shape.hidden", std::int64_t{32}},
                                    {"shape.heads", std::int64_t{4}},
                                    {"shape.kv_heads", std::int64_t{2}},
                                    {"shape.head_dim", std::int64_t{8}},
                                    {"positions.start", std::int64_t{100}}});
  const auto in = inputs("qkv_rope", p, 5);
  const auto ex = Precision::exact();
  KernelInputs in64;
  for (const auto& [n, t] : in.tensors()) in64.set(n, t.is_floating_point() ? t.to(torch::kFloat64) : t);
  const auto sep = run("qkv_rope", "separate_projections", in64, ex);
  const auto fused = run("qkv_rope", "fused_qkv_strided_inplace", in64, ex);
  REQUIRE(sep.sizes() == torch::IntArrayRef({1, 6, 8, 8}));
  CHECK(torch::allclose(sep, fused, 1e-12, 1e-12));
  // v is the unrotated projection; q head 0 at position 100 is rotated by 100·base^(-2i/D).
  const auto x = in64.at("x")[0], wqkv = in64.at("W_qkv");
  CHECK(torch::allclose(sep[0].narrow(1, 6, 2).reshape({6, 16}), F::linear(x, wqkv.narrow(0, 48, 16)), 1e-12, 1e-12));
  const auto q0 = F::linear(x[0], wqkv.narrow(0, 0, 8));
  const double a = 100.0;  // pair 0: inv_freq 1
  CHECK(sep[0][0][0][0].item<double>() == Approx(q0[0].item<double>() * std::cos(a) - q0[4].item<double>() * std::sin(a)));
}

TEST_CASE("the embedding normalizer is 55.5 in bf16 and sqrt(3072) in fp32", "[families][activation]") {
  const auto x = torch::ones({1, 1, 4}, torch::kBFloat16);
  KernelInputs in;
  in.set("x", x);
  const auto w = Precision::working(kcert::stats::FloatFormat::bf16);
  CHECK(run("activation", "embed_scale_w_constant", in, w)[0][0][0].item<double>() == 55.5);
  // x = 1.0078125: 55.93 (bf16 55.5 constant) rounds to 56, 55.86 (fp32 constant) to 55.75.
  in.set("x", torch::full({1, 1, 4}, 1.0078125, torch::kBFloat16));
  CHECK(run("activation", "embed_scale_w_constant", in, w)[0][0][0].item<double>() == 56.0);
  CHECK(run("activation", "embed_scale_fp32_constant", in, w)[0][0][0].item<double>() == 55.75);
  const auto ex = Precision::exact();
  in.set("x", torch::ones({1, 1, 4}, torch::kFloat64));
  CHECK(run("activation", "embed_scale_w_constant", in, ex)[0][0][0].item<double>() == Approx(std::sqrt(3072.0)).epsilon(1e-15));
}

TEST_CASE("the configurable router replays M1 M3 M4 and M7 as parameter changes", "[families][router]") {
  auto p = probe("router", {{"shape.tokens", std::int64_t{16}},
                            {"shape.hidden", std::int64_t{32}},
                            {"shape.experts", std::int64_t{8}},
                            {"router.top_k", std::int64_t{1}},
                            {"router.correction_bias", 0.3}});
  auto in = inputs("router", p, 21);
  KernelInputs in64;
  for (const auto& [n, t] : in.tensors()) in64.set(n, t.is_floating_point() ? t.to(torch::kFloat64) : t);
  const auto ex = Precision::exact();
  const auto param = [](std::map<std::string, kcert::kernels::ParamValue> v) {
    ParamMap m;
    for (auto& [k, x] : v) m.set(k, x);
    return m;
  };
  const auto logits = F::linear(in64.at("h")[0], in64.at("W_router"));
  const auto probs = torch::softmax(logits, -1);
  // M1: top-1 then softmax gives weight 1; softmax then top-1 gives p_max < 1.
  const auto m1 = run("router", "configurable", in64, ex, param({{"order", std::string("topk_softmax")}}))[0];
  CHECK(torch::allclose(m1.sum(-1), torch::ones({16}, torch::kFloat64)));
  const auto ref1 = run("router", "configurable", in64, ex, param({{"renormalize", false}}))[0];
  CHECK(torch::allclose(ref1.sum(-1), std::get<0>(probs.max(-1))));
  // M3 with k = 3: without renormalization the weights sum to the captured mass.
  p.params.set("router.top_k", std::int64_t{3});
  in = inputs("router", p, 21);
  for (const auto& [n, t] : in.tensors()) in64.set(n, t.is_floating_point() ? t.to(torch::kFloat64) : t);
  const auto m3 = run("router", "configurable", in64, ex, param({{"renormalize", false}}))[0];
  CHECK(torch::allclose(m3.sum(-1), std::get<0>(probs.topk(3, -1)).sum(-1)));
  // M4 / M7: sigmoid scores, selection by score + b, weights from the score alone.
  const auto s = torch::sigmoid(logits);
  const auto b = in64.at("correction_bias");
  const auto idx = std::get<1>((s + b).topk(3, -1));
  const auto ds = run("router", "configurable", in64, ex,
                      param({{"scoring", std::string("sigmoid")}, {"routed_scaling", 2.5}}))[0];
  const auto w = s.gather(-1, idx);
  CHECK(torch::allclose(ds.gather(-1, idx), w / w.sum(-1, true) * 2.5));
  const auto m4 = run("router", "configurable", in64, ex,
                      param({{"scoring", std::string("sigmoid")}, {"routed_scaling", 2.5}, {"bias_in_weights", true}}))[0];
  const auto wb = (s + b).gather(-1, idx);
  CHECK(torch::allclose(m4.gather(-1, idx), wb / wb.sum(-1, true) * 2.5));
  const auto m7 = run("router", "configurable", in64, ex,
                      param({{"scoring", std::string("sigmoid")}, {"routed_scaling", 2.5}, {"renormalize", false},
                             {"scaling_only_with_renorm", true}}))[0];
  CHECK(torch::allclose(m7.gather(-1, idx), w));  // the 2.5 is lost
}

TEST_CASE("moe combine structures agree with dense masking under fp64", "[families][moe_combine]") {
  const auto p = probe("moe_combine", {{"shape.tokens", std::int64_t{12}},
                                       {"shape.hidden", std::int64_t{8}},
                                       {"shape.hidden_out", std::int64_t{6}},
                                       {"shape.experts", std::int64_t{5}},
                                       {"router.top_k", std::int64_t{2}}});
  const auto in = inputs("moe_combine", p, 3);
  KernelInputs in64;
  for (const auto& [n, t] : in.tensors()) in64.set(n, t.is_floating_point() ? t.to(torch::kFloat64) : t);
  const auto ex = Precision::exact();
  // Independent formulation: out_t = sum_j w_tj · x_t W_{idx_tj}^T.
  const auto x = in64.at("x")[0], we = in64.at("W_experts");
  const auto idx = in64.at("idx")[0], w = in64.at("w")[0];
  auto expected = torch::zeros({12, 6}, torch::kFloat64);
  for (int64_t t = 0; t < 12; ++t) {
    for (int64_t j = 0; j < 2; ++j) {
      expected[t] += w[t][j].item<double>() * torch::matmul(we[idx[t][j].item<int64_t>()], x[t]);
    }
  }
  for (const char* v : {"dense_masked", "loop_index_add_fp32", "sorted_permute_dispatch", "padded_grouped_bmm"}) {
    INFO(v);
    CHECK(torch::allclose(run("moe_combine", v, in64, ex)[0], expected, 1e-12, 1e-12));
  }
}

// ---- the seven families the controls above do not reach, each against nn::functional or
// a textbook formula in fp64 (the exact policy, so any difference is a different function)

namespace {

// A fixed + one-replicate input set in fp64, and the exact policy.
KernelInputs exact_inputs(const std::string& family, const kcert::kernels::ProbeContract& p, std::uint64_t seed) {
  const auto in = inputs(family, p, seed);
  KernelInputs out;
  for (const auto& [n, t] : in.tensors()) out.set(n, t.is_floating_point() ? t.to(torch::kFloat64) : t);
  return out;
}

bool same_function(const torch::Tensor& got, const torch::Tensor& want) {
  return got.sizes() == want.sizes() && torch::allclose(got, want, 1e-12, 1e-12);
}

}  // namespace

TEST_CASE("rmsnorm variants compute x / rms(x) times the gain, Gemma's gain being 1 + w", "[families][rmsnorm]") {
  const auto ex = Precision::exact();
  for (const std::string kind : {"around_one", "zero_centred"}) {
    const auto p = probe("rmsnorm", {{"shape.tokens", std::int64_t{8}}, {"shape.hidden", std::int64_t{32}},
                                     {"weights.kind", kind}});
    const auto in = exact_inputs("rmsnorm", p, 3);
    const auto& x = in.at("x");
    const auto normed = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6);
    CHECK(same_function(run("rmsnorm", "llama", in, ex), normed * in.at("w")));
    CHECK(same_function(run("rmsnorm", "gemma", in, ex), normed * (1.0 + in.at("w"))));
    CHECK(same_function(run("rmsnorm", "llama_recip_sqrt", in, ex), normed * in.at("w")));
  }
}

TEST_CASE("residual rmsnorm returns h = x + r and rmsnorm(h) side by side", "[families][residual_rmsnorm]") {
  const auto ex = Precision::exact();
  const auto p = probe("residual_rmsnorm", {{"shape.tokens", std::int64_t{8}}, {"shape.hidden", std::int64_t{32}}});
  const auto in = exact_inputs("residual_rmsnorm", p, 4);
  const auto h = in.at("x") + in.at("r");
  const auto y = h * torch::rsqrt(h.pow(2).mean(-1, true) + 1e-6) * in.at("w");
  const auto want = torch::cat({h, y}, -1);
  for (const auto* v : {"hf_unfused", "vllm_fused_add", "fused_fp32_rne"}) {
    INFO(v);
    CHECK(same_function(run("residual_rmsnorm", v, in, ex), want));
  }
}

TEST_CASE("layernorm variants equal F.layer_norm", "[families][layernorm]") {
  const auto ex = Precision::exact();
  const auto p = probe("layernorm", {{"shape.tokens", std::int64_t{8}}, {"shape.hidden", std::int64_t{32}}});
  const auto in = exact_inputs("layernorm", p, 5);
  const auto want = F::layer_norm(in.at("x"), F::LayerNormFuncOptions({32}).weight(in.at("g")).bias(in.at("b")).eps(1e-5));
  for (const auto* v : {"two_pass", "onepass_fp32", "aten_layer_norm"}) {
    INFO(v);
    CHECK(same_function(run("layernorm", v, in, ex), want));
  }
}

TEST_CASE("linear variants equal F.linear, with and without bias, split-K included", "[families][linear]") {
  const auto ex = Precision::exact();
  const auto p = probe("linear", {{"shape.tokens", std::int64_t{8}}, {"shape.in_features", std::int64_t{64}},
                                  {"shape.out_features", std::int64_t{16}}});
  const auto in = exact_inputs("linear", p, 6);
  const auto with_bias = F::linear(in.at("x"), in.at("W"), in.at("b"));
  for (const auto* v : {"fp32_fused_bias", "round_then_bias", "aten_addmm_w"}) {
    INFO(v);
    CHECK(same_function(run("linear", v, in, ex), with_bias));
  }
  // The split-K variants (G6) reduce K in chunks and take no bias, like their reference.
  for (const auto* v : {"fp32_no_bias", "splitk_w_partials", "splitk_fp32_partials"}) {
    INFO(v);
    CHECK(same_function(run("linear", v, in, ex), F::linear(in.at("x"), in.at("W"))));
  }
}

TEST_CASE("glu variants compute silu(x Wg^T) * (x Wu^T)", "[families][glu]") {
  const auto ex = Precision::exact();
  const auto p = probe("glu", {{"shape.tokens", std::int64_t{4}}, {"shape.hidden", std::int64_t{32}},
                               {"shape.intermediate", std::int64_t{48}}});
  const auto in = exact_inputs("glu", p, 7);
  const auto want = F::silu(F::linear(in.at("x"), in.at("Wg"))) * F::linear(in.at("x"), in.at("Wu"));
  for (const auto* v : {"llama_separate", "fused_gate_up", "fused_act_mul_fp32"}) {
    INFO(v);
    CHECK(same_function(run("glu", v, in, ex), want));
  }
}

TEST_CASE("attention variants equal causal softmax(q k^T / sqrt(d)) v", "[families][attention]") {
  const auto ex = Precision::exact();
  const auto p = probe("attention", {{"shape.heads", std::int64_t{2}}, {"shape.kv_heads", std::int64_t{2}},
                                     {"shape.tokens", std::int64_t{12}}, {"shape.head_dim", std::int64_t{8}}});
  const auto in = exact_inputs("attention", p, 8);
  const auto& q = in.at("q");
  const auto logits = torch::matmul(q, in.at("k").transpose(-2, -1)) / std::sqrt(8.0);
  const auto future = torch::ones({12, 12}, torch::kBool).triu(1);
  const auto want = torch::matmul(torch::softmax(logits.masked_fill(future, -INFINITY), -1), in.at("v"));
  ParamMap small_tiles;
  small_tiles.set("tile", std::int64_t{4});  // several key tiles, so the online rescaling runs
  for (const auto* v : {"eager_hf", "eager_gqa_grouped", "online_softmax_fp32"}) {
    INFO(v);
    CHECK(same_function(run("attention", v, in, ex, small_tiles), want));
  }
}

TEST_CASE("rope variants rotate pair (i, i + D/2) by pos * base^(-2i/D)", "[families][rope]") {
  const auto ex = Precision::exact();
  const auto p = probe("rope", {{"shape.tokens", std::int64_t{6}}, {"shape.heads", std::int64_t{2}},
                                {"shape.head_dim", std::int64_t{8}}, {"positions.start", std::int64_t{3}},
                                {"positions.stride", std::int64_t{5}}});
  const auto in = exact_inputs("rope", p, 9);
  const auto& x = in.at("x");  // [1, T, H, D]
  const auto inv = torch::pow(1e4, -torch::arange(0, 8, 2, torch::kFloat64) / 8.0);
  const auto th = (in.at("pos").unsqueeze(1) * inv.unsqueeze(0)).view({1, 6, 1, 4});
  const auto a = x.narrow(-1, 0, 4), b = x.narrow(-1, 4, 4);
  const auto want = torch::cat({a * th.cos() - b * th.sin(), b * th.cos() + a * th.sin()}, -1);
  for (const auto* v : {"neox_fp32", "neox_w_tables", "complex_interleaved_fp32", "table_sliced_fp32"}) {
    INFO(v);
    CHECK(same_function(run("rope", v, in, ex), want));
  }
}

TEST_CASE("every variant of every family keeps the output contract under both policies", "[families][contract]") {
  // Small shapes so all twelve families run in a second; the working policy must return the
  // family's output dtype, the exact policy fp64, both with the reference's shape.
  const std::map<std::string, std::map<std::string, kcert::kernels::ParamValue>> small = {
      {"rmsnorm", {{"shape.tokens", std::int64_t{4}}, {"shape.hidden", std::int64_t{16}}}},
      {"residual_rmsnorm", {{"shape.tokens", std::int64_t{4}}, {"shape.hidden", std::int64_t{16}}}},
      {"layernorm", {{"shape.tokens", std::int64_t{4}}, {"shape.hidden", std::int64_t{16}}}},
      {"rope", {{"shape.tokens", std::int64_t{4}}, {"shape.heads", std::int64_t{2}}, {"shape.head_dim", std::int64_t{8}}}},
      {"qkv_rope", {{"shape.tokens", std::int64_t{4}}, {"shape.hidden", std::int64_t{32}}, {"shape.heads", std::int64_t{2}},
                    {"shape.kv_heads", std::int64_t{1}}, {"shape.head_dim", std::int64_t{8}}}},
      {"activation", {{"shape.tokens", std::int64_t{4}}}},
      {"linear", {{"shape.tokens", std::int64_t{4}}, {"shape.in_features", std::int64_t{32}}, {"shape.out_features", std::int64_t{8}}}},
      {"glu", {{"shape.tokens", std::int64_t{4}}, {"shape.hidden", std::int64_t{16}}, {"shape.intermediate", std::int64_t{24}}}},
      {"loss", {}},
      {"router", {{"shape.tokens", std::int64_t{8}}, {"shape.hidden", std::int64_t{16}}, {"shape.experts", std::int64_t{8}}}},
      {"attention", {{"shape.heads", std::int64_t{2}}, {"shape.kv_heads", std::int64_t{2}}, {"shape.tokens", std::int64_t{8}},
                     {"shape.head_dim", std::int64_t{8}}}},
      {"moe_combine", {}},
  };
  const auto w = Precision::working(kcert::stats::FloatFormat::bf16);
  const auto ex = Precision::exact();
  for (const auto& name : registry().family_names()) {
    REQUIRE(small.count(name) == 1);  // a new family gets a line here
    const auto& family = registry().family(name);
    auto p = probe(name, small.at(name));
    p.shift = 0.1;
    p.scale = 1.0;
    const auto in = inputs(name, p, 21);
    KernelInputs in64;
    for (const auto& [n, t] : in.tensors()) in64.set(n, t.is_floating_point() ? t.to(torch::kFloat64) : t);
    const auto out_dtype = kcert::numerics::to_dtype(family.output_format ? family.output_format(p) : p.dtype);
    std::vector<int64_t> shape;
    for (const auto& [vname, variant] : family.variants) {
      INFO(name << "/" << vname);
      if (!variant.unavailable.empty()) {
        // A kernel of a newer LibTorch: it says so instead of computing something else.
        CHECK_THROWS_WITH(run(name, vname, in, w), Catch::Contains("needs LibTorch"));
        continue;
      }
      const auto yw = run(name, vname, in, w);
      const auto y64 = run(name, vname, in64, ex);
      CHECK(yw.scalar_type() == out_dtype);
      CHECK(y64.scalar_type() == torch::kFloat64);
      CHECK(yw.sizes() == y64.sizes());
      CHECK(yw.size(0) == 1);
      if (shape.empty()) shape = yw.sizes().vec();
      CHECK(yw.sizes().vec() == shape);
      CHECK(torch::isfinite(y64).all().item<bool>());
    }
  }
}

// The probe behind `expected_on: {cpu_bf16_gemm_in_bf16: ...}` checked against the kernel of
// the canary #12: where the probe says the (k, n) layout accumulates in fp32, aten_matmul_w
// is bit-identical to the one-rounding fp32 GEMM (the catalog's measurement on oneDNN);
// where it says bf16, the two differ. A probe that read the wrong layout breaks this.
TEST_CASE("the bf16 GEMM probe says what the canary's ATen matmul does", "[families][linear][environment]") {
  const auto& layouts = kcert::numerics::cpu_bf16_gemm_accumulating_in_bf16();
  const bool kn_in_bf16 = std::find(layouts.begin(), layouts.end(), "matmul (k, n)") != layouts.end();
  INFO("layouts accumulating in bf16: " << layouts.size());
  const auto w = Precision::working(kcert::stats::FloatFormat::bf16);
  const auto p = probe("linear", {{"shape.tokens", std::int64_t{16}}, {"shape.in_features", std::int64_t{4096}},
                                  {"shape.out_features", std::int64_t{32}}});
  const auto in = inputs("linear", p, 12);
  const auto aten = run("linear", "aten_matmul_w", in, w).to(torch::kFloat64);
  const auto fp32 = run("linear", "fp32_no_bias", in, w).to(torch::kFloat64);
  CHECK(torch::equal(aten, fp32) == !kn_in_bf16);
  CHECK(kcert::numerics::expectation_conditions("cpu").size() == (layouts.empty() ? 1u : 2u));
  CHECK(kcert::numerics::expectation_conditions("cuda").size() == 1u);
}
