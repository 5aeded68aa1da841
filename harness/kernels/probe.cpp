#include "harness/kernels/probe.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "harness/numerics/precision.hpp"

namespace kcert::kernels {

torch::Tensor InputStream::normal(at::IntArrayRef shape, torch::Dtype dtype) {
  auto out = torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat32));
  stream_.normal(out.data_ptr<float>(), static_cast<std::size_t>(out.numel()));
  return dtype == torch::kFloat32 ? out : out.to(dtype);
}

torch::Tensor InputStream::uniform(at::IntArrayRef shape) {
  auto out = torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat32));
  stream_.uniform(out.data_ptr<float>(), static_cast<std::size_t>(out.numel()));
  return out;
}

torch::Tensor InputStream::integers(std::int64_t bound, at::IntArrayRef shape) {
  auto out = torch::empty(shape, torch::TensorOptions().dtype(torch::kInt64));
  stream_.below(static_cast<std::uint64_t>(bound), out.data_ptr<std::int64_t>(), static_cast<std::size_t>(out.numel()));
  return out;
}

at::Generator make_generator(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

std::vector<std::int64_t> outlier_channels(const ProbeContract& probe, std::int64_t channels) {
  std::vector<std::int64_t> out;
  if (probe.outlier_count <= 0) return out;
  const std::int64_t stride = std::max<std::int64_t>(1, channels / probe.outlier_count);
  for (std::int64_t i = 0; i < probe.outlier_count && i * stride < channels; ++i) out.push_back(i * stride);
  return out;
}

torch::Tensor shifted_gaussian(const ProbeContract& probe, std::int64_t rows, std::int64_t channels,
                               InputStream& stream) {
  // Drawn in fp32: every working format is at most fp32-wide.
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  auto x = stream.normal({rows, channels});
  if (probe.outlier_count > 0 && probe.outlier_magnitude != 1.0) {
    auto column_scale = torch::ones({channels}, opts);
    for (auto c : outlier_channels(probe, channels)) column_scale[c] = probe.outlier_magnitude;
    x.mul_(column_scale);
  }
  if (probe.scale != 1.0) x.mul_(probe.scale);
  if (probe.shift != 0.0) x.add_(probe.shift);
  if (probe.row_offset_sd > 0.0) x.add_(stream.normal({rows, 1}) * probe.row_offset_sd);
  return x.to(numerics::to_dtype(probe.dtype));
}

torch::Tensor token_channel_bucket_ids(const std::string& axis, at::IntArrayRef shape) {
  const auto tokens = shape[0], channels = shape[1];
  const auto opts = torch::TensorOptions().dtype(torch::kInt64);
  if (axis == "channel") return torch::arange(channels, opts).expand({tokens, channels}).contiguous();
  return torch::arange(tokens, opts).unsqueeze(1).expand({tokens, channels}).contiguous();  // row
}

torch::Tensor element_bucket_ids(at::IntArrayRef shape) {
  return torch::arange(shape.empty() ? 1 : shape.back(), torch::kInt64).reshape(shape);
}

torch::Tensor matrix_bucket_ids(const std::string& axis, at::IntArrayRef shape) {
  return token_channel_bucket_ids(axis == "column" ? "channel" : "row", shape);
}

Family::Gradient input_gradient(GradientSchema schema, GradientBuckets bucket_ids) {
  Family::Gradient g;
  g.schema = std::move(schema);
  g.bucket_ids = std::move(bucket_ids);
  g.reduction_size = [](const ProbeContract&) -> std::int64_t { return 0; };
  return g;
}

Family::Gradient weight_gradient(GradientSchema schema, GradientBuckets bucket_ids, std::string reduction_param) {
  Family::Gradient g;
  g.schema = std::move(schema);
  g.bucket_ids = std::move(bucket_ids);
  g.reduction_size = [param = std::move(reduction_param)](const ProbeContract& probe) { return probe.params.integer(param); };
  return g;
}

GradientBuckets token_channel_buckets(std::string row_axis) {
  return [row_axis = std::move(row_axis)](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis == row_axis ? "row" : axis, shape);
  };
}

GradientBuckets element_buckets() {
  return [](const std::string&, const ProbeContract&, at::IntArrayRef shape) { return element_bucket_ids(shape); };
}

GradientBuckets matrix_buckets() {
  return [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) { return matrix_bucket_ids(axis, shape); };
}

KernelInputs token_channel_activations(const ProbeContract& probe, const std::string& tokens_param,
                                       const std::string& channels_param, std::uint64_t seed) {
  InputStream stream(seed);
  KernelInputs in;
  in.set("x", shifted_gaussian(probe, probe.params.integer(tokens_param), probe.params.integer(channels_param), stream));
  return in;
}

std::optional<FieldError> check_outlier_count(const ProbeContract& probe, const std::string& channels_param) {
  const auto channels = probe.params.integer(channels_param);
  if (probe.outlier_count <= channels) return std::nullopt;
  return FieldError{"probe.outliers.count", "expected at most probe." + channels_param + " = " + std::to_string(channels) +
                                                " outlier channels, got " + std::to_string(probe.outlier_count)};
}

std::optional<FieldError> check_kv_heads(const ProbeContract& probe) {
  if (probe.params.integer("shape.heads") % probe.params.integer("shape.kv_heads") == 0) return std::nullopt;
  return FieldError{"probe.shape.kv_heads", "expected a divisor of probe.shape.heads"};
}

}  // namespace kcert::kernels
