#pragma once
#include <CLI/CLI.hpp>

namespace kcert::cli {

// `kcert tail-fit FILE`: the variance-gate analysis of a stored K̂ sample.
void register_tail_fit_command(CLI::App& app);

}  // namespace kcert::cli
