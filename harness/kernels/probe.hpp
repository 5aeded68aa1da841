#pragma once
// Probe building blocks shared by the families: seeded generators and the shifted-Gaussian
// activation law with outlier channels and per-row DC offsets.
#include <torch/torch.h>

#include <cstdint>

#include "harness/kernels/registry.hpp"
#include "harness/kernels/schema.hpp"

namespace kcert::kernels {

// A CPU generator seeded from a derived seed; inputs are always drawn on the CPU so that a
// replicate's values do not depend on the device.
at::Generator make_generator(std::uint64_t seed);

// Activations [rows, channels]: N(shift, scale²) per element; the outlier channels (every
// channels/count-th channel, starting at 0) have their deviation multiplied by
// outlier_magnitude; each row gets a DC offset N(0, row_offset_sd²). Drawn in fp32, then
// rounded to the contract's dtype.
torch::Tensor shifted_gaussian(const ProbeContract& probe, std::int64_t rows, std::int64_t channels,
                               at::Generator& gen);

// Outputs laid out [tokens, channels]: the "channel" axis buckets by the last index, "row"
// by the first. Shared by the families whose outputs have that shape.
torch::Tensor token_channel_bucket_ids(const std::string& axis, at::IntArrayRef output_shape);

// One replicate's activations x [tokens, channels], with the shape read from the named
// probe parameters.
KernelInputs token_channel_activations(const ProbeContract& probe, const std::string& tokens_param,
                                       const std::string& channels_param, std::uint64_t seed);

// An error at probe.outliers.count when it exceeds the named channel count.
std::optional<FieldError> check_outlier_count(const ProbeContract& probe, const std::string& channels_param);

// An error at probe.shape.kv_heads unless it divides probe.shape.heads (GQA families).
std::optional<FieldError> check_kv_heads(const ProbeContract& probe);

// Indices of the outlier channels, as shifted_gaussian places them.
std::vector<std::int64_t> outlier_channels(const ProbeContract& probe, std::int64_t channels);

}  // namespace kcert::kernels
