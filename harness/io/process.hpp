#pragma once
// Running a helper program (issue 51: the gnuplot runner of the report and the describer of
// Python kernel files each had their own posix_spawn with pipes, deadline and process-group
// kill). The program gets its standard input from a text or /dev/null; its output goes to a
// descriptor the caller holds, or is read back (bounded); it runs in its own process group,
// which is killed when it is done or past its deadline, so nothing it started outlives it.
// Case processes are not run here: they have their own tree (runner/case_process.hpp).
#include <signal.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kcert::io {

struct ProcessSpec {
  std::vector<std::string> argv;       // argv[0] is the program
  bool search_path = false;            // argv[0] looked up on PATH (else a path as it is)
  std::optional<std::string> input;    // written to its standard input, which is then closed; none: /dev/null
  int output_fd = -1;                  // its standard output and error go here (>= 0), else both are read back
  int directory_fd = -1;               // it runs in this folder (>= 0), else in this process's
  double seconds = 0;                  // deadline from the start; 0: none
  std::size_t max_read = std::size_t{16} << 20;  // per output read back; the rest is read and dropped
};

struct ProcessOutcome {
  int start_error = 0;    // errno when it could not be started (ENOENT: not installed); nothing else is set
  int exit_status = -1;   // its exit status, or -1 when it did not exit (a signal, the deadline)
  int signal = 0;         // the signal that ended it, or 0
  bool timed_out = false; // killed at the deadline
  std::string out, err;   // what it wrote, when read back
};

// SIGPIPE blocked in this thread while it lives: a write to a pipe whose reader has gone fails
// with EPIPE instead of killing kcert; a SIGPIPE raised meanwhile is taken off before the mask
// is restored.
class SigpipeBlocked {
 public:
  SigpipeBlocked();
  ~SigpipeBlocked();
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_, old_;
};

// Runs it to its end (or its deadline). Throws std::runtime_error only when a pipe cannot be
// made; a program that cannot be started is `start_error`.
ProcessOutcome run_process(const ProcessSpec& spec);

}  // namespace kcert::io
