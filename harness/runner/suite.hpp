#pragma once
// The runner room (issue 51): a suite run as plain functions, with the run's policy passed as
// a value (it was process globals that main() set). A command parses its flags, calls these
// and prints; a Python face calls the same functions.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "harness/contract/test_case.hpp"
#include "harness/engine/case_result.hpp"
#include "harness/engine/engine.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/runner/python_route.hpp"
#include "harness/runner/resources.hpp"
#include "harness/runner/sink.hpp"

namespace kcert::runner {

// Which cases run in a forked child process (runner/isolated.hpp), and for how long at most:
// by default those whose kernels come from a plugin, with a deadline of an hour.
struct Isolation {
  enum class Mode { plugins, all, none } mode = Mode::plugins;
  double deadline_seconds = 3600.0;
  // How a child is made: a fork of this process (cheap; shares its state), or a spawned
  // `worker` binary (a kcert) that starts clean (runner/spawn.hpp): what Python kernels need.
  enum class Process { fork, spawn } process = Process::fork;
  // The command a spawned child runs, up to kcert's global options: the program's path, then
  // its arguments (the kcert binary: {this executable}; Python: {python, -m, kcert, --python
  // FILE...}); the spawner appends `--threads N worker`.
  std::vector<std::string> worker;
};

// What a run may do. main() fills it from --allow-case-plugins, --isolation, --case-deadline
// and --memory-limit / KCERT_MEMORY_LIMIT.
struct SuitePolicy {
  // Whether a case's `plugins:` key may load a library the user did not name (--plugin,
  // KCERT_PLUGINS): a case file does not load code on its own unless this is set.
  // The same for a case's `python:` files, which are then described by `python`.
  bool allow_case_plugins = false;
  Isolation isolation;
  MemoryLimit memory;
  // How Python kernels run here (runner/python_route.hpp): the kcert binary's route, or the
  // Python front end's own interpreter.
  PythonRoute python;
  // Called once the case files' plugins are loaded, before their cases are read: the Python
  // front end adds its variants of families those plugins registered (empty: nothing to add).
  // A std::exception it throws is bad input.
  std::function<void(kernels::Registry&)> after_case_plugins;
};

// A line the run has to tell its user (a plugin loaded, the installed controls used); the
// command prints it. Texts from plugins and paths are passed as they are: escaping them for
// a terminal is the printer's job.
using Note = std::function<void(const std::string&)>;

// Loads plugins; each one loaded is noted ("plugin NAME VERSION loaded from PATH (...)").
// Throws InputError.
void load_plugins(const std::vector<std::string>& paths, kernels::Registry& registry, const Note& note);

// A case file that could not be loaded (YAML, validation, its plugins, a duplicate id, the
// memory limit): the file and the loader's reason (file:line:col: field: why).
struct LoadFailure {
  std::string file;
  std::string reason;
};

// Loads every case file; collects all load errors before failing (InputError listing them).
// Plugins named in the files' `plugins:` keys are loaded into the registry first, as the
// policy allows. With `failures`, a file that fails to load is listed there instead and the
// others load (the nightly makes each an ERROR result: one bad file must not refuse the
// whole suite). The single path `testcases`, absent here, means the installed controls.
// Throws UsageError for a profile no case defines.
std::vector<contract::TestCase> load_cases(const std::vector<std::string>& paths, kernels::Registry& registry,
                                           const std::string& profile, const SuitePolicy& policy, const Note& note,
                                           std::vector<LoadFailure>* failures = nullptr);

// The cases whose id or family one of the regular expressions finds (ECMAScript, searched
// anywhere in the text; all cases when there are none), in their order. Throws UsageError
// naming a pattern that does not compile. run, suite and nightly share it (--filter).
std::vector<contract::TestCase> filter_cases(std::vector<contract::TestCase> cases, const std::vector<std::string>& filters);
// Whether one of the compiled patterns finds the text (a load failure's path, say).
bool any_filter_matches(const std::vector<std::string>& filters, const std::string& text);

// The ERROR result a file that failed to load stands for: its id is the file's path.
engine::CaseResult load_failure_result(const LoadFailure& failure);

// Runs cases in order. A case whose kernels this build lacks is a SKIP; one the harness
// cannot finish is an ERROR result; a plugin's kernels (or every case, as the policy says)
// run in a child process. Each sink sees the run start, each case start, progress and result,
// and the run's end (sink.hpp), in the order listed. Throws UsageError only for --device cuda
// on a build without it.
std::vector<engine::CaseResult> run_cases(const std::vector<contract::TestCase>& cases, const kernels::Registry& registry,
                                          engine::RunOptions options, const SuitePolicy& policy, const Sinks& sinks);

}  // namespace kcert::runner
