#pragma once
#include <CLI/CLI.hpp>

#include "harness/engine/engine.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/runner/suite.hpp"

namespace kcert::cli {

// `kcert run CASE.yaml|DIR ...`: runs test cases and prints the verdict table. `policy` is
// main()'s, filled once its global flags are parsed.
void register_run_command(CLI::App& app, kernels::Registry& registry, const runner::SuitePolicy& policy);

// Prints a runner note on stderr as "kcert: NOTE", escaped for the terminal.
void print_note(const std::string& note);

// The cases --filter keeps (runner::filter_cases); an error when it keeps none.
std::vector<contract::TestCase> selected_cases(std::vector<contract::TestCase> cases, const std::vector<std::string>& filters);
// The --filter option, worded alike on run, suite and nightly.
void add_filter_option(CLI::App* cmd, std::vector<std::string>& filters);

// runner::load_cases with its notes on stderr.
std::vector<contract::TestCase> load_cases(const std::vector<std::string>& paths, kernels::Registry& registry,
                                           const std::string& profile, const runner::SuitePolicy& policy,
                                           std::vector<runner::LoadFailure>* failures = nullptr);

// runner::run_cases with progress on stderr (a rewritten line on a terminal, a line every
// 10 s otherwise; none when quiet) as its first sink, then `sinks` (storage, files) in order.
std::vector<engine::CaseResult> run_cases(const std::vector<contract::TestCase>& cases, const kernels::Registry& registry,
                                          engine::RunOptions options, const runner::SuitePolicy& policy, bool quiet,
                                          const runner::Sinks& sinks);

}  // namespace kcert::cli
