#pragma once
#include <CLI/CLI.hpp>

namespace kcert::cli {

// `kcert report DIR`: the HTML report of a nightly report folder (results.json, tails/), written
// by the report room (harness/report/html.hpp).
void register_report_command(CLI::App& app);

}  // namespace kcert::cli
