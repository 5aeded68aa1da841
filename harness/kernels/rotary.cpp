#include "harness/kernels/rotary.hpp"

namespace kcert::kernels::rotary {

using numerics::Precision;

const std::vector<ParamSpec> kBaseParam = {
    param::number("base", 1e4).at_least(1).doc("RoPE base theta (1e4 Llama-2, 5e5 Llama-3)")};

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), kBaseParam, std::move(fn));
}

torch::Tensor inverse_frequencies(const Precision& p, int64_t head_dim, double base, const torch::Tensor& like) {
  const auto i = torch::arange(0, head_dim, 2, like.options().dtype(p.accumulation_dtype()));
  return 1.0 / torch::pow(base, i / static_cast<double>(head_dim));
}

torch::Tensor angles(const torch::Tensor& pos, const torch::Tensor& inv) { return pos.unsqueeze(1) * inv.unsqueeze(0); }

torch::Tensor rotate_half_split(const torch::Tensor& u, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto half = u.size(-1) / 2;
  const auto a = u.narrow(-1, 0, half), b = u.narrow(-1, half, half);
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // broadcast over heads
  return torch::cat({a * c - b * s, b * c + a * s}, -1);
}


const std::vector<ParamSpec> kPositionParams = {
    param::integer("positions.start", 1).at_least(0).doc("first position"),
    param::integer("positions.stride", 1).at_least(1).doc("distance between consecutive positions (probe long contexts without every position)"),
};

std::optional<FieldError> check_rotary(const ProbeContract& probe) {
  const auto dim = probe.params.integer("shape.head_dim");
  if (dim % 2 != 0) return FieldError{"probe.shape.head_dim", "expected an even head dimension, got " + std::to_string(dim)};
  // Checked arithmetic: stride · (tokens - 1) can wrap int64 (a huge stride made the bound
  // negative and passed, with undefined behaviour on the way).
  std::int64_t span = 0, last = 0;
  const bool wrapped =
      __builtin_mul_overflow(probe.params.integer("positions.stride"), probe.params.integer("shape.tokens") - 1, &span) ||
      __builtin_add_overflow(probe.params.integer("positions.start"), span, &last);
  if (wrapped || last >= (std::int64_t{1} << 24)) {
    return FieldError{"probe.positions.stride", "positions reach " + (wrapped ? std::string("beyond 2^63") : std::to_string(last)) +
                                                    ", beyond 2^24 (not exact in fp32)"};
  }
  return std::nullopt;
}

KernelInputs position_inputs(const ProbeContract& probe) {
  const auto tokens = probe.params.integer("shape.tokens");
  const auto start = probe.params.integer("positions.start");
  const auto stride = probe.params.integer("positions.stride");
  KernelInputs fixed;
  // Exact integers, held in fp64; kernels form positions with p.up(pos) (exact below 2^24).
  fixed.set("pos", torch::arange(tokens, torch::kFloat64) * static_cast<double>(stride) + static_cast<double>(start));
  return fixed;
}

torch::Tensor bucket_ids(const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
  const auto tokens = shape[0], heads = shape[1], dim = shape[2], half = dim / 2;
  const auto opts = torch::TensorOptions().dtype(torch::kInt64);
  const auto t = torch::arange(tokens, opts).view({tokens, 1, 1}).expand({tokens, heads, dim});
  if (axis == "position") return t.contiguous();
  if (axis == "head") return torch::arange(heads, opts).view({1, heads, 1}).expand({tokens, heads, dim}).contiguous();
  const auto pair = torch::remainder(torch::arange(dim, opts), half).view({1, 1, dim}).expand({tokens, heads, dim});
  return (t * half + pair).contiguous();
}

}  // namespace kcert::kernels::rotary
