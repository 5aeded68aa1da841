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

}  // namespace kcert::numerics
