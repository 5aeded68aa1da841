#pragma once
// A case run in a forked child process (issue 34). kcert runs plugin kernels it did not
// write: in its own process, a kernel that called exit(0) ended the nightly with exit status
// 0 and nothing run, a segfault, an abort or `throw 42` killed the run, and a hang had no
// deadline. In a child, each of these is the end of that case only: run_case_isolated
// throws CaseAborted with the reason, and the caller records an ERROR result and goes on.
//
// The child is a fork of kcert (no exec): it shares the loaded plugins, the registry and the
// case, runs run_case on a fresh thread (libgomp's thread team does not survive fork in the
// thread that forked; a new thread starts a new team, so the child keeps the parent's
// intra-op threads), and sends the result back over a pipe (result_wire.hpp). It is the
// leader of its own process group, which is killed past the deadline, and dies with its
// parent (PR_SET_PDEATHSIG); where a PID namespace can be made, the processes its kernels
// start end with it too (case_process.hpp). This is isolation from faults, not from malice:
// the child is the same user with the same files open.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/engine/engine.hpp"

namespace kcert::runner {

struct IsolationOptions {
  double deadline_seconds = 3600.0;  // wall time from fork to the result
  std::string who = "plugin kernel";  // what the reasons say died ("plugin kernel killed by SIGSEGV")
};

// The case's child ended without a result: killed by a signal, exited, past its deadline,
// a non-standard exception, or a malformed result. what() is the reason, for the ERROR result.
class CaseAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether a kernel the case runs (reference or production, of the case or of a sweep
// setting) has an origin (VariantSchema::origin: "builtin", a plugin's name, "python:FILE")
// for which `matches` is true.
bool any_kernel_from(const contract::TestCase& tc, const kernels::Registry& registry,
                     const std::function<bool(const std::string& origin)>& matches);

// ... comes from a plugin (or a Python file) rather than from kcert.
bool kernels_from_plugin(const contract::TestCase& tc, const kernels::Registry& registry);

// Descriptors a forked case must not inherit: the run's spool (a stray write of a kernel landed
// in it, and a helper process the kernel left behind held its lock; issue 53). Its owner names
// them while they are open; the child closes them before the case runs. Spawned workers start
// without them (they are O_CLOEXEC).
void close_in_forked_cases(int fd);
void keep_in_forked_cases(int fd);
// The descriptors named so far, for a case process being started (forked or spawned).
std::vector<int> descriptors_closed_in_cases();

// run_case in a forked child. Returns the child's result (its test case from as_run);
// rethrows, as std::runtime_error with the same text, a std::exception the case threw
// (as run_case would have); throws CaseAborted when the child ended without a result.
engine::CaseResult run_case_isolated(const contract::TestCase& tc, const kernels::Registry& registry, const engine::RunOptions& options,
                             const IsolationOptions& isolation);

// The parts a child process of another kind shares with the forked one (the runner's spawned
// `kcert worker`, spawn.hpp):
// run_case's outcome as one framed message (a result, a std::exception's text, or the type of
// another exception), what a child writes back;
std::string case_message(const contract::TestCase& tc, const kernels::Registry& registry, const engine::RunOptions& options);
// the message of an error the child met before it could run the case (a worker's unreadable
// request): the parent rethrows it as the case's exception;
std::string error_message(const std::string& what);
// writes it whole to fd (false on an error: the parent then reads an incomplete message);
bool write_message(int fd, const std::string& message);
// The same, to a process that may die before reading it all (a spawned worker, gnuplot): SIGPIPE
// is blocked meanwhile, so the write ends with EPIPE (false; the reader's exit status says why)
// instead of killing this process, and a pending SIGPIPE is consumed.
bool write_all_ignoring_sigpipe(int fd, const std::string& text);
// and, in the parent, the child `pid` (leader of its own process group) read to its end on
// `fd` (closed here) and reaped under the deadline counted from `start`: its result, or
// CaseAborted with the reason, as run_case_isolated.
engine::CaseResult collect_case(pid_t pid, int fd, std::chrono::steady_clock::time_point start, const contract::TestCase& tc,
                        const engine::RunOptions& options, const IsolationOptions& isolation);

}  // namespace kcert::runner
