// The default backward (autograd through a variant's forward, harness/kernels/vjp.hpp) checked
// against central finite differences in fp64 — the gradcheck of issue 31 — on the real RMSNorm
// variants, and its error paths.
#include "tests/catch_torch.hpp"

#include "harness/kernels/registry.hpp"
#include "harness/kernels/vjp.hpp"
#include "harness/numerics/precision.hpp"
#include "harness/stats/random.hpp"

using kcert::kernels::KernelInputs;
using kcert::kernels::ParamMap;
using kcert::numerics::Precision;

namespace {

const kcert::kernels::Registry& registry() {
  static const auto r = [] {
    kcert::kernels::Registry reg;
    kcert::kernels::register_builtin_families(reg);
    return reg;
  }();
  return r;
}

ParamMap defaults(const kcert::kernels::Variant& v) {
  ParamMap params;
  for (const auto& spec : v.schema.params)
    if (spec.default_value) params.set(spec.name, *spec.default_value);
  return params;
}

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
