#pragma once
// The shipped families' schemas, behind a header free of LibTorch: what the case loader needs
// to validate a file, for code that must not include <torch/torch.h> (the libFuzzer target is
// built with clang, which cannot compile LibTorch 1.13's headers in C++20 mode).
#include <map>
#include <string>

#include "harness/kernels/schema.hpp"

namespace kcert::kernels {

std::map<std::string, FamilySchema> builtin_family_schemas();

}  // namespace kcert::kernels
