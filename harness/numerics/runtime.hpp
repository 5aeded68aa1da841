#pragma once
// Process-wide LibTorch settings the harness owns. Kept free of <torch/torch.h> so that
// the command layer can include it without paying for LibTorch's headers.
#include <string>

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

}  // namespace kcert::numerics
