#pragma once
#include <CLI/CLI.hpp>

#include "harness/kernels/registry.hpp"
#include "harness/testcase/testcase.hpp"

namespace kcert::cli {

// `kcert run CASE.yaml|DIR ...`: runs test cases and prints the verdict table.
void register_run_command(CLI::App& app, const kernels::Registry& registry);

// Loads every case file; collects all load errors before failing (InputError listing them).
std::vector<testcase::TestCase> load_cases(const std::vector<std::string>& paths, const kernels::Registry& registry,
                                           const std::string& profile);

}  // namespace kcert::cli
