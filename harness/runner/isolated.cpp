#include "harness/runner/isolated.hpp"
#include "harness/runner/case_process.hpp"
#include "harness/io/process.hpp"

#include <cxxabi.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cerrno>
#include <mutex>
#include <set>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "harness/engine/result_wire.hpp"
#include "harness/numerics/runtime.hpp"
#include "harness/numerics/torch_api.hpp"

namespace kcert::runner {

using engine::CaseResult;
using engine::RunOptions;

namespace {

// One message from the child: a tag, the payload's length, the payload.
constexpr char kResult = 'R';     // result_wire bytes
constexpr char kException = 'E';  // a std::exception's what()
constexpr char kForeign = 'X';    // an exception of another type: its type's name
constexpr std::size_t kHeader = 1 + sizeof(std::uint64_t);
constexpr std::size_t kMaxMessage = std::size_t{1} << 32;

std::string frame(char tag, const std::string& payload) {
  std::string out(1, tag);
  const std::uint64_t n = payload.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += payload;
  return out;
}

std::string current_exception_type() {
  const std::type_info* t = abi::__cxa_current_exception_type();
  if (!t) return "unknown";
  int status = 0;
  char* name = abi::__cxa_demangle(t->name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : t->name();
  std::free(name);
  return out;
}

[[noreturn]] void child_main(int fd, const contract::TestCase& tc, const kernels::Registry& registry, const RunOptions& options,
                             int threads) {
  std::string message;
  // A fresh thread: the forking thread's libgomp team points at threads the child does not
  // have (its next parallel region would wait for them forever).
  std::thread worker([&] {
    numerics::configure_intra_op_threads(threads);
    message = case_message(tc, registry, options);
  });
  worker.join();
  if (!write_message(fd, message)) ::_exit(121);
  // _exit: no atexit handlers or static destructors of the parent's state run here, and no
  // stdio buffer is flushed twice.
  ::_exit(0);
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  const char* text = ::strsignal(sig);
  return abbrev ? fmt::format("SIG{} ({})", abbrev, text ? text : "") : fmt::format("signal {}", sig);
}

std::string seconds_text(double s) { return fmt::format("{:g}", s); }

}  // namespace

std::string case_message(const contract::TestCase& tc, const kernels::Registry& registry, const RunOptions& options) {
  try {
    return frame(kResult, engine::encode_outcome(engine::run_case(tc, registry, options)));
  } catch (const std::exception& e) {
    return frame(kException, e.what());
  } catch (...) {
    return frame(kForeign, current_exception_type());
  }
}

std::string error_message(const std::string& what) { return frame(kException, what); }

bool write_message(int fd, const std::string& message) {
  const char* p = message.data();
  std::size_t left = message.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

bool write_all_ignoring_sigpipe(int fd, const std::string& text) {
  const io::SigpipeBlocked blocked;
  return write_message(fd, text);
}

bool any_kernel_from(const contract::TestCase& tc, const kernels::Registry& registry,
                     const std::function<bool(const std::string& origin)>& matches) {
  const auto* family = registry.find_family(tc.family);
  if (!family) return false;
  const auto from = [&](const contract::KernelChoice& k) {
    const auto it = family->variants.find(k.variant);
    return it != family->variants.end() && matches(it->second.schema.origin);
  };
  if (from(tc.reference) || from(tc.production)) return true;
  for (const auto& s : tc.sweep) {
    if (s.testcase && any_kernel_from(*s.testcase, registry, matches)) return true;
  }
  return false;
}

bool kernels_from_plugin(const contract::TestCase& tc, const kernels::Registry& registry) {
  return any_kernel_from(tc, registry, [](const std::string& origin) { return origin != "builtin"; });
}

namespace {
std::mutex parent_fds_mutex;
std::set<int>& parent_fds() {
  static std::set<int> fds;
  return fds;
}
}  // namespace

void close_in_forked_cases(int fd) {
  const std::lock_guard lock(parent_fds_mutex);
  if (fd >= 0) parent_fds().insert(fd);
}

void keep_in_forked_cases(int fd) {
  const std::lock_guard lock(parent_fds_mutex);
  parent_fds().erase(fd);
}

std::vector<int> descriptors_closed_in_cases() {
  const std::lock_guard lock(parent_fds_mutex);
  return {parent_fds().begin(), parent_fds().end()};
}

CaseResult run_case_isolated(const contract::TestCase& tc, const kernels::Registry& registry, const RunOptions& options,
                             const IsolationOptions& isolation) {
  using clock = std::chrono::steady_clock;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("cannot create a pipe for the case's child process: ") + std::strerror(errno));
  }
  const int threads = at::get_num_threads();
  // Whatever the parent has buffered would otherwise be printed by both processes.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const auto start = clock::now();
  CaseProcessDescriptors descriptors;
  descriptors.parent_only = descriptors_closed_in_cases();
  descriptors.parent_only.push_back(fds[0]);
  descriptors.case_only.push_back(fds[1]);
  pid_t pid = 0;
  try {
    pid = start_case_process(descriptors, [&] { child_main(fds[1], tc, registry, options, threads); });
  } catch (...) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw;
  }
  ::close(fds[1]);
  return collect_case(pid, fds[0], start, tc, options, isolation);
}

