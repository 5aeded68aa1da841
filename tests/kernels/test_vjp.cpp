// The default backward (autograd through a variant's forward, harness/kernels/vjp.hpp) checked
// against central finite differences in fp64 — the gradcheck of issue 31 — on the real RMSNorm
// variants, and its error paths.
#include "tests/catch_torch.hpp"

#include <functional>

#include "harness/kernels/registry.hpp"
#include "harness/kernels/vjp.hpp"
#include "harness/numerics/precision.hpp"
#include "tests/kernels/builtin_registry.hpp"
#include "harness/stats/random.hpp"

using kcert::kernels::KernelInputs;
using kcert::kernels::ParamMap;
using kcert::numerics::Precision;

namespace {

const kcert::kernels::Registry& registry() { return kcert::test::builtin_registry(); }
ParamMap defaults(const kcert::kernels::Variant& v) { return kcert::test::default_params(v); }

// x [1, tokens, hidden] and w [hidden], W-representable (drawn in bf16), held in `dtype`.
KernelInputs rmsnorm_inputs(torch::Dtype dtype) {
  torch::manual_seed(7);
  KernelInputs in;
  in.set("x", (torch::randn({1, 3, 8}, torch::kFloat64) * 2.0 + 0.5).to(torch::kBFloat16).to(dtype));
  in.set("w", (1.0 + 0.1 * torch::randn({8}, torch::kFloat64)).to(torch::kBFloat16).to(dtype));
  return in;
}

// <dy, f(inputs with `name` moved by h·e_i)>, central differences, element by element.
torch::Tensor finite_difference_vjp(const kcert::kernels::Variant& v, const KernelInputs& in, const std::string& name,
                                    const ParamMap& params, const torch::Tensor& dy, double h) {
  const auto exact = Precision::exact();
  const auto base = in.at(name).contiguous();
  auto grad = torch::zeros_like(base);
  auto flat = grad.view({-1});
  torch::NoGradGuard no_grad;
  for (std::int64_t i = 0; i < base.numel(); ++i) {
    auto plus = base.clone(), minus = base.clone();
    plus.view({-1})[i] += h;
    minus.view({-1})[i] -= h;
    KernelInputs a = in, b = in;
    a.set(name, plus);
    b.set(name, minus);
    const double fp = (v.fn(a, exact, params) * dy).sum().item<double>();
    const double fm = (v.fn(b, exact, params) * dy).sum().item<double>();
    flat[i] = (fp - fm) / (2 * h);
  }
  return grad;
}

}  // namespace

TEST_CASE("autograd VJP of RMSNorm under the exact policy matches fp64 finite differences",
          "[kernels][backward]") {
  for (const std::string name : {"llama", "llama_recip_sqrt"}) {
    CAPTURE(name);
    const auto& v = registry().variant("rmsnorm", name);
    const auto params = defaults(v);
    const auto in = rmsnorm_inputs(torch::kFloat64);
    const auto dy = torch::randn({1, 3, 8}, torch::kFloat64);
    const auto g = kcert::kernels::autograd_vjp(v.fn, in, {"x", "w"}, Precision::exact(), params, dy);
    for (const std::string input : {"x", "w"}) {
      CAPTURE(input);
      REQUIRE(g.at(input).defined());
      CHECK(g.at(input).scalar_type() == torch::kFloat64);
      CHECK(g.at(input).sizes() == in.at(input).sizes());
      const auto fd = finite_difference_vjp(v, in, input, params, dy, 1e-6);
      const double err = (g.at(input) - fd).abs().max().item<double>();
      const double scale = fd.abs().max().item<double>();
      CHECK(err <= 1e-7 * scale);
    }
    // A wrong gradient is caught: the check above can fail (2 x dw is off by the whole dw).
    const auto fd_w = finite_difference_vjp(v, in, "w", params, dy, 1e-6);
    CHECK((2 * g.at("w") - fd_w).abs().max().item<double>() > 0.5 * fd_w.abs().max().item<double>());
  }
}

TEST_CASE("autograd VJP under the working policy carries the forward's dtypes and stays near the oracle",
          "[kernels][backward]") {
  const auto& v = registry().variant("rmsnorm", "llama");
  const auto params = defaults(v);
  const auto in = rmsnorm_inputs(torch::kBFloat16);
  const auto dy64 = torch::randn({1, 3, 8}, torch::kFloat64).to(torch::kBFloat16).to(torch::kFloat64);
  const auto working = kcert::kernels::autograd_vjp(v.fn, in, {"x", "w"}, Precision::working(kcert::stats::FloatFormat::bf16),
                                                    params, dy64.to(torch::kBFloat16));
  KernelInputs in64;
  for (const auto& [k, t] : in.tensors()) in64.set(k, t.to(torch::kFloat64));
  const auto oracle = kcert::kernels::autograd_vjp(v.fn, in64, {"x", "w"}, Precision::exact(), params, dy64);
  for (const std::string input : {"x", "w"}) {
    CAPTURE(input);
    CHECK(working.at(input).scalar_type() == torch::kBFloat16);  // the cast at the dtype boundary
    const auto diff = (working.at(input).to(torch::kFloat64) - oracle.at(input)).abs().max().item<double>();
    CHECK(diff <= 0.05 * oracle.at(input).abs().max().item<double>());  // a few bf16 ULP
  }
  // The caller's tensors are not turned into graph leaves.
  CHECK_FALSE(in.at("x").requires_grad());
}

