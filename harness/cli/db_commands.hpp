#pragma once
#include <CLI/CLI.hpp>

namespace kcert::cli {

// `kcert db migrate|status`, `kcert upload SPOOL...`, `kcert history CASE`.
void register_db_commands(CLI::App& app);

}  // namespace kcert::cli
