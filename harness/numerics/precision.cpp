#include "harness/numerics/precision.hpp"

#include <stdexcept>

namespace kcert::numerics {

torch::Dtype to_dtype(stats::FloatFormat format) {
  switch (format) {
    case stats::FloatFormat::bf16: return torch::kBFloat16;
    case stats::FloatFormat::fp16: return torch::kFloat16;
    case stats::FloatFormat::fp32: return torch::kFloat32;
    case stats::FloatFormat::fp64: return torch::kFloat64;
  }
  throw std::invalid_argument("to_dtype: unknown format");
}

Precision Precision::working(stats::FloatFormat format) {
  const auto w = to_dtype(format);
  const auto acc = format == stats::FloatFormat::fp64 ? torch::kFloat64 : torch::kFloat32;
  return Precision(w, acc, format, false);
}

Precision Precision::exact() {
  return Precision(torch::kFloat64, torch::kFloat64, stats::FloatFormat::fp64, true);
}

Precision Precision::exact_flipping_near_ties(stats::FloatFormat working) {
  auto p = exact();
  p.near_tie_working_ = working;
  return p;
}

Precision Precision::exact_noting_near_ties(stats::FloatFormat working, std::shared_ptr<NearTieNotes> notes) {
  if (!notes) throw std::invalid_argument("exact_noting_near_ties: no notes to write to");
  auto p = exact();
  p.near_tie_working_ = working;
  p.near_tie_notes_ = std::move(notes);
  return p;
}

std::string Precision::name() const {
  if (exact_ && near_tie_notes_) return "exact(fp64, near ties noted)";
  if (exact_) return near_tie_working_ ? "exact(fp64, near ties flipped)" : "exact(fp64)";
  return std::string(stats::traits(format_).name) + "/acc " +
         (accumulation_ == torch::kFloat64 ? "fp64" : "fp32");
}

torch::Tensor Precision::round_w(const torch::Tensor& t) const {
  if (exact_) return t.to(torch::kFloat64);
  return t.to(working_);
}

torch::Tensor Precision::up(const torch::Tensor& t) const { return t.to(accumulation_); }

torch::Tensor Precision::trunc_w(const torch::Tensor& t) const {
  if (exact_) return t.to(torch::kFloat64);
  if (working_ == torch::kBFloat16) {
    // bf16 is the top half of an fp32: clearing the low 16 bits rounds toward zero, and
    // the masked value converts to bf16 exactly.
    const auto f = t.to(torch::kFloat32).contiguous();
    const auto bits = f.view(torch::kInt32).bitwise_and(static_cast<int32_t>(0xFFFF0000u));
    return bits.view(torch::kFloat32).to(torch::kBFloat16);
  }
  if (working_ != torch::kFloat32) {
    throw std::invalid_argument("Precision::trunc_w: round-toward-zero is implemented for bf16 and fp32 working dtypes, not " +
                                std::string(stats::traits(format_).name));
  }
  // fp32: round to nearest, then step one representable number toward zero wherever that
  // overshot |t|.
  const auto src = t.to(torch::kFloat64);
  const auto rounded = src.to(torch::kFloat32);
  const auto overshoot = rounded.to(torch::kFloat64).abs() > src.abs();
  return torch::where(overshoot, torch::nextafter(rounded, torch::zeros_like(rounded)), rounded);
}

torch::Tensor Precision::tf32(const torch::Tensor& t) const {
  if (exact_) return t.to(torch::kFloat64);
  const auto f = t.to(torch::kFloat32).contiguous();
  // Add half of the dropped 13 bits' range, then clear them: nearest, ties away from zero
  // (sign-magnitude encoding makes the integer add symmetric in sign).
  const auto bits = f.view(torch::kInt32).add(0x1000).bitwise_and(static_cast<int32_t>(0xFFFFE000u));
  return bits.view(torch::kFloat32);
}

double Precision::constant_w(double v) const {
  if (exact_) return v;
  return torch::scalar_tensor(v, torch::kFloat64).to(working_).to(torch::kFloat64).item<double>();
}

}  // namespace kcert::numerics