CaseResult collect_case(pid_t pid, int fd, std::chrono::steady_clock::time_point start, const contract::TestCase& tc,
                        const RunOptions& options, const IsolationOptions& isolation) {
  using clock = std::chrono::steady_clock;
  const auto deadline = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(isolation.deadline_seconds));

  std::string data;
  bool timed_out = false, eof = false, oversized = false;
  std::string read_error;
  while (!eof) {
    const auto left = deadline - clock::now();
    if (left <= clock::duration::zero()) {
      timed_out = true;
      break;
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(ms, 1000)));
    if (n < 0) {
      if (errno == EINTR) continue;
      read_error = std::strerror(errno);
      break;
    }
    if (n == 0) continue;
    char buf[1 << 16];
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      read_error = std::strerror(errno);
      break;
    }
    if (k == 0) {
      eof = true;
    } else {
      data.append(buf, static_cast<std::size_t>(k));
      if (data.size() > kMaxMessage + kHeader) {
        oversized = true;
        break;
      }
      // The whole message is here: a helper process the kernel started (and that inherited
      // the pipe) must not hold the case until its deadline waiting for an EOF (issue 53).
      std::uint64_t length = 0;
      if (data.size() >= kHeader && (std::memcpy(&length, data.data() + 1, sizeof length), data.size() - kHeader >= length)) {
        data.resize(kHeader + length);
        eof = true;
      }
    }
  }
  ::close(fd);
  int status = 0;
  bool reaped = false;
  while (!timed_out && !reaped) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      reaped = true;
    } else if (w < 0 && errno != EINTR) {
      break;
    } else if (clock::now() >= deadline) {
      timed_out = true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // The whole group: a kernel's own children go with it (and a child past its deadline).
  ::kill(-pid, SIGKILL);
  if (!reaped) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  const auto& who = isolation.who;
  if (timed_out) {
    throw CaseAborted(fmt::format("{} exceeded the per-case deadline of {} s (--case-deadline); its process group was killed",
                                  who, seconds_text(isolation.deadline_seconds)));
  }
  if (oversized) throw CaseAborted(fmt::format("{} sent a result of more than {} bytes; its process was killed", who, kMaxMessage));
  if (!reaped) throw CaseAborted(fmt::format("{}: lost its child process ({})", who, std::strerror(errno)));
  if (WIFSIGNALED(status)) {
    throw CaseAborted(fmt::format("{} killed by {} after {:.1f} s; the case ran in a child process, and the run went on",
                                  who, signal_name(WTERMSIG(status)), seconds));
  }
  std::uint64_t length = 0;
  const bool complete = data.size() >= kHeader && (std::memcpy(&length, data.data() + 1, sizeof length), data.size() - kHeader == length);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !complete) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (!read_error.empty()) throw CaseAborted(fmt::format("{}: cannot read its child's result: {}", who, read_error));
    if (complete) throw CaseAborted(fmt::format("{} exited with status {} after returning a result", who, code));
    throw CaseAborted(fmt::format("{} exited with status {} before returning a result (did a kernel call exit()?)", who, code));
  }
  const std::string payload = data.substr(kHeader);
  switch (data[0]) {
    case kResult: {
      CaseResult result;
      try {
        engine::decode_outcome(payload, result);
      } catch (const std::exception& e) {
        throw CaseAborted(fmt::format("{} returned a malformed result: {}", who, e.what()));
      }
      result.testcase = as_run(tc, options);
      return result;
    }
    case kException:
      throw std::runtime_error(payload);
    case kForeign:
      throw CaseAborted(fmt::format("{} threw an exception of type {}, which is not a std::exception", who, payload));
    default:
      throw CaseAborted(fmt::format("{} returned a malformed result (an unknown message)", who));
  }
}

}  // namespace kcert::runner
