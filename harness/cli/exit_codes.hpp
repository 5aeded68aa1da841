#pragma once
// Exit codes shared by every command: 0 success (and, for suites, every control behaved as
// expected), 1 a finding (a verdict the caller must act on), 2 bad input or harness error.
#include <stdexcept>

#include "harness/runner/errors.hpp"

namespace kcert::cli {

enum ExitCode : int { exit_ok = 0, exit_finding = 1, exit_input_error = 2 };

// Bad input (InputError) and a value invalid for the method (UsageError) exit 2; both are the
// runner's (harness/runner/errors.hpp), which the commands share.
using runner::InputError;
using runner::UsageError;

// Ends a command with a given exit status after its output is complete.
struct ExitWith {
  int code;
};

}  // namespace kcert::cli
