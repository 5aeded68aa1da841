#pragma once
#include <CLI/CLI.hpp>

namespace kcert::cli {

// `kcert environment`: the environment results are keyed by (store/environment.hpp), in words
// or as JSON, without running a case: which fingerprint a run here would record.
void register_environment_command(CLI::App& app);

}  // namespace kcert::cli
