#pragma once
#include <CLI/CLI.hpp>

#include "harness/kernels/registry.hpp"

namespace kcert::cli {

// `kcert suite [DIR]`: runs the controls and prints the falsifiability table.
void register_suite_command(CLI::App& app, kernels::Registry& registry);

}  // namespace kcert::cli
