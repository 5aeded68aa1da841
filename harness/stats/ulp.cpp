#include "harness/stats/ulp.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace kcert::stats {

FormatTraits traits(FloatFormat format) {
  switch (format) {
    case FloatFormat::bf16: return {"bf16", 8, -126, 127};
    case FloatFormat::fp16: return {"fp16", 11, -14, 15};
    case FloatFormat::fp32: return {"fp32", 24, -126, 127};
    case FloatFormat::fp64: return {"fp64", 53, -1022, 1023};
  }
  throw std::invalid_argument("traits: unknown FloatFormat");
}

std::optional<FloatFormat> parse_format(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return FloatFormat::bf16;
  if (name == "fp16" || name == "float16" || name == "half") return FloatFormat::fp16;
  if (name == "fp32" || name == "float32" || name == "float") return FloatFormat::fp32;
  if (name == "fp64" || name == "float64" || name == "double") return FloatFormat::fp64;
  return std::nullopt;
}

double max_finite(FloatFormat format) {
  const auto t = traits(format);
  // (2 - 2^(1-p)) * 2^emax, written so that fp64 does not overflow on the way.
  return std::ldexp(2.0 - std::ldexp(1.0, 1 - t.precision), t.max_exponent);
}

double min_normal(FloatFormat format) { return std::ldexp(1.0, traits(format).min_exponent); }

double ulp_spacing(double x, FloatFormat format) {
  const auto t = traits(format);
  if (std::isnan(x)) {
    throw std::domain_error("ulp_spacing: x must be a finite number, got NaN");
  }
  if (std::isinf(x)) {
    throw std::domain_error(std::string("ulp_spacing: x must be finite, got ") +
                            (x > 0 ? "+inf" : "-inf"));
  }
  const double a = std::fabs(x);
  if (a > max_finite(format)) {
    throw std::domain_error("ulp_spacing: |x| = " + std::to_string(a) +
                            " lies beyond the largest finite " + std::string(t.name) +
                            " value " + std::to_string(max_finite(format)));
  }
  if (a < min_normal(format)) {
    return std::ldexp(1.0, t.min_exponent - t.precision + 1);
  }
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1), so floor(log2 a) = e - 1
  return std::ldexp(1.0, (e - 1) - t.precision + 1);
}

}  // namespace kcert::stats
