#pragma once
// Operator families and their kernel variants, registered by name. The engine sees kernels
// only through this interface; kernels know nothing of gates, YAML or databases.
#include "harness/numerics/torch_api.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/kernels/schema.hpp"
#include "harness/numerics/precision.hpp"

namespace kcert::kernels {

// Named input tensors. Per-replicate inputs carry a leading batch dimension (one slice
// per replicate); fixed inputs (weights, tables) do not.
class KernelInputs {
 public:
  void set(const std::string& name, torch::Tensor t) { tensors_[name] = std::move(t); }
  // Throws std::out_of_range naming the input when it is missing.
  const torch::Tensor& at(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const std::map<std::string, torch::Tensor>& tensors() const { return tensors_; }

 private:
  std::map<std::string, torch::Tensor> tensors_;
};

// A variant: a pure function of (inputs, precision policy, its parameters). Under the
// working policy it returns a W-valued tensor, under the exact policy an fp64 one, with
// the inputs' leading batch dimension.
using KernelFn = std::function<torch::Tensor(const KernelInputs&, const numerics::Precision&, const ParamMap&)>;

// Gradients by input name (a VJP's result).
using Gradients = std::map<std::string, torch::Tensor>;

// An explicit backward: the VJP dyᵀ·∂f/∂input for each input named in `wrt`, written as a policy
// function with round_w where the real kernel rounds (a fused backward's dW partials, a
// recomputed activation). Under the exact policy it must compute the fp64 VJP of the variant's
// own real function. An input whose gradient the kernel does not produce maps to an undefined
// tensor (a missing gradient: the algebra gate fails it).
using BackwardFn = std::function<Gradients(const KernelInputs&, const numerics::Precision&, const ParamMap&,
                                           const torch::Tensor& dy, const std::vector<std::string>& wrt)>;

struct Variant {
  VariantSchema schema;  // name, version, description, parameters
  KernelFn fn;
  // Empty: the backward is autograd through `fn` under the same policy (kernels/vjp.hpp), the
  // eager reference's backward.
  BackwardFn backward;
  // Why this build cannot run the variant (a kernel that only a newer LibTorch has), or
  // empty. A case naming such a variant still loads and validates; the run skips it with
  // this reason, and the result says SKIP, never PASS.
  std::string unavailable;
  // In a row-separable family (Family::row_separable): the family vouches that this variant
  // computes each output row from the same input row alone, so the engine may evaluate it block
  // by block (engine/row_blocks.hpp). Opt-in, set by a family for its own built-in variants: a
  // variant added otherwise (a test's, a plugin's) is evaluated whole. Left unset for a kernel
  // that makes an operator call per column (a sequential accumulator), whose calls the blocks
  // would multiply (N4's ran 9x slower in blocks).
  bool in_row_blocks = false;
};

// The kernel version every variant shipped with kcert records.
inline constexpr const char* kBuiltinVersion = "kcert-builtin/1";

inline Variant builtin_variant(std::string name, std::string description, std::vector<ParamSpec> params, KernelFn fn) {
  return Variant{VariantSchema{std::move(name), kBuiltinVersion, std::move(description), std::move(params)}, std::move(fn), {}, {}};
}

struct Family {
  std::string name;
  std::string description;
  std::vector<std::string> bucket_axes;  // the first is the default
  std::vector<ParamSpec> probe_params;
  std::function<std::optional<FieldError>(const ProbeContract&)> validate_probe;
  // Fixed inputs of a case (weights, tables): drawn once from `seed`, rounded to W.
  std::function<KernelInputs(const ProbeContract&, std::uint64_t seed)> make_fixed;
  // One replicate's inputs, unbatched, drawn from the replicate's own seed, rounded to W.
  std::function<KernelInputs(const ProbeContract&, const KernelInputs& fixed, std::uint64_t seed)> make_replicate;
  // The bucket of every output element (output shape without the batch dimension), as an
  // int64 tensor of that shape with values in [0, bucket count).
  std::function<torch::Tensor(const std::string& axis, const ProbeContract&, at::IntArrayRef output_shape)> bucket_ids;
  std::map<std::string, Variant> variants;
  // The format of the outputs when it is not the probe's dtype (e.g. a loss whose contract
  // is fp32 per-token values computed from bf16 logits). ULPs, ε and the assert_close
  // tolerances are taken in this format; unset: the probe's dtype.
  std::function<stats::FloatFormat(const ProbeContract&)> output_format;
  // The outputs select (top-k routing, argmax): each row along the last dimension is one
  // decision, dense, with exact zeros where nothing was selected. The engine then also
  // evaluates the reference under Precision::exact_flipping_near_ties, and each side's
  // error in a row is taken against whichever of the two oracles it is closer to: a tie
  // the working precision cannot resolve is not a precision error. Selection flips are
  // counted and tested apart (gates::SelectionFlips).
  bool selects = false;
  // Each output row (along the last dimension) depends only on the same row of every
  // per-replicate input (all shaped [rows..., last] alike) and on the fixed inputs: RMSNorm,
  // LayerNorm, elementwise activations. The engine then evaluates the built-in variants on the
  // CPU block by block of rows (engine/row_blocks.hpp, issue 37): the same bits, the
  // intermediates in the L2 cache. A family's own built-in variants must all keep it; variants
  // from plugins and Python files are evaluated whole.
  bool row_separable = false;
  // The gradients its backward can be certified on, each with the bucket of every element of
  // one replicate's gradient (shape without the batch dimension; as bucket_ids above) and the
  // reduction size N of the claim (tokens a weight's gradient sums over; 0 for dx).
  struct Gradient {
    GradientSchema schema;
    std::function<torch::Tensor(const std::string& axis, const ProbeContract&, at::IntArrayRef shape)> bucket_ids;
    std::function<std::int64_t(const ProbeContract&)> reduction_size;
  };
  std::vector<Gradient> gradients;
  const Gradient* find_gradient(const std::string& name) const {
    for (const auto& g : gradients)
      if (g.schema.name == name) return &g;
    return nullptr;
  }

