#pragma once
#include <CLI/CLI.hpp>

#include "harness/kernels/registry.hpp"
#include "harness/runner/suite.hpp"

namespace kcert::cli {

// `kcert nightly`: the control suite stored, compared with the last run, and reported.
void register_nightly_command(CLI::App& app, kernels::Registry& registry, const runner::SuitePolicy& policy);
// `kcert calibrate`: variance thresholds per family from stored positive controls.
void register_calibrate_command(CLI::App& app);
// `kcert controls-doc`: docs/controls.md from the control YAML files and measured results.
void register_controls_doc_command(CLI::App& app, kernels::Registry& registry, const runner::SuitePolicy& policy);

}  // namespace kcert::cli
