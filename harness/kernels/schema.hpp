#pragma once
// What a test case may say about a family and its variants: parameter declarations and
// the probe contract. Torch-free, so the YAML loader does not pay for LibTorch headers.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "harness/stats/ulp.hpp"

namespace kcert::kernels {

enum class ParamType { integer, number, boolean, string, number_list };
std::string_view describe(ParamType t);  // "an integer", "a number", ...

using ParamValue = std::variant<std::int64_t, double, bool, std::string, std::vector<double>>;
std::string format_value(const ParamValue& v);

struct ParamSpec {
  std::string name;  // dotted inside probe ("shape.tokens"), plain for variant params ("eps")
  ParamType type = ParamType::number;
  std::optional<ParamValue> default_value;  // none: required
  std::optional<double> min;                // inclusive, for integer/number
  std::optional<double> max;                // inclusive
  std::vector<std::string> choices;         // for strings
  std::string description;

  // Refinements for the named builders in kernels::param.
  ParamSpec at_least(double v) const { return with([&](ParamSpec& p) { p.min = v; }); }
  ParamSpec at_most(double v) const { return with([&](ParamSpec& p) { p.max = v; }); }
  ParamSpec one_of(std::vector<std::string> c) const { return with([&](ParamSpec& p) { p.choices = std::move(c); }); }
  ParamSpec doc(std::string d) const { return with([&](ParamSpec& p) { p.description = std::move(d); }); }

 private:
  template <class F>
  ParamSpec with(F&& f) const {
    ParamSpec copy = *this;
    f(copy);
    return copy;
  }
};

// Named builders, so that a family's parameter table reads like a table:
//   param::integer("shape.tokens", 256).at_least(1).doc("positions per replicate")
// A builder without a default declares a required parameter.
namespace param {
inline ParamSpec make(std::string name, ParamType type, std::optional<ParamValue> d) {
  ParamSpec p;
  p.name = std::move(name);
  p.type = type;
  p.default_value = std::move(d);
  return p;
}
inline ParamSpec integer(std::string name) { return make(std::move(name), ParamType::integer, std::nullopt); }
inline ParamSpec integer(std::string name, std::int64_t d) { return make(std::move(name), ParamType::integer, ParamValue{d}); }
inline ParamSpec number(std::string name) { return make(std::move(name), ParamType::number, std::nullopt); }
inline ParamSpec number(std::string name, double d) { return make(std::move(name), ParamType::number, ParamValue{d}); }
inline ParamSpec flag(std::string name, bool d) { return make(std::move(name), ParamType::boolean, ParamValue{d}); }
inline ParamSpec text(std::string name) { return make(std::move(name), ParamType::string, std::nullopt); }
inline ParamSpec text(std::string name, std::string d) { return make(std::move(name), ParamType::string, ParamValue{std::move(d)}); }
inline ParamSpec number_list(std::string name, std::vector<double> d) {
  return make(std::move(name), ParamType::number_list, ParamValue{std::move(d)});
}
}  // namespace param

// Named parameter values, validated against ParamSpecs by the loader.
class ParamMap {
 public:
  void set(const std::string& name, ParamValue value) { values_[name] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  // Throw std::out_of_range naming the parameter when it is missing or of another type.
  std::int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;  // an integer value is accepted
  bool boolean(const std::string& name) const;
  const std::string& string(const std::string& name) const;
  const std::vector<double>& number_list(const std::string& name) const;
  const std::map<std::string, ParamValue>& values() const { return values_; }

 private:
  const ParamValue& get(const std::string& name) const;
  std::map<std::string, ParamValue> values_;
};

// The probe contract of a test case (architecture.md: shapes, dtype, shift, scale,
// outliers, per-row offsets, masks, seed). The generic fields apply to the family's
// activation input; `params` holds the family-declared ones (shapes, weight laws, masks).
struct ProbeContract {
  stats::FloatFormat dtype = stats::FloatFormat::bf16;
  std::uint64_t seed = 1;
  double shift = 0.1;              // m: the DC shift of the Gaussian activations
  double scale = 1.0;              // sd of the activations
  std::int64_t outlier_count = 0;  // channels whose scale is multiplied by outlier_magnitude
  double outlier_magnitude = 1.0;
  double row_offset_sd = 0.0;      // sd of a per-row DC offset, drawn per replicate and row
  ParamMap params;
};

// A problem with one field, for the loader to report with its file position.
struct FieldError {
  std::string field;    // dotted path from the document root, e.g. "probe.outliers.count"
  std::string message;  // "expected at most 256 (probe.shape.hidden), got 300"
};

struct VariantSchema {
  std::string name;
  std::string version;
  std::string description;
  std::vector<ParamSpec> params;
  std::string origin = "builtin";  // or the plugin's name; its version is then recorded as is
  // Whether the variant has an exact mode: under the exact policy it computes its real
  // function in fp64. false for an opaque production (a Triton or CUDA kernel, docs/python.md):
  // it runs only at the working precision, its algebra gate is not applicable, and it cannot
  // be a reference (the reference's exact run is the oracle).
  bool exact = true;
};

// A gradient a family's backward can be certified on (issue 31): the VJP with respect to one
// named input. `reduces` names what the gradient sums over within one replicate (a weight's
// gradient sums over the replicate's tokens: the reduction size N is part of the claim), empty
// for a gradient with the input's own shape per replicate (dx).
struct GradientSchema {
  std::string name;                      // dx, dw, ...
  std::string input;                     // the input it differentiates with respect to
  std::vector<std::string> bucket_axes;  // the first is the default
  std::string reduces;                   // e.g. "tokens"; "" for a per-replicate input's gradient
  std::string description;
};

struct FamilySchema {
  std::string name;
  std::string description;
  std::vector<std::string> bucket_axes;   // the first is the default
  std::vector<GradientSchema> gradients;  // empty: the family has no backward yet
  std::vector<ParamSpec> probe_params;    // dotted names under probe:
  std::map<std::string, VariantSchema> variants;
  // Checks the contract as a whole ("impossible shapes"); nullopt when it is fine.
  std::function<std::optional<FieldError>(const ProbeContract&)> validate_probe;
};

}  // namespace kcert::kernels
