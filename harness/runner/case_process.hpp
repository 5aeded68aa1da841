#pragma once
// The process a case runs in, and every process its kernels start (issue 53, item 6).
//
// A case in a child process is killed as a process group past its deadline. A kernel's helper
// that left the group (setsid, setpgid) escaped that kill: it outlived the case, the nightly
// and the nightly's SIGKILL, holding whatever it had inherited. So where the kernel allows it
// (creating a PID namespace needs CAP_SYS_ADMIN: root, the usual nightly), the case runs as
// the second process of a PID namespace of its own, whose first process (the namespace's
// init) only waits for it. When the case process ends (its result sent, a crash, exit()), or
// the top of the tree is killed (the deadline, this process dying), the init ends, and the
// kernel kills every process left in the namespace, whatever session or group it moved to.
//
//   this process ── top (own process group; dies with this process; ends as the case ended)
//                     └─ init of the case's PID namespace (waits, reports the case's end)
//                          └─ the case process (`run`) ── the kernels' helpers
//
// Without the privilege the top runs the case itself, as before: helpers in the case's process
// group are still killed with it; a helper in a session of its own is not (docs/plugins.md).
#include <sys/types.h>

#include <functional>
#include <vector>

namespace kcert::runner {

struct CaseProcessDescriptors {
  // Closed at once in the new processes: the parent's ends of pipes, the run's spool.
  std::vector<int> parent_only;
  // Kept only by the case process (closed in the top and the init once the case process is
  // started): the result pipe's write end, so that the parent reads an end of file when the
  // case process ends, and a worker's standard input.
  std::vector<int> case_only;
};

// Starts the tree and returns the top's pid: the process the caller waits for and kills as a
// process group. The top ends as the case process ended: with its exit status, or killed by
// the same signal (the caller's reasons, "killed by SIGSEGV", read the same as before).
// `run` runs in the case process and must not return (it ends with _exit or an exec); under
// fork it may run anything the forked process may. Throws std::runtime_error when the fork fails.
pid_t start_case_process(const CaseProcessDescriptors& fds, const std::function<void()>& run);

}  // namespace kcert::runner
