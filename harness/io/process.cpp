#include "harness/io/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace kcert::io {

namespace {

using Clock = std::chrono::steady_clock;

// A pipe whose ends close on exec (the child gets its copies by dup2).
void make_pipe(int fds[2], std::vector<int>& opened) {
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    const int err = errno;
    for (const int fd : opened) ::close(fd);
    throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(err));
  }
  opened.push_back(fds[0]);
  opened.push_back(fds[1]);
}

}  // namespace

SigpipeBlocked::SigpipeBlocked() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

SigpipeBlocked::~SigpipeBlocked() {
  const timespec none{0, 0};
  while (sigtimedwait(&pipe_, nullptr, &none) == SIGPIPE) {
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

ProcessOutcome run_process(const ProcessSpec& spec) {
  ProcessOutcome outcome;
  if (spec.argv.empty()) throw std::runtime_error("run_process: no program");
  std::vector<int> opened;
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (spec.input) make_pipe(in, opened);
  if (spec.output_fd < 0) {
    make_pipe(out, opened);
    make_pipe(err, opened);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (spec.input) posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  else posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, spec.output_fd >= 0 ? spec.output_fd : out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, spec.output_fd >= 0 ? spec.output_fd : err[1], STDERR_FILENO);
  if (spec.directory_fd >= 0) posix_spawn_file_actions_addfchdir_np(&actions, spec.directory_fd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group, killed as one when it is done
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = spec.search_path ? ::posix_spawnp(&pid, args.front().c_str(), &actions, &attr, argv.data(), environ)
                                  : ::posix_spawn(&pid, args.front().c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  // This process keeps only its own ends.
  for (const int fd : {in[0], out[1], err[1]}) {
    if (fd >= 0) ::close(fd);
  }
  if (rc != 0) {
    for (const int fd : {in[1], out[0], err[0]}) {
      if (fd >= 0) ::close(fd);
    }
    outcome.start_error = rc;
    return outcome;
  }

  const SigpipeBlocked sigpipe;
  const auto deadline = spec.seconds > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                              std::chrono::duration<double>(spec.seconds))
                                         : Clock::time_point::max();
  std::size_t written = 0;
  if (in[1] >= 0) ::fcntl(in[1], F_SETFL, O_NONBLOCK);
  // [0] its standard input, [1] its output, [2] its errors; -1 once done with.
  pollfd fds[3] = {{in[1], POLLOUT, 0}, {out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[3] = {nullptr, &outcome.out, &outcome.err};
  if (spec.input && spec.input->empty() && fds[0].fd >= 0) {
    ::close(fds[0].fd);
    fds[0].fd = -1;
  }
  bool exited = false;
  int status = 0;
  // Once it has exited, what it wrote is in the pipes: a process it started that kept them
  // open must not hold us until the deadline.
  auto drained_by = deadline;
  const auto open_count = [&] { return std::count_if(std::begin(fds), std::end(fds), [](const pollfd& p) { return p.fd >= 0; }); };
  while (open_count() > 0) {
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      drained_by = std::min(deadline, Clock::now() + std::chrono::seconds(2));
      if (fds[0].fd >= 0) {  // it will read no more
        ::close(fds[0].fd);
        fds[0].fd = -1;
      }
    }
    const auto until = exited ? drained_by : deadline;
    const auto left = until == Clock::time_point::max()
                          ? 100LL
                          : std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) {
      outcome.timed_out = !exited;
      break;
    }
    const int n = ::poll(fds, 3, static_cast<int>(std::min<long long>(left, 100)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (fds[0].fd >= 0 && (fds[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t k = ::write(fds[0].fd, spec.input->data() + written, spec.input->size() - written);
      if (k > 0) written += static_cast<std::size_t>(k);
      if ((k < 0 && errno != EAGAIN && errno != EINTR) || written == spec.input->size()) {
        ::close(fds[0].fd);  // all of it, or it stopped reading: end of its input
        fds[0].fd = -1;
      }
    }
    for (int i = 1; i < 3; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[1 << 16];
      const ssize_t k = ::read(fds[i].fd, buf, sizeof buf);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        continue;
      }
      // Beyond the bound the rest is read and dropped, so it never blocks on a full pipe.
      if (sinks[i]->size() < spec.max_read) sinks[i]->append(buf, std::min<std::size_t>(static_cast<std::size_t>(k), spec.max_read - sinks[i]->size()));
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  // Its pipes closed (or it writes to the caller's descriptor): wait for its end.
  while (!exited && !outcome.timed_out) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) exited = true;
    else if (w < 0 && errno != EINTR) break;
    else if (Clock::now() >= deadline) outcome.timed_out = true;
    else std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(-pid, SIGKILL);  // the group: nothing it started outlives it
  while (!exited && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (outcome.timed_out) return outcome;
  if (WIFEXITED(status)) outcome.exit_status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
  return outcome;
}

}  // namespace kcert::io
