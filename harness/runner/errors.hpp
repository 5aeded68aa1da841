#pragma once
// What a suite run refuses, as the commands report it (harness/cli/exit_codes.hpp maps both to
// exit status 2). Defined here, below the commands, so that the runner and a Python face can
// throw and catch them without depending on the command line.
#include <stdexcept>

namespace kcert::runner {

// Bad input at the edge (a file, a plugin, a spool, a database that cannot be reached): the
// message names the source.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value that is well-formed for the parser but invalid for the method (a --profile no case
// defines, a memory limit that is not one).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kcert::runner
