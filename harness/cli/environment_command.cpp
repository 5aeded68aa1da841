#include "harness/cli/environment_command.hpp"

#include <iostream>
#include <memory>

#include "harness/store/environment.hpp"

namespace kcert::cli {

void register_environment_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("environment", "Print the environment this machine's results are keyed by, and its fingerprint");
  cmd->footer(
      "The fingerprint hashes identity fields only: CPU model and ISA flags, LibTorch and its CUDA, BLAS\n"
      "and oneDNN state, OS, compiler; where a GPU can run kernels also its name, compute capability,\n"
      "driver, CUDA runtime, cuBLAS and cuDNN versions and the run's math modes (--math-mode,\n"
      "docs/gpu.md). History, calibration and `kcert nightly`'s comparisons are per fingerprint\n"
      "(docs/database.md).\n\n"
      "Example: kcert environment --json | jq .identity");
  cmd->add_flag("--json", *json, "print {fingerprint, identity, details} as JSON");
  cmd->callback([json]() {
    const auto env = store::detect_environment();
    if (*json) {
      std::cout << nlohmann::json{{"fingerprint", env.fingerprint}, {"identity", env.identity}, {"details", env.details}}.dump(2)
                << "\n";
    } else {
      std::cout << store::describe_environment(env) << "\n";
    }
  });
}

}  // namespace kcert::cli
