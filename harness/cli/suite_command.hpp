#pragma once
#include <CLI/CLI.hpp>

#include "harness/kernels/registry.hpp"
#include "harness/runner/suite.hpp"

namespace kcert::cli {

// `kcert suite [DIR]`: runs the controls and prints the falsifiability table.
void register_suite_command(CLI::App& app, kernels::Registry& registry, const runner::SuitePolicy& policy);

}  // namespace kcert::cli
