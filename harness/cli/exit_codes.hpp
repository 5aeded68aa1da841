#pragma once
// Exit codes shared by every command: 0 success (and, for suites, every control behaved as
// expected), 1 a finding (a verdict the caller must act on), 2 bad input or harness error.
#include <stdexcept>

namespace kcert::cli {

enum ExitCode : int { exit_ok = 0, exit_finding = 1, exit_input_error = 2 };

// Bad input at the edge (a file, a spool, a database that cannot be reached): the message
// names the source, and the command exits 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A command-line value that is well-formed for the parser but invalid for the method.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Ends a command with a given exit status after its output is complete.
struct ExitWith {
  int code;
};

}  // namespace kcert::cli