TEST_CASE("autograd VJP names what is wrong and reports an unreached gradient as undefined",
          "[kernels][backward]") {
  const auto& v = registry().variant("rmsnorm", "llama");
  const auto params = defaults(v);
  auto in = rmsnorm_inputs(torch::kFloat64);
  const auto dy = torch::randn({1, 3, 8}, torch::kFloat64);
  const auto exact = Precision::exact();
  CHECK_THROWS_WITH(kcert::kernels::autograd_vjp(v.fn, in, {}, exact, params, dy),
                    Catch::Contains("no input to differentiate"));
  CHECK_THROWS_WITH(kcert::kernels::autograd_vjp(v.fn, in, {"b"}, exact, params, dy),
                    Catch::Contains("no input named 'b'"));
  CHECK_THROWS_WITH(kcert::kernels::autograd_vjp(v.fn, in, {"x"}, exact, params, torch::randn({1, 3, 7}, torch::kFloat64)),
                    Catch::Contains("dy has shape"));
  in.set("positions", torch::arange(3));
  CHECK_THROWS_WITH(kcert::kernels::autograd_vjp(v.fn, in, {"positions"}, exact, params, dy),
                    Catch::Contains("not floating"));
  in.set("unused", torch::randn({4}, torch::kFloat64));
  const auto g = kcert::kernels::autograd_vjp(v.fn, in, {"x", "unused"}, exact, params, dy);
  CHECK(g.at("x").defined());
  CHECK_FALSE(g.at("unused").defined());
}

TEST_CASE("explicit RMSNorm backwards under the exact policy are the fp64 VJP of their forward (finite differences)",
          "[kernels][backward]") {
  // Every replayed fused backward must, at fp64, compute its own function's VJP: the roundings
  // it replays are the only difference from the reference (the oracle's premise). missing_dw
  // gives no dW by design (BN7).
  for (const std::string name : {"liger_rowwise", "liger_block_dw_bf16", "saved_rstd_in_w", "dw_bf16_accumulator",
                                 "te_zero_centered_gamma", "missing_dw"}) {
    CAPTURE(name);
    const auto& v = registry().variant("rmsnorm", name);
    REQUIRE(v.backward);
    const auto params = defaults(v);
    const auto in = rmsnorm_inputs(torch::kFloat64);
    const auto dy = torch::randn({1, 3, 8}, torch::kFloat64);
    const auto g = kcert::kernels::variant_vjp(v, in, {"x", "w"}, Precision::exact(), params, dy);
    for (const std::string input : {"x", "w"}) {
      CAPTURE(input);
      if (name == "missing_dw" && input == "w") {
        CHECK_FALSE(g.at("w").defined());
        continue;
      }
      REQUIRE(g.at(input).defined());
      CHECK(g.at(input).sizes() == in.at(input).sizes());
      const auto fd = finite_difference_vjp(v, in, input, params, dy, 1e-6);
      CHECK((g.at(input) - fd).abs().max().item<double>() <= 1e-7 * fd.abs().max().item<double>());
    }
  }
}

TEST_CASE("explicit RMSNorm backwards at bf16 round where the replayed kernel does", "[kernels][backward]") {
  const auto bf16 = Precision::working(kcert::stats::FloatFormat::bf16);
  const auto in = rmsnorm_inputs(torch::kBFloat16);
  const auto dy = torch::randn({1, 3, 8}, torch::kFloat64).to(torch::kBFloat16);
  const auto grads = [&](const std::string& name) {
    const auto& v = registry().variant("rmsnorm", name);
    return kcert::kernels::variant_vjp(v, in, {"x", "w"}, bf16, defaults(v), dy);
  };
  const auto rowwise = grads("liger_rowwise");
  CHECK(rowwise.at("x").scalar_type() == torch::kBFloat16);
  CHECK(rowwise.at("w").scalar_type() == torch::kBFloat16);
  // dx is the same formula in the three row-wise replays; dW differs only where they round.
  CHECK(torch::equal(grads("liger_block_dw_bf16").at("x"), rowwise.at("x")));
  CHECK(torch::equal(grads("dw_bf16_accumulator").at("x"), rowwise.at("x")));
  CHECK_FALSE(torch::equal(grads("saved_rstd_in_w").at("x"), rowwise.at("x")));
}

