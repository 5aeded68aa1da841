#include "tests/catch_torch.hpp"

#include <cmath>

#include "harness/numerics/precision.hpp"

using kcert::numerics::Precision;
using kcert::stats::FloatFormat;

namespace {
double value(const torch::Tensor& t, int64_t i) { return t.to(torch::kFloat64)[i].item<double>(); }
torch::Tensor f32(std::vector<float> v) { return torch::tensor(v, torch::kFloat32); }
}  // namespace

TEST_CASE("round_w rounds to nearest even in the working dtype", "[precision]") {
  const auto p = Precision::working(FloatFormat::bf16);
  // bf16 spacing on [1, 2) is 2^-7: 1 + 2^-8 is a tie and goes to the even 1.0;
  // 1 + 3·2^-8 is a tie between 1 + 2^-7 and 1 + 2^-6 and goes to the even 1 + 2^-6.
  const auto r = p.round_w(f32({1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-12f}));
  CHECK(r.scalar_type() == torch::kBFloat16);
  CHECK(value(r, 0) == 1.0);
  CHECK(value(r, 1) == 1.0 + 0x1p-6);
  CHECK(value(r, 2) == 1.0 + 0x1p-7);  // above the tie: up
}

TEST_CASE("trunc_w rounds toward zero in bf16 and fp32", "[precision]") {
  const auto p = Precision::working(FloatFormat::bf16);
  const auto r = p.trunc_w(f32({1.0f + 0x1p-7f - 0x1p-20f, -(1.0f + 0x1p-7f - 0x1p-20f), 1.5f, 3.0f + 0x1p-6f - 0x1p-12f}));
  CHECK(value(r, 0) == 1.0);
  CHECK(value(r, 1) == -1.0);
  CHECK(value(r, 2) == 1.5);                 // representable values are unchanged
  CHECK(value(r, 3) == 3.0);                 // nearest would be 3 + 2^-6 (spacing on [2, 4))
  const auto p32 = Precision::working(FloatFormat::fp32);
  const auto x = torch::tensor({1.0 + 0x1p-24 + 0x1p-30, -(1.0 + 0x1p-23 * 0.75)}, torch::kFloat64);
  const auto t32 = p32.trunc_w(x);
  CHECK(t32.scalar_type() == torch::kFloat32);
  CHECK(value(t32, 0) == 1.0);
  CHECK(value(t32, 1) == -1.0);
}

TEST_CASE("tf32 keeps 10 mantissa bits, rounding ties away from zero", "[precision]") {
  const auto p = Precision::working(FloatFormat::bf16);
  const auto r = p.tf32(f32({1.0f + 0x1p-11f, -(1.0f + 0x1p-11f), 1.0f + 0x1p-12f, 1.0f + 0x1p-10f}));
  CHECK(r.scalar_type() == torch::kFloat32);
  CHECK(value(r, 0) == 1.0 + 0x1p-10);     // tie: away from zero
  CHECK(value(r, 1) == -(1.0 + 0x1p-10));
  CHECK(value(r, 2) == 1.0);
  CHECK(value(r, 3) == 1.0 + 0x1p-10);     // representable
}

TEST_CASE("the exact policy turns every policy operation into the identity in fp64", "[precision]") {
  const auto p = Precision::exact();
  CHECK(p.is_exact());
  const auto x = torch::tensor({1.0 + 1e-12, -3.14159265358979, 1e-300}, torch::kFloat64);
  for (const auto& y : {p.round_w(x), p.trunc_w(x), p.tf32(x), p.up(x)}) {
    CHECK(y.scalar_type() == torch::kFloat64);
    CHECK(torch::equal(y, x));
  }
  CHECK(p.constant_w(std::sqrt(3072.0)) == std::sqrt(3072.0));
}

TEST_CASE("constant_w builds a constant as a W kernel would", "[precision]") {
  // Gemma's normalizer sqrt(3072) = 55.4256... becomes 55.5 in bf16 (G2 in the catalog).
  CHECK(Precision::working(FloatFormat::bf16).constant_w(std::sqrt(3072.0)) == 55.5);
  CHECK(Precision::working(FloatFormat::fp32).constant_w(0.1) == static_cast<double>(0.1f));
}

TEST_CASE("the working policy accumulates in fp32 and names itself", "[precision]") {
  const auto p = Precision::working(FloatFormat::fp16);
  CHECK(p.working_dtype() == torch::kFloat16);
  CHECK(p.accumulation_dtype() == torch::kFloat32);
  CHECK(p.up(torch::ones({2}, torch::kFloat16)).scalar_type() == torch::kFloat32);
  CHECK(p.name() == "fp16/acc fp32");
  CHECK_THROWS_WITH(p.trunc_w(torch::ones({1})), Catch::Contains("bf16 and fp32"));
}
