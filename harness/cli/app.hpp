#pragma once
// kcert's command line as a function: the kcert binary's main() calls it, and so does the
// Python module (`python -m kcert`), which brings variants of its own and spawns its workers
// as Python processes. Everything after parsing (commands, storage, reports) is the same code.
#include <functional>
#include <string>
#include <vector>

#include "harness/kernels/registry.hpp"

namespace kcert::cli {

// What a front end other than the kcert binary adds to the command line.
struct FrontEnd {
  // Adds the front end's own families and variants. Called once the command line's plugins are
  // loaded, with `final` false when the command may still load a case file's `plugins:` (run,
  // suite, nightly, controls-doc): a variant of a family no plugin has registered yet then
  // waits, and the call after the case files' plugins load (`final` true) adds it or refuses
  // it. A std::exception it throws is bad input (exit 2), printed with its message.
  std::function<void(kernels::Registry&, bool final)> extend;
  // The command a spawned worker runs, up to the global options (runner::Isolation::worker);
  // empty: this executable.
  std::vector<std::string> worker;
  // --isolation-process's default: fork for the kcert binary; spawn where forking the process
  // is unsafe (a Python interpreter that has imported torch).
  std::string default_isolation_process = "fork";
  // How Python kernel files this front end did not import are described and run
  // (runner/python_route.hpp): {python, -m, kcert, --python FILE...} with the files it
  // imported itself; empty: the kcert binary's route.
  std::vector<std::string> python;
};

// Parses argv and runs the command; returns the process exit status (cli/exit_codes.hpp).
int run_command_line(int argc, char** argv, const FrontEnd& front_end = {});

}  // namespace kcert::cli
