#pragma once
// The GPU math modes that change a kernel's result (docs/gpu.md). kcert pins every one of
// them for each case instead of inheriting ATen's global context: a result must not depend
// on what the user's environment, an earlier case or a plugin left there. Plain values, no
// LibTorch: the contract, the loader and the command layer carry them; runtime.cpp applies
// them.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kcert::numerics {

struct MathModes {
  // torch.backends.cuda.matmul.allow_tf32: fp32 GEMMs in TF32 (10-bit mantissa).
  std::optional<bool> tf32_matmul;
  // torch.backends.cudnn.allow_tf32: fp32 convolutions in TF32.
  std::optional<bool> tf32_cudnn;
  // torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction: cuBLAS may reduce
  // split-K partial sums of a bf16 GEMM in bf16 (LibTorch >= 2.0).
  std::optional<bool> bf16_reduced_precision_reduction;
  // ...allow_fp16_reduced_precision_reduction: the same for fp16 GEMMs.
  std::optional<bool> fp16_reduced_precision_reduction;
  // torch.use_deterministic_algorithms: only kernels that give the same bits run to run.
  std::optional<bool> deterministic_algorithms;
  // torch.backends.cudnn.benchmark: cuDNN picks its algorithm by timing, run by run.
  std::optional<bool> cudnn_benchmark;
};

// The names used in YAML (`math_modes:`), on the command line (--math-mode NAME=on|off),
// in results and in the environment fingerprint, in this order.
const std::vector<std::string>& math_mode_names();

// kcert's pinned values (docs/gpu.md says why each): TF32 off for matmul and cuDNN, reduced
// precision reductions allowed (PyTorch's default, what training runs), deterministic
// algorithms off (PyTorch's default), cuDNN benchmark off (a fixed algorithm).
MathModes pinned_math_modes();

// `over`'s set fields replace `base`'s.
MathModes merged(const MathModes& base, const MathModes& over);

// Sets the field called `name`; false for an unknown name.
bool set_math_mode(MathModes& modes, const std::string& name, bool value);

// The fields as (name, value) in math_mode_names() order; unset ones are nullopt.
std::vector<std::pair<std::string, std::optional<bool>>> math_mode_fields(const MathModes& modes);

// Parses "NAME=on|off" (also true/false, 1/0) into `modes`; throws std::invalid_argument
// naming the allowed names or values.
void parse_math_mode(MathModes& modes, const std::string& assignment);

// "tf32_matmul=off, tf32_cudnn=off, ..." for a person; unset fields are left out.
std::string describe_math_modes(const MathModes& modes);

// ---- ATen's global context (runtime.cpp) ----

// The process's modes: pinned_math_modes() with the command line's --math-mode on top. Set
// once by the command layer before any case runs; each case runs under these with its own
// `math_modes:` on top (engine.cpp), and the environment fingerprint records them where a
// GPU is usable (store/environment.cpp).
void set_process_math_modes(const MathModes& modes);
const MathModes& process_math_modes();

// Writes every set field into ATen's global context and returns what is in effect, read
// back. A mode this LibTorch does not have (bf16_reduced_precision_reduction on 1.13) is
// unset in the returned value; asking for it explicitly throws std::invalid_argument.
MathModes apply_math_modes(const MathModes& modes, bool explicit_request);

// What ATen's global context holds now.
MathModes current_math_modes();

}  // namespace kcert::numerics
