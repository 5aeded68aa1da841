#pragma once
#include <CLI/CLI.hpp>

#include "harness/kernels/registry.hpp"

namespace kcert::cli {

// `kcert list`: the registered families, their bucket axes, probe parameters and variants.
void register_list_command(CLI::App& app, const kernels::Registry& registry);

}  // namespace kcert::cli
