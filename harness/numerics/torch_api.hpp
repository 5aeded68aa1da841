#pragma once
// The part of LibTorch's C++ API that kcert's numerics, kernels and plugins use: tensors,
// ATen's operators under torch:: (torch/types.h: `namespace torch { using namespace at; }`),
// the autograd-aware factories (torch::tensor, torch::arange), torch::indexing, NoGradGuard
// and manual_seed (torch/utils.h), TORCH_VERSION_* (torch/version.h). Not <torch/torch.h>: that adds the nn, optim, data, jit
// and serialize front end, which kcert does not use, and which cost each translation unit
// about a fifth of its compile time (docs/benchmarks.md, "Build time"). This header is also
// the precompiled header of every LibTorch-facing target (CMakeLists.txt).
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>  // TORCH_VERSION_MAJOR, for the guards around API changes
