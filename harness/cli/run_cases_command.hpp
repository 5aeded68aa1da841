#pragma once
#include <CLI/CLI.hpp>

#include "harness/kernels/registry.hpp"
#include "harness/engine/engine.hpp"
#include "harness/testcase/loader.hpp"

namespace kcert::cli {

// `kcert run CASE.yaml|DIR ...`: runs test cases and prints the verdict table.
void register_run_command(CLI::App& app, kernels::Registry& registry);

// A case file that could not be loaded (YAML, validation, its plugins, a duplicate id, the
// memory limit): the file and the loader's reason (file:line:col: field: why).
struct LoadFailure {
  std::string file;
  std::string reason;
};

// Loads every case file; collects all load errors before failing (InputError listing them).
// Plugins named in the files' `plugins:` keys are loaded into the registry first. With
// `failures`, a file that fails to load is listed there instead and the others load (the
// nightly makes each an ERROR result: one bad file must not refuse the whole suite).
std::vector<contract::TestCase> load_cases(const std::vector<std::string>& paths, kernels::Registry& registry,
                                           const std::string& profile, std::vector<LoadFailure>* failures = nullptr);

// The ERROR result a file that failed to load stands for: its id is the file's path.
engine::CaseResult load_failure_result(const LoadFailure& failure);

// Runs cases in order with progress on stderr; `after_each` sees every result as soon as it
// exists (to spool or write it). A case the harness cannot finish becomes an ERROR result.
std::vector<engine::CaseResult> run_cases(const std::vector<contract::TestCase>& cases, const kernels::Registry& registry,
                                          engine::RunOptions options, bool quiet,
                                          const std::function<void(const std::vector<engine::CaseResult>&)>& after_each);

// Loads plugins (from --plugin and KCERT_PLUGINS) and says so on stderr; throws InputError.
void load_plugins(const std::vector<std::string>& paths, kernels::Registry& registry);

// Whether a case's `plugins:` key may load a library the user did not name (--plugin,
// KCERT_PLUGINS): off unless `--allow-case-plugins` is given. Set once by main().
void allow_case_plugins(bool allowed);
bool case_plugins_allowed();

// Which cases run in a forked child process (engine/isolated.hpp), and for how long at most:
// by default those whose kernels come from a plugin, with a deadline of an hour. Set once
// by main() (--isolation, --case-deadline).
struct CaseIsolation {
  enum class Mode { plugins, all, none } mode = Mode::plugins;
  double deadline_seconds = 3600.0;
};
void set_case_isolation(const CaseIsolation& isolation);

}  // namespace kcert::cli
