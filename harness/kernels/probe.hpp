#pragma once
// Probe building blocks shared by the families: the seeded input stream and the
// shifted-Gaussian activation law with outlier channels and per-row DC offsets.
#include "harness/numerics/torch_api.hpp"

#include <cstdint>
#include <functional>

#include "harness/kernels/registry.hpp"
#include "harness/kernels/schema.hpp"
#include "harness/stats/random_stream.hpp"

namespace kcert::kernels {

// Tensors drawn from kcert's input stream (harness/stats/random_stream.hpp: Philox4x32-10 and
// a Box-Muller transform of kcert's own, exact to the bit): the same seed gives the same
// inputs on every CPU, instruction set, thread count, device and LibTorch release. Drawn on
// the CPU; each draw starts on a fresh group of 64 values, so a tensor's values depend on the
// seed and the sizes of the draws before it, in order.
class InputStream {
 public:
  explicit InputStream(std::uint64_t seed) : stream_(seed) {}
  // N(0, 1) in fp32 (values are fp32 numbers whatever dtype is asked for).
  torch::Tensor normal(at::IntArrayRef shape, torch::Dtype dtype = torch::kFloat32);
  // Uniform on [0, 1), fp32, on a 2^-24 grid.
  torch::Tensor uniform(at::IntArrayRef shape);
  // Uniform integers in [0, bound), int64.
  torch::Tensor integers(std::int64_t bound, at::IntArrayRef shape);

 private:
  stats::RandomStream stream_;
};

// ATen's CPU generator seeded from a derived seed. kcert's families draw from InputStream
// instead: ATen's normal sampler gives other values on a CPU without AVX2 and may change
// between LibTorch releases. Kept for plugins written against it.
at::Generator make_generator(std::uint64_t seed);

// Activations [rows, channels]: N(shift, scale²) per element; the outlier channels (every
// channels/count-th channel, starting at 0) have their deviation multiplied by
// outlier_magnitude; each row gets a DC offset N(0, row_offset_sd²). Drawn in fp32, then
// rounded to the contract's dtype.
torch::Tensor shifted_gaussian(const ProbeContract& probe, std::int64_t rows, std::int64_t channels,
                               InputStream& stream);

// Outputs laid out [tokens, channels]: the "channel" axis buckets by the last index, "row"
// by the first. Shared by the families whose outputs have that shape.
torch::Tensor token_channel_bucket_ids(const std::string& axis, at::IntArrayRef output_shape);

// Buckets of a weight's gradient (issue 31). A vector [n]: one bucket per element. A matrix
// [rows, cols]: "column" buckets by the column, any other axis ("row", "expert") by the row.
torch::Tensor element_bucket_ids(at::IntArrayRef shape);
torch::Tensor matrix_bucket_ids(const std::string& axis, at::IntArrayRef shape);

// A family's gradient declarations (issue 31). input_gradient: of a per-replicate input, in its
// shape, nothing summed within a replicate (N = 0). weight_gradient: of a fixed weight, a sum
// over the replicate's `reduction_param` (N is that probe parameter, e.g. shape.tokens).
using GradientBuckets = std::function<torch::Tensor(const std::string& axis, const ProbeContract&, at::IntArrayRef shape)>;
Family::Gradient input_gradient(GradientSchema schema, GradientBuckets bucket_ids);
Family::Gradient weight_gradient(GradientSchema schema, GradientBuckets bucket_ids, std::string reduction_param);
// The same bucket rules as GradientBuckets: [tokens, channels] gradients (token_channel_bucket_ids,
// `row_axis` read as "row"), a weight vector's elements, a weight matrix's rows or columns.
GradientBuckets token_channel_buckets(std::string row_axis = "row");
GradientBuckets element_buckets();
GradientBuckets matrix_buckets();

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
