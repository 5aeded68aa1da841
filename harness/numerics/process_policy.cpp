#include "harness/numerics/process_policy.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "harness/numerics/runtime.hpp"

namespace kcert::numerics {

namespace {

ProcessPolicy g_policy;
bool g_applied = false;

std::optional<int> positive_int(const char* v) {
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n <= 0 || n > 4096) return std::nullopt;
  return static_cast<int>(n);
}

// The CPU quota of a cgroup v2 ("max 100000" or "200000 100000"), rounded up.
std::optional<int> cgroup_cpus() {
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::string quota, period;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  const double q = std::atof(quota.c_str()), p = std::atof(period.c_str());
  if (!(q > 0) || !(p > 0)) return std::nullopt;
  return std::max(1, static_cast<int>(std::ceil(q / p)));
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// OpenBLAS's generic fallbacks, which it picks for CPUs newer than its tables.
bool is_fallback_core(const std::string& core) {
  static const std::set<std::string> fallbacks{"prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                                               "katmai", "coppermine", "northwood", "banias", "opteron",
                                               "opteron_sse3", "barcelona", "unknown", ""};
  return fallbacks.count(lower(core)) > 0;
}

// The best OpenBLAS x86-64 core this CPU's instruction set supports; "" when none is known.
std::string best_core_for_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
  return "";
}

}  // namespace

std::string choose_openblas_core(const std::string& detected, const std::string& cpu_best) {
  return !detected.empty() && is_fallback_core(detected) && !cpu_best.empty() ? cpu_best : "";
}

std::string best_openblas_core_for_cpu() { return best_core_for_cpu(); }

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

std::string openblas_core() {
  using CoreName = char* (*)();
  if (auto fn = reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"))) {
    const char* name = fn();
    return name ? name : "";
  }
  return "";
}

ProcessPolicy decide_threads(int requested) {
  ProcessPolicy p;
  if (requested > 0) {
    p.threads = requested;
    p.threads_source = "--threads";
  } else if (const auto n = positive_int(std::getenv("OMP_NUM_THREADS"))) {
    p.threads = *n;
    p.threads_source = "OMP_NUM_THREADS";
  } else if (const auto n = positive_int(std::getenv("SLURM_CPUS_PER_TASK"))) {
    p.threads = *n;
    p.threads_source = "SLURM_CPUS_PER_TASK";
  } else {
    cpu_set_t set;
    CPU_ZERO(&set);
    int affinity = 0;
    if (::sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
    if (affinity <= 0) affinity = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    p.threads = affinity;
    p.threads_source = "CPU affinity";
    if (const auto quota = cgroup_cpus(); quota && *quota < affinity) {
      p.threads = *quota;
      p.threads_source = "cgroup quota";
    }
  }
  return p;
}

void apply_process_policy(int argc, char** argv, int requested_threads) {
  (void)argc;
  const char* marker = std::getenv("KCERT_PROCESS_POLICY");
  ProcessPolicy p = decide_threads(requested_threads);
  if (marker && *marker) {
    // The re-executed process: the parent decided; its decision travels in the marker
    // ("source|core note"), since OMP_NUM_THREADS is now set by kcert, not the user.
    const std::string m = marker;
    const auto bar = m.find('|');
    p.threads_source = m.substr(0, bar);
    p.openblas_core_note = bar == std::string::npos ? "" : m.substr(bar + 1);
    ::unsetenv("KCERT_PROCESS_POLICY");
  } else {
    // What kcert would set, where the user did not.
    std::vector<std::pair<const char*, std::string>> wanted;
    const auto want = [&](const char* name, const std::string& value) {
      if (!std::getenv(name)) wanted.emplace_back(name, value);
    };
    want("OMP_WAIT_POLICY", "passive");
    want("OPENBLAS_NUM_THREADS", "1");
    const auto detected = openblas_core();
    const auto chosen = choose_openblas_core(detected, best_core_for_cpu());
    if (std::getenv("OPENBLAS_CORETYPE")) {
      p.openblas_core_note = "OPENBLAS_CORETYPE set by the user";
    } else if (!chosen.empty()) {
      want("OPENBLAS_CORETYPE", chosen);
      p.openblas_core_note = "selected by kcert: OpenBLAS detected " + detected + " on a CPU that supports " + chosen;
    } else {
      p.openblas_core_note = detected.empty() ? "" : "detected by OpenBLAS";
    }
    const char* no_reexec = std::getenv("KCERT_NO_REEXEC");
    if (!wanted.empty() && !(no_reexec && std::strcmp(no_reexec, "1") == 0)) {
      for (const auto& [name, value] : wanted) ::setenv(name, value.c_str(), 1);
      ::setenv("KCERT_PROCESS_POLICY", (p.threads_source + "|" + p.openblas_core_note).c_str(), 1);
      ::execv("/proc/self/exe", argv);
      // Still here: exec failed. Run on with the libraries as they loaded, and say so.
      std::cerr << "kcert: warning: could not re-execute to apply the thread policy (" << std::strerror(errno)
                << "); OpenMP and OpenBLAS keep their defaults\n";
      for (const auto& [name, value] : wanted) ::unsetenv(name);
      ::unsetenv("KCERT_PROCESS_POLICY");
    }
    if (!wanted.empty() && p.openblas_core_note.rfind("selected", 0) == 0) p.openblas_core_note += " (not applied: no re-exec)";
  }
  p.threads = configure_intra_op_threads(p.threads);
  p.omp_wait_policy = env_or("OMP_WAIT_POLICY", "libgomp default (spin, then sleep)");
  p.openblas_threads = env_or("OPENBLAS_NUM_THREADS", "OpenBLAS default (one per core)");
  // As requested when OPENBLAS_CORETYPE is set (so that commands which load no kernels name the same
  // environment), else as OpenBLAS detected it.
  p.openblas_core = env_or("OPENBLAS_CORETYPE", openblas_core());
  g_policy = p;
  g_applied = true;
}

const ProcessPolicy& process_policy() {
  if (!g_applied) {
    // A command that runs no kernel (calibrate, history, db) did not apply the policy, but
    // the environment it names must be the one the nightly ran in: what apply_process_policy
    // would put in effect here, not this process's library defaults.
    g_policy = decide_threads(0);
    const char* no_reexec = std::getenv("KCERT_NO_REEXEC");
    const bool applies = !(no_reexec && std::strcmp(no_reexec, "1") == 0);
    g_policy.omp_wait_policy = env_or("OMP_WAIT_POLICY", applies ? "passive" : "libgomp default (spin, then sleep)");
    g_policy.openblas_threads = env_or("OPENBLAS_NUM_THREADS", applies ? "1" : "OpenBLAS default (one per core)");
    const auto detected = openblas_core();
    const auto chosen = choose_openblas_core(detected, best_core_for_cpu());
    g_policy.openblas_core = env_or("OPENBLAS_CORETYPE", applies && !chosen.empty() ? chosen : detected);
    g_applied = true;
  }
  return g_policy;
}

}  // namespace kcert::numerics
