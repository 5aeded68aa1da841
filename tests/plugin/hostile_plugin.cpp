// A plugin whose kernels misbehave the ways issue 34 found plugin kernels can take a run
// down: a segfault, exit(0), abort(), `throw 42` and a hang, beside one correct kernel. Each
// is a production variant of the built-in rmsnorm family; tests/plugin/test_plugin_isolation.sh
// runs a nightly over cases naming them, each of which must end as an ERROR with its reason
// while the other cases run.
#include <kcert/plugin.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

using kcert::kernels::KernelInputs;
using kcert::kernels::ParamMap;
using kcert::kernels::ParamSpec;
namespace param = kcert::kernels::param;
using kcert::numerics::Precision;

KCERT_PLUGIN("hostile_kernels", "1.0.0")

namespace {

const std::vector<ParamSpec> kParams = {param::number("eps", 1e-6).at_least(0).doc("added to the mean square")};

// fused_weight_fp32's arithmetic: the correct kernel, so its case PASSes.
torch::Tensor rmsnorm(const KernelInputs& in, const Precision& p, const ParamMap& params) {
  const auto u = p.up(in.at("x"));
  const auto inv = torch::rsqrt(u.pow(2).mean(-1, /*keepdim=*/true) + params.number("eps"));
  return p.round_w(u * inv * p.up(in.at("w")));
}

void add(kcert::kernels::Registry& registry, const char* name, const char* doc, kcert::kernels::KernelFn fn) {
  registry.add_variant("rmsnorm", {{name, "", doc, kParams}, std::move(fn)});
}

// Whether this process is a spawned `kcert worker` (its command line holds the word).
bool in_worker() {
  std::ifstream in("/proc/self/cmdline");
  for (std::string arg; std::getline(in, arg, '\0');) {
    if (arg == "worker") return true;
  }
  return false;
}

}  // namespace

KCERT_PLUGIN_REGISTER(registry) {
  // A plugin that loads in kcert but not in a spawned worker (a library only the parent's
  // environment finds, say): the worker's reason must reach the case's ERROR.
  if (std::getenv("KCERT_HOSTILE_FAIL_IN_WORKER") && in_worker())
    throw std::runtime_error("this plugin refuses to load in a worker (KCERT_HOSTILE_FAIL_IN_WORKER)");
  add(registry, "hostile_ok", "a correct one-pass RMSNorm", rmsnorm);
  add(registry, "hostile_segv", "writes through a wild pointer", [](const KernelInputs&, const Precision&, const ParamMap&) -> torch::Tensor {
    *reinterpret_cast<volatile int*>(std::uintptr_t{16}) = 1;
    return {};
  });
  add(registry, "hostile_exit0", "calls exit(0)", [](const KernelInputs&, const Precision&, const ParamMap&) -> torch::Tensor {
    std::exit(0);
  });
  add(registry, "hostile_abort", "calls abort()", [](const KernelInputs&, const Precision&, const ParamMap&) -> torch::Tensor {
    std::abort();
  });
  add(registry, "hostile_throw42", "throws an int", [](const KernelInputs&, const Precision&, const ParamMap&) -> torch::Tensor {
    throw 42;
  });
  // Issue 53: a kernel that forks a helper (no exec) and returns at once. The helper writes a
  // stray line into every regular file it inherited (the run's spool, under fork isolation)
  // and sleeps holding the result pipe: the case was held to its deadline, and the stray line
  // made the spool unreadable for upload. It leaves the case's process group and session
  // (setsid), out of reach of the group kill, and holds a lock on KCERT_HOSTILE_HELPER_LOCK
  // when that names a file, so that a test sees whether it outlived the run (item 6).
  add(registry, "hostile_helper", "forks a helper that writes to inherited files and sleeps",
      [](const KernelInputs& in, const Precision& p, const ParamMap& params) -> torch::Tensor {
        static std::atomic<bool> forked{false};
        if (!forked.exchange(true)) {
          if (::fork() == 0) {
            ::setsid();
            if (const char* lock = std::getenv("KCERT_HOSTILE_HELPER_LOCK")) {
              const int fd = ::open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
              if (fd >= 0) ::flock(fd, LOCK_EX);
            }
            for (int fd = 3; fd < 1024; ++fd) {
              struct stat st {};
              if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
                [[maybe_unused]] const auto n = ::write(fd, "stray\n", 6);
              }
            }
            ::sleep(30);
            ::_exit(0);
          }
        }
        return rmsnorm(in, p, params);
      });
  // Issue 53, item 6: a kernel that starts a helper in a session of its own (holding the lock
  // KCERT_HOSTILE_HELPER_LOCK names) and then never returns: a test kills kcert meanwhile.
  add(registry, "hostile_helper_hang", "starts a helper in its own session, then never returns",
      [](const KernelInputs&, const Precision&, const ParamMap&) -> torch::Tensor {
        if (::fork() == 0) {
          ::setsid();
          if (const char* lock = std::getenv("KCERT_HOSTILE_HELPER_LOCK")) {
            const int fd = ::open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
            if (fd >= 0) ::flock(fd, LOCK_EX);
          }
          ::sleep(600);
          ::_exit(0);
        }
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      });
  add(registry, "hostile_hang", "never returns", [](const KernelInputs&, const Precision&, const ParamMap&) -> torch::Tensor {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  });
}
