#pragma once
// Process-wide LibTorch settings the harness owns. Kept free of <torch/torch.h> so that
// the command layer can include it without paying for LibTorch's headers.
#include <string>
#include <vector>

namespace kcert::numerics {

// Sets LibTorch's intra-op thread count. `requested` <= 0 means "the hardware
// concurrency": Debian's LibTorch reports 1 on a 2-core machine unless told otherwise.
// Returns the count in effect afterwards.
int configure_intra_op_threads(int requested);

// Keeps large tensor buffers in the heap between batches: glibc otherwise maps and unmaps
// every buffer over its mmap threshold, and the page faults cost more than the sweep.
void configure_allocator();

// "1.13.1" or similar; the version of the LibTorch this binary was built against.
std::string torch_version();

// Whether this LibTorch build can run CUDA kernels on this machine.
bool cuda_available();

// The CPU bf16 matrix products of this LibTorch that accumulate in bf16, measured once per
// process: "matmul (k, n)" (the right operand stored k-major, as W.t().contiguous()),
// "matmul (n, k)^T" and "bmm". Empty when every one accumulates in fp32. LibTorch 1.13 takes
// oneDNN (fp32 accumulation, one rounding) only on CPUs with AVX512-BW/VL/DQ; elsewhere its
// fallback GEMM adds each product into the bf16 output, 44 ULP off at k = 16384. Controls
// whose kernels run on it (#1, #3, #12) then test another kernel than the catalog measured.
const std::vector<std::string>& cpu_bf16_gemm_accumulating_in_bf16();

// The environment conditions a case's `expected_on` may name that hold in this process for
// the given device: "libtorch1" or "libtorch2", then "cpu_bf16_gemm_in_bf16" on a CPU whose
// bf16 GEMM accumulates in bf16 (above). Later entries are more specific. Release thresholds
// ("libtorch>=2.11": a kernel that changed in a minor release, as at::rms_norm became a fused
// kernel between 2.6 and 2.11) (contract::parse_release_threshold) hold by torch_at_least and rank between the two (engine.cpp).
std::vector<std::string> expectation_conditions(const std::string& device);

// Whether this build's LibTorch is at least major.minor.
bool torch_at_least(int major, int minor);

}  // namespace kcert::numerics
