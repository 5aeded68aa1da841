#include "harness/numerics/runtime.hpp"

#include "harness/numerics/math_modes.hpp"

#include "harness/numerics/torch_api.hpp"

#include <torch/cuda.h>

#include <malloc.h>
#include <stdlib.h>

#include <stdexcept>
#include <thread>
#include <type_traits>

namespace kcert::numerics {

int configure_intra_op_threads(int requested) {
  int threads = requested;
  if (threads <= 0) {
    const unsigned hw = std::thread::hardware_concurrency();
    threads = hw == 0 ? 1 : static_cast<int>(hw);
  }
  at::set_num_threads(threads);
  return at::get_num_threads();
}

void configure_allocator() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

bool cuda_available() { return torch::cuda::is_available(); }

namespace {
// cuBLAS's reduced-precision switch for bf16 GEMMs arrived in LibTorch 2.0; 2.x releases
// since 2.8 take a split-K flag beside it and report a three-way option.
#if TORCH_VERSION_MAJOR >= 2
constexpr bool kHasBf16Reduction = true;
#else
constexpr bool kHasBf16Reduction = false;
#endif

template <typename Option>
bool reduced_precision_allowed(Option o) {
  if constexpr (std::is_same_v<Option, bool>) {
    return o;
  } else {
    return o == Option::AllowReducedPrecisionWithSplitK;
  }
}

MathModes process_modes = pinned_math_modes();
}  // namespace

void set_process_math_modes(const MathModes& modes) { process_modes = modes; }
const MathModes& process_math_modes() { return process_modes; }

MathModes current_math_modes() {
  auto& ctx = at::globalContext();
  MathModes m;
  m.tf32_matmul = ctx.allowTF32CuBLAS();
  m.tf32_cudnn = ctx.allowTF32CuDNN();
  m.fp16_reduced_precision_reduction = reduced_precision_allowed(ctx.allowFP16ReductionCuBLAS());
#if TORCH_VERSION_MAJOR >= 2
  m.bf16_reduced_precision_reduction = reduced_precision_allowed(ctx.allowBF16ReductionCuBLAS());
#endif
  m.deterministic_algorithms = ctx.deterministicAlgorithms();
  m.cudnn_benchmark = ctx.benchmarkCuDNN();
  return m;
}

MathModes apply_math_modes(const MathModes& modes, bool explicit_request) {
  auto& ctx = at::globalContext();
  if (modes.tf32_matmul) ctx.setAllowTF32CuBLAS(*modes.tf32_matmul);
  if (modes.tf32_cudnn) ctx.setAllowTF32CuDNN(*modes.tf32_cudnn);
  if (modes.fp16_reduced_precision_reduction) ctx.setAllowFP16ReductionCuBLAS(*modes.fp16_reduced_precision_reduction);
  if (modes.bf16_reduced_precision_reduction) {
    if constexpr (kHasBf16Reduction) {
#if TORCH_VERSION_MAJOR >= 2
      ctx.setAllowBF16ReductionCuBLAS(*modes.bf16_reduced_precision_reduction);
#endif
    } else if (explicit_request) {
      throw std::invalid_argument("math mode bf16_reduced_precision_reduction needs LibTorch >= 2.0; this build has LibTorch " +
                                  torch_version());
    }
  }
  // warn_only = false: a kernel without a deterministic implementation is a harness error
  // under deterministic_algorithms=on, not a silent exception to it.
  if (modes.deterministic_algorithms) {
    // cuBLAS is deterministic only with a fixed workspace; ATen refuses every cuBLAS GEMM under
    // deterministic algorithms without this (read at each call, so setting it here suffices).
    // A value the user set is kept.
    if (*modes.deterministic_algorithms) ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
    ctx.setDeterministicAlgorithms(*modes.deterministic_algorithms, false);
  }
  if (modes.cudnn_benchmark) ctx.setBenchmarkCuDNN(*modes.cudnn_benchmark);
  return current_math_modes();
}

const std::vector<std::string>& cpu_bf16_gemm_accumulating_in_bf16() {
  // A product of ones over k = 4096 is 4096, exact in bf16, with fp32 accumulation; a bf16
  // accumulator stalls at 256 (256 + 1 rounds back to 256 under round-to-nearest-even).
  // m = n = 16 keeps m·n·k above the size oneDNN requires, as every control's shape is.
  static const std::vector<std::string> layouts = [] {
    torch::NoGradGuard no_grad;
    const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
    const auto x = torch::ones({16, 4096}, bf16);
    const auto stalls = [](const torch::Tensor& y) { return y.to(torch::kFloat32).min().item<float>() < 4096.0f; };
    std::vector<std::string> out;
    if (stalls(at::matmul(x, torch::ones({4096, 16}, bf16)))) out.emplace_back("matmul (k, n)");
    if (stalls(at::matmul(x, torch::ones({16, 4096}, bf16).t()))) out.emplace_back("matmul (n, k)^T");
    if (stalls(at::bmm(x.unsqueeze(0), torch::ones({1, 4096, 16}, bf16)))) out.emplace_back("bmm");
    return out;
  }();
  return layouts;
}

bool torch_at_least(int major, int minor) {
  return TORCH_VERSION_MAJOR > major || (TORCH_VERSION_MAJOR == major && TORCH_VERSION_MINOR >= minor);
}

std::vector<std::string> expectation_conditions(const std::string& device) {
  std::vector<std::string> out{"libtorch" + std::to_string(TORCH_VERSION_MAJOR)};
  if (device == "cpu" && !cpu_bf16_gemm_accumulating_in_bf16().empty()) out.emplace_back("cpu_bf16_gemm_in_bf16");
  return out;
}

}  // namespace kcert::numerics
