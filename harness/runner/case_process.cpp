#include "harness/runner/case_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kcert::runner {

namespace {

// Only what is safe between fork and exec in a process that had threads: system calls, no
// allocation (a spawned worker's tree starts from the Python front end too).

void close_all(const std::vector<int>& fds) {
  for (const int fd : fds) ::close(fd);
}

// Ends this process the way a child with wait status `status` ended.
[[noreturn]] void end_like(int status) {
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  // The case process dumped its core already, if it was to.
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);
}

// The namespace's init: starts the case process, waits for it (reaping whatever else is
// reparented to it meanwhile), reports its wait status on `report` and ends, which ends every
// process left in the namespace.
[[noreturn]] void init_main(const CaseProcessDescriptors& fds, const std::function<void()>& run, int report) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the top died: the namespace goes with it
  // The top died before prctl: its end of `report` is closed (getppid() says nothing here: the
  // init's parent is outside its namespace).
  pollfd top{report, 0, 0};
  if (::poll(&top, 1, 0) >= 0 && (top.revents & POLLERR)) ::_exit(0);
  const pid_t case_pid = ::fork();
  if (case_pid == 0) {
    ::close(report);
    run();
    ::_exit(121);  // run() must not return
  }
  close_all(fds.case_only);
  // As if the case process had exited with 121 ("exited before returning a result") unless
  // its own end is read below.
  int status = 121 << 8;
  if (case_pid > 0) {
    for (;;) {
      int s = 0;
      const pid_t w = ::waitpid(-1, &s, 0);
      if (w == case_pid) {
        status = s;
        break;
      }
      if (w < 0 && errno != EINTR) break;
    }
  }
  const char* p = reinterpret_cast<const char*>(&status);
  std::size_t left = sizeof status;
  while (left > 0) {
    const ssize_t n = ::write(report, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::_exit(0);
}

[[noreturn]] void top_main(pid_t parent, const CaseProcessDescriptors& fds, const std::function<void()>& run) {
  close_all(fds.parent_only);
  ::signal(SIGCHLD, SIG_DFL);  // waitpid below needs the children it waits for kept
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(120);  // the parent died before prctl
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) run();
  // Not privileged to make a PID namespace: the top is the case process.
  if (::unshare(CLONE_NEWPID) != 0) {
    ::close(report[0]);
    ::close(report[1]);
    run();
  }
  const pid_t init = ::fork();  // the first process in the namespace is its init
  if (init == 0) {
    ::close(report[0]);
    init_main(fds, run, report[1]);
  }
  ::close(report[1]);
  if (init < 0) ::_exit(121);
  close_all(fds.case_only);
  int status = 0;
  std::size_t got = 0;
  char* p = reinterpret_cast<char*>(&status);
  while (got < sizeof status) {
    const ssize_t n = ::read(report[0], p + got, sizeof status - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  while (::waitpid(init, nullptr, 0) < 0 && errno == EINTR) {
  }
  // No report: the init was killed (with the top's group, or from outside); end as killed.
  end_like(got == sizeof status ? status : SIGKILL);
}

}  // namespace

pid_t start_case_process(const CaseProcessDescriptors& fds, const std::function<void()>& run) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("cannot fork a child process for the case: ") + std::strerror(errno));
  if (pid == 0) top_main(parent, fds, run);
  // Both sides set the group, so a kill of the group finds it whichever runs first.
  ::setpgid(pid, pid);
  return pid;
}

}  // namespace kcert::runner