namespace {

// The explicit backwards of `family` under the exact policy against central differences of
// their own forward, for each input in `wrt` (the same premise as RMSNorm's above).
void check_explicit_backwards(const std::string& family, const std::vector<std::string>& names, const KernelInputs& in,
                              const std::vector<std::string>& wrt, const torch::Tensor& dy,
                              const std::function<void(ParamMap&)>& adjust = {}) {
  for (const auto& name : names) {
    CAPTURE(family, name);
    const auto& v = registry().variant(family, name);
    REQUIRE(v.backward);
    auto params = defaults(v);
    if (adjust) adjust(params);
    const auto g = kcert::kernels::variant_vjp(v, in, wrt, Precision::exact(), params, dy);
    for (const auto& input : wrt) {
      CAPTURE(input);
      REQUIRE(g.count(input) == 1);
      REQUIRE(g.at(input).defined());
      CHECK(g.at(input).sizes() == in.at(input).sizes());
      const auto fd = finite_difference_vjp(v, in, input, params, dy, 1e-6);
      CHECK((g.at(input) - fd).abs().max().item<double>() <= 1e-7 * fd.abs().max().item<double>());
    }
  }
}

KernelInputs loss_inputs() {
  torch::manual_seed(11);
  KernelInputs in;
  in.set("z", (torch::randn({1, 4, 9}, torch::kFloat64) * 2.0).to(torch::kBFloat16).to(torch::kFloat64));
  in.set("t", torch::tensor({3, 0, 8, 5}, torch::kInt64).view({1, 4}));
  in.set("valid", torch::tensor({true, true, true, false}));
  in.set("microbatch", torch::zeros({4}, torch::kInt64));
  return in;
}

}  // namespace

TEST_CASE("explicit LayerNorm, RoPE and cross-entropy backwards are the fp64 VJP of their forward", "[kernels][backward]") {
  torch::manual_seed(5);
  KernelInputs ln;
  ln.set("x", (torch::randn({1, 3, 8}, torch::kFloat64) * 2.0 + 3.0).to(torch::kBFloat16).to(torch::kFloat64));
  ln.set("g", (1.0 + 0.1 * torch::randn({8}, torch::kFloat64)).to(torch::kBFloat16).to(torch::kFloat64));
  ln.set("b", (0.1 * torch::randn({8}, torch::kFloat64)).to(torch::kBFloat16).to(torch::kFloat64));
  check_explicit_backwards("layernorm", {"liger_partials", "llmc_dweight_bf16_atomic", "rocm_stats_truncated"}, ln,
                           {"x", "g", "b"}, torch::randn({1, 3, 8}, torch::kFloat64));

  KernelInputs rope;
  rope.set("x", torch::randn({1, 5, 2, 8}, torch::kFloat64).to(torch::kBFloat16).to(torch::kFloat64));
  rope.set("pos", torch::arange(3, 8, torch::kFloat64) * 17.0);
  check_explicit_backwards("rope", {"neox_bwd_inverse_rotation"}, rope, {"x"}, torch::randn({1, 5, 2, 8}, torch::kFloat64));

  // The target lane's read-modify-write, the W intermediate and CCE's filter only round or
  // skip at the working precision (BN16, BN17, BN22): at fp64 each is the VJP.
  check_explicit_backwards("loss", {"ce_bwd_one_store", "ce_bwd_from_online_lse", "ce_bwd_target_rmw_w",
                                    "ce_bwd_w_intermediate", "cce_bwd_filtered"},
                           loss_inputs(), {"z"}, torch::rand({1, 4}, torch::kFloat64) + 0.5);

  KernelInputs pre;
  pre.set("x", torch::randn({1, 3, 8}, torch::kFloat64));
  pre.set("r", torch::randn({1, 3, 8}, torch::kFloat64) * 2.0);
  pre.set("w", 1.0 + 0.1 * torch::randn({8}, torch::kFloat64));
  check_explicit_backwards("residual_rmsnorm", {"quack_prenorm_bwd"}, pre, {"x", "r", "w"},
                           torch::randn({1, 3, 16}, torch::kFloat64));

  KernelInputs lin;
  lin.set("x", torch::randn({1, 6, 5}, torch::kFloat64));
  lin.set("W", torch::randn({3, 5}, torch::kFloat64));
  check_explicit_backwards("linear", {"wgrad_chunked_w_accumulator", "wgrad_chunked_fp32_accumulator"}, lin, {"x", "W"},
                           torch::randn({1, 6, 3}, torch::kFloat64), [](ParamMap& p) { p.set("chunks", std::int64_t{4}); });
}

