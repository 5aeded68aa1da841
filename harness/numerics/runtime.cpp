#include "harness/numerics/runtime.hpp"

#include <torch/torch.h>

#include <malloc.h>

#include <thread>

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

std::vector<std::string> expectation_conditions(const std::string& device) {
  std::vector<std::string> out{"libtorch" + std::to_string(TORCH_VERSION_MAJOR)};
  if (device == "cpu" && !cpu_bf16_gemm_accumulating_in_bf16().empty()) out.emplace_back("cpu_bf16_gemm_in_bf16");
  return out;
}

}  // namespace kcert::numerics