  FamilySchema schema() const;
};

class Registry {
 public:
  // Throw std::invalid_argument when the name is already registered.
  void add_family(Family family);
  void add_variant(const std::string& family, Variant variant);

  // Throw std::out_of_range listing what is available.
  const Family& family(const std::string& name) const;
  const Variant& variant(const std::string& family, const std::string& name) const;
  const Family* find_family(const std::string& name) const;
  std::vector<std::string> family_names() const;

  // For the plugin loader: (family, variant) pairs, and marking where variants came from.
  std::set<std::pair<std::string, std::string>> variant_keys() const;
  void stamp_origin(const std::string& family, const std::string& variant, const std::string& version,
                    const std::string& origin);
  bool has_plugin(const std::string& canonical_path) const { return plugins_.count(canonical_path) > 0; }
  void note_plugin(const std::string& canonical_path) { plugins_.insert(canonical_path); }
  // The plugins loaded so far (canonical paths): what a spawned worker loads to match.
  const std::set<std::string>& plugin_paths() const { return plugins_; }
  // Python kernel files (canonical paths) whose variants are stand-ins in this process: their
  // schemas were described by a Python worker, and their kernels run only in `python -m kcert
  // --python FILE` workers (runner/python_route.hpp).
  bool has_python_stand_ins(const std::string& canonical_path) const { return python_stand_ins_.count(canonical_path) > 0; }
  void note_python_stand_ins(const std::string& canonical_path) { python_stand_ins_.insert(canonical_path); }
  const std::set<std::string>& python_stand_in_files() const { return python_stand_ins_; }

 private:
  std::map<std::string, Family> families_;
  std::set<std::string> plugins_;
  std::set<std::string> python_stand_ins_;
};

// The families shipped with kcert (harness/kernels/families.def).
void register_builtin_families(Registry& registry);

}  // namespace kcert::kernels
