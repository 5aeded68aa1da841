#pragma once
// True ULP spacing of the working formats (method.md §3: "a real nextafter spacing,
// subnormals included — not eps·scale").
#include <optional>
#include <string_view>

namespace kcert::stats {

enum class FloatFormat { bf16, fp16, fp32, fp64 };

struct FormatTraits {
  std::string_view name;
  int precision;     // significand bits including the implicit one (p)
  int min_exponent;  // exponent of the smallest normal number, 2^emin
  int max_exponent;  // exponent of the largest binade, 2^emax
};

FormatTraits traits(FloatFormat format);

// Accepts "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp32"/"float32"/"float",
// "fp64"/"float64"/"double".
std::optional<FloatFormat> parse_format(std::string_view name);

// Largest finite value of the format: (2 - 2^(1-p)) * 2^emax.
double max_finite(FloatFormat format);

// Smallest positive normal number 2^emin.
double min_normal(FloatFormat format);

// Spacing of representable numbers of `format` in the binade that contains |x|:
// 2^(e-p+1) with e = floor(log2|x|) for normal |x|; the (constant) subnormal spacing
// 2^(emin-p+1) below the normal range, which is also the value defined at x = 0 (the gap
// from 0 to the smallest subnormal). Throws std::domain_error for NaN, ±inf and values
// beyond the format's largest finite number.
double ulp_spacing(double x, FloatFormat format);

}  // namespace kcert::stats