TEST_CASE("BN9's pre-norm backward is wrong exactly when the residual output has a gradient", "[kernels][backward]") {
  torch::manual_seed(3);
  KernelInputs in;
  in.set("x", torch::randn({1, 3, 8}, torch::kFloat64));
  in.set("r", torch::randn({1, 3, 8}, torch::kFloat64));
  in.set("w", 1.0 + 0.1 * torch::randn({8}, torch::kFloat64));
  const auto& before = registry().variant("residual_rmsnorm", "quack_prenorm_bwd_before_53");
  const auto& fixed = registry().variant("residual_rmsnorm", "quack_prenorm_bwd");
  auto dy = torch::randn({1, 3, 16}, torch::kFloat64);
  const auto grad = [&](const kcert::kernels::Variant& v, const torch::Tensor& d) {
    return kcert::kernels::variant_vjp(v, in, {"x"}, Precision::exact(), defaults(v), d).at("x");
  };
  CHECK((grad(before, dy) - grad(fixed, dy)).abs().max().item<double>() > 0.1);
  dy.narrow(-1, 0, 8).zero_();  // no gradient on the residual output h: the formulas agree
  CHECK((grad(before, dy) - grad(fixed, dy)).abs().max().item<double>() < 1e-12);
}

TEST_CASE("FlashAttention-2's replayed backward is the fp64 VJP of its forward, GQA and soft-cap included",
          "[kernels][backward]") {
  torch::manual_seed(9);
  KernelInputs in;
  // Two query heads on one kv head (GQA), five queries on seven keys (bottom-right causal),
  // key tiles of 2 so dQ sums over four tiles.
  in.set("q", torch::randn({1, 2, 5, 4}, torch::kFloat64) * 2.0);
  in.set("k", torch::randn({1, 1, 7, 4}, torch::kFloat64) * 2.0);
  in.set("v", torch::randn({1, 1, 7, 4}, torch::kFloat64));
  in.set("row_bias", torch::tensor(0.0, torch::kFloat64));
  const auto dy = torch::randn({1, 2, 5, 4}, torch::kFloat64);
  for (const double cap : {0.0, 3.0}) {
    CAPTURE(cap);
    check_explicit_backwards("attention", {"flash_bwd_fp32", "flash_bwd_fp32_atomic_order", "flash_bwd_softcap_recompute"},
                             in, {"q", "k", "v"}, dy, [cap](ParamMap& p) {
                               p.set("tile", std::int64_t{2});
                               p.set("softcap", cap);
                             });
  }
  // BN11: without the cap's derivative the backward is not its forward's VJP once the cap bites.
  const auto& unguarded = registry().variant("attention", "flash_bwd_softcap_unguarded");
  auto params = defaults(unguarded);
  params.set("softcap", 3.0);
  const auto g = kcert::kernels::variant_vjp(unguarded, in, {"q"}, Precision::exact(), params, dy).at("q");
  const auto fd = finite_difference_vjp(unguarded, in, "q", params, dy, 1e-6);
  CHECK((g - fd).abs().max().item<double>() > 0.01 * fd.abs().max().item<double>());
}

TEST_CASE("the replayed wrong backwards are wrong at fp64 (BN19, BN26)", "[kernels][backward]") {
  // BN19 scales every token by the first dy: not the VJP once dy varies between tokens.
  const auto in = loss_inputs();
  const auto dy = torch::tensor({0.5, 1.0, 1.5, 2.0}, torch::kFloat64).view({1, 4});
  const auto& scalar = registry().variant("loss", "ce_bwd_scalar_grad_output");
  const auto g = kcert::kernels::variant_vjp(scalar, in, {"z"}, Precision::exact(), defaults(scalar), dy).at("z");
  const auto fd = finite_difference_vjp(scalar, in, "z", defaults(scalar), dy, 1e-6);
  CHECK((g - fd).abs().max().item<double>() > 0.1 * fd.abs().max().item<double>());
  // The ignored token (valid false) gets no gradient, and the first token's is right.
  CHECK(g.select(1, 3).abs().max().item<double>() == 0.0);
  CHECK((g.select(1, 0) - fd.select(1, 0)).abs().max().item<double>() <= 1e-7);
  // BN26: no gradient at all.
  KernelInputs rope;
  rope.set("x", torch::randn({1, 5, 2, 8}, torch::kFloat64));
  rope.set("pos", torch::arange(5, torch::kFloat64));
  const auto& none = registry().variant("rope", "neox_no_backward");
  const auto r = kcert::kernels::variant_vjp(none, rope, {"x"}, Precision::exact(), defaults(none), torch::randn({1, 5, 2, 8}, torch::kFloat64));
  CHECK((r.count("x") == 0 || !r.at("x").defined()));
}
