#pragma once
// Runs a command line through the shell and captures its output and exit status, so the
// CLI is tested as users run it.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace kcert::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout, then stderr when merged with 2>&1
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + command);
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string kcert_binary() { return KCERT_BINARY; }

}  // namespace kcert::test
