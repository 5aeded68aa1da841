#pragma once
// Helpers shared by the two rotary families (rope, qkv_rope): the frequency table, the
// half-split rotation, the position probe and the (position, frequency pair) buckets.
#include "harness/numerics/torch_api.hpp"

#include <optional>
#include <string>
#include <vector>

#include "harness/kernels/registry.hpp"

namespace kcert::kernels::rotary {

// The variant parameter every rotary variant takes: the base theta.
extern const std::vector<ParamSpec> kBaseParam;
Variant variant(std::string name, std::string description, KernelFn fn);

// inv_freq_i = 1 / base^(2i/D), in the accumulation dtype.
torch::Tensor inverse_frequencies(const numerics::Precision& p, int64_t head_dim, double base, const torch::Tensor& like);
// Angles [tokens, D/2] = pos ⊗ inv_freq, in the accumulation dtype.
torch::Tensor angles(const torch::Tensor& pos, const torch::Tensor& inv);
// y = u·[cos, cos] + rotate_half(u)·[sin, sin] for x [B, T, H, D] and tables [T, D/2].
torch::Tensor rotate_half_split(const torch::Tensor& u, const torch::Tensor& cos, const torch::Tensor& sin);

// Positions pos_t = start + stride·t (probe parameters positions.start, positions.stride).
extern const std::vector<ParamSpec> kPositionParams;
// An even head dimension, and positions that stay exact integers in fp32.
std::optional<FieldError> check_rotary(const ProbeContract& probe);
// The fixed input "pos" [tokens]: exact integers held in fp64.
KernelInputs position_inputs(const ProbeContract& probe);
// Buckets of an output [tokens, heads, head_dim]: position_frequency (the default), position, head.
torch::Tensor bucket_ids(const std::string& axis, const ProbeContract& probe, at::IntArrayRef shape);

}  // namespace kcert::kernels::rotary
