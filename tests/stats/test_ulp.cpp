#include "kcert_catch.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "harness/stats/ulp.hpp"
#include "reference.hpp"

using kcert::stats::FloatFormat;
using kcert::stats::ulp_spacing;

namespace {
// Independent bf16 spacing: a bf16 number is the top 16 bits of an fp32; the next one up
// is the next 16-bit pattern. Valid for x exactly representable in bf16, x >= 0.
double bf16_gap_by_bits(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  REQUIRE((bits & 0xFFFFu) == 0u);  // x must be a bf16 value
  const auto next = std::bit_cast<float>(bits + 0x10000u);
  if (std::isinf(next)) {  // at the largest finite value, use the gap below
    return static_cast<double>(x) - static_cast<double>(std::bit_cast<float>(bits - 0x10000u));
  }
  return static_cast<double>(next) - static_cast<double>(x);
}
}  // namespace

TEST_CASE("ulp spacing is 2^(e-p+1) at powers of two", "[ulp]") {
  CHECK(ulp_spacing(1.0, FloatFormat::bf16) == std::ldexp(1.0, -7));
  CHECK(ulp_spacing(1.0, FloatFormat::fp16) == std::ldexp(1.0, -10));
  CHECK(ulp_spacing(1.0, FloatFormat::fp32) == std::ldexp(1.0, -23));
  CHECK(ulp_spacing(1.0, FloatFormat::fp64) == std::ldexp(1.0, -52));
  CHECK(ulp_spacing(2.0, FloatFormat::bf16) == std::ldexp(1.0, -6));
  // Just below a power of two the spacing is that of the lower binade.
  CHECK(ulp_spacing(std::nextafter(2.0, 0.0), FloatFormat::bf16) == std::ldexp(1.0, -7));
  CHECK(ulp_spacing(0.5, FloatFormat::bf16) == std::ldexp(1.0, -8));
  CHECK(ulp_spacing(-8.0, FloatFormat::bf16) == std::ldexp(1.0, -4));  // sign does not matter
}

TEST_CASE("ulp spacing of bf16 agrees with bit-level increments", "[ulp]") {
  for (int e = -126; e <= 127; e += 3) {
    for (float m : {1.0f, 1.0078125f, 1.5f, 1.9921875f}) {
      const float x = std::ldexp(m, e);
      INFO("x = " << x);
      CHECK(ulp_spacing(x, FloatFormat::bf16) == bf16_gap_by_bits(x));
    }
  }
  // Subnormal bf16 values share one spacing, 2^-133.
  for (float x : {std::ldexp(1.0f, -133), std::ldexp(1.0f, -130), std::ldexp(1.5f, -128)}) {
    CHECK(ulp_spacing(x, FloatFormat::bf16) == bf16_gap_by_bits(x));
    CHECK(ulp_spacing(x, FloatFormat::bf16) == std::ldexp(1.0, -133));
  }
}

TEST_CASE("ulp spacing at the largest finite value and beyond", "[ulp]") {
  const double bf16_max = kcert::stats::max_finite(FloatFormat::bf16);
  CHECK(bf16_max == 0x1.fep127);
  CHECK(ulp_spacing(bf16_max, FloatFormat::bf16) == std::ldexp(1.0, 120));
  CHECK(ulp_spacing(bf16_max, FloatFormat::bf16) == bf16_gap_by_bits(static_cast<float>(bf16_max)));
  CHECK(kcert::stats::max_finite(FloatFormat::fp16) == 65504.0);
  CHECK(ulp_spacing(65504.0, FloatFormat::fp16) == 32.0);
  CHECK(kcert::stats::max_finite(FloatFormat::fp64) == std::numeric_limits<double>::max());
  CHECK(ulp_spacing(std::numeric_limits<double>::max(), FloatFormat::fp64) == std::ldexp(1.0, 971));
  CHECK_THROWS_WITH(ulp_spacing(70000.0, FloatFormat::fp16), Catch::Contains("largest finite fp16"));
}

TEST_CASE("ulp spacing is defined at zero as the subnormal spacing", "[ulp]") {
  CHECK(ulp_spacing(0.0, FloatFormat::bf16) == std::ldexp(1.0, -133));
  CHECK(ulp_spacing(-0.0, FloatFormat::fp16) == std::ldexp(1.0, -24));
  CHECK(ulp_spacing(0.0, FloatFormat::fp32) == std::ldexp(1.0, -149));
  CHECK(ulp_spacing(0.0, FloatFormat::fp64) == std::numeric_limits<double>::denorm_min());
}

TEST_CASE("ulp spacing rejects NaN and infinities with a clear error", "[ulp]") {
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(ulp_spacing(std::nan(""), FloatFormat::bf16), Catch::Contains("NaN"));
  CHECK_THROWS_WITH(ulp_spacing(inf, FloatFormat::fp32), Catch::Contains("+inf"));
  CHECK_THROWS_WITH(ulp_spacing(-inf, FloatFormat::fp64), Catch::Contains("-inf"));
  CHECK_THROWS_AS(ulp_spacing(inf, FloatFormat::bf16), std::domain_error);
}

TEST_CASE("ulp spacing matches numpy.spacing for fp16 and fp32 and fp64", "[ulp][scipy]") {
  const auto& rows = kcert::test::stats_reference().at("ulp");
  REQUIRE(rows.size() >= 30);
  for (const auto& row : rows) {
    const auto format = kcert::stats::parse_format(row.at("format").get<std::string>());
    REQUIRE(format);
    const double x = row.at("x");
    INFO(row.at("format").get<std::string>() << " x = " << x);
    CHECK(ulp_spacing(x, *format) == row.at("spacing").get<double>());
  }
}

TEST_CASE("format names parse in their common spellings", "[ulp]") {
  CHECK(kcert::stats::parse_format("bfloat16") == FloatFormat::bf16);
  CHECK(kcert::stats::parse_format("half") == FloatFormat::fp16);
  CHECK(kcert::stats::parse_format("float32") == FloatFormat::fp32);
  CHECK(kcert::stats::parse_format("double") == FloatFormat::fp64);
  CHECK_FALSE(kcert::stats::parse_format("fp8"));
}
