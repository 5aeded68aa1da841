#include "harness/numerics/process_policy.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <sys/resource.h>
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

namespace {

using Settings = std::vector<std::pair<const char*, std::string>>;

// The variables kcert sets where the user did not; `chosen_core` as from choose_openblas_core.
Settings kcert_settings(const std::string& chosen_core) {
  Settings out;
  const auto want = [&](const char* name, const std::string& value) {
    if (!std::getenv(name) && !value.empty()) out.emplace_back(name, value);
  };
  want("OMP_WAIT_POLICY", "passive");
  want("OPENBLAS_NUM_THREADS", "1");
  want("OPENBLAS_CORETYPE", chosen_core);
  return out;
}

bool reexec_allowed() {
  const char* v = std::getenv("KCERT_NO_REEXEC");
  return !(v && std::strcmp(v, "1") == 0);
}

// The values in effect: the environment's, else those about to be set (`pending`), else the
// libraries' defaults. The OpenBLAS core is named as requested when OPENBLAS_CORETYPE is set,
// so that every command names the same environment, else as OpenBLAS detected it.
void fill_in_effect(ProcessPolicy& p, const Settings& pending) {
  const auto value = [&](const char* name, const std::string& fallback) {
    if (const char* v = std::getenv(name); v && *v) return std::string(v);
    for (const auto& [n, v] : pending)
      if (std::strcmp(n, name) == 0) return v;
    return fallback;
  };
  p.omp_wait_policy = value("OMP_WAIT_POLICY", "libgomp default (spin, then sleep)");
  p.openblas_threads = value("OPENBLAS_NUM_THREADS", "OpenBLAS default (one per core)");
  p.openblas_core = value("OPENBLAS_CORETYPE", openblas_core());
}

}  // namespace

void apply_process_policy(int argc, char** argv, int requested_threads) {
  (void)argc;
  const char* marker = std::getenv("KCERT_PROCESS_POLICY");
  ProcessPolicy p = decide_threads(requested_threads);
  if (marker && *marker) {
    // The re-executed process: the parent decided; its decision travels in the marker
    // ("source|core note").
    const std::string m = marker;
    const auto bar = m.find('|');
    p.threads_source = m.substr(0, bar);
    p.openblas_core_note = bar == std::string::npos ? "" : m.substr(bar + 1);
    ::unsetenv("KCERT_PROCESS_POLICY");
  } else {
    const auto detected = openblas_core();
    const auto chosen = choose_openblas_core(detected, best_core_for_cpu());
    const auto wanted = kcert_settings(chosen);
    if (std::getenv("OPENBLAS_CORETYPE")) {
      p.openblas_core_note = "OPENBLAS_CORETYPE set by the user";
    } else if (!chosen.empty()) {
      p.openblas_core_note = "selected by kcert: OpenBLAS detected " + detected + " on a CPU that supports " + chosen;
    } else {
      p.openblas_core_note = detected.empty() ? "" : "detected by OpenBLAS";
    }
    if (!wanted.empty() && reexec_allowed()) {
      for (const auto& [name, value] : wanted) ::setenv(name, value.c_str(), 1);
      ::setenv("KCERT_PROCESS_POLICY", (p.threads_source + "|" + p.openblas_core_note).c_str(), 1);
      ::execv("/proc/self/exe", argv);
      // Still here: exec failed. Run on with the libraries as they loaded, and say so.
      std::cerr << "kcert: warning: could not re-execute to apply the thread policy (" << std::strerror(errno)
                << "); OpenMP and OpenBLAS keep their defaults\n";
      for (const auto& [name, value] : wanted) ::unsetenv(name);
      ::unsetenv("KCERT_PROCESS_POLICY");
    }
    if (!chosen.empty() && !std::getenv("OPENBLAS_CORETYPE")) p.openblas_core_note += " (not applied: no re-exec)";
  }
  p.threads = configure_intra_op_threads(p.threads);
  fill_in_effect(p, {});
  g_policy = p;
  g_applied = true;
}

const ProcessPolicy& process_policy() {
  if (!g_applied) {
    // A command that runs no kernel (calibrate, history, db) did not apply the policy, but
    // the environment it names must be the one the nightly ran in: what apply_process_policy
    // would put in effect here, not this process's library defaults.
    g_policy = decide_threads(0);
    fill_in_effect(g_policy, reexec_allowed() ? kcert_settings(choose_openblas_core(openblas_core(), best_core_for_cpu()))
                                              : Settings());
    g_applied = true;
  }
  return g_policy;
}

bool run_this_thread_when_idle() {
  // SCHED_IDLE: the thread runs only on a core no normal thread wants, and a waking normal
  // thread takes the core back at once. Lowering a thread's priority needs no privilege;
  // nice 19 is the fallback where the policy is refused (a weight of 15 against 1024).
  sched_param param{};
  param.sched_priority = 0;
  if (::sched_setscheduler(0, SCHED_IDLE, &param) == 0) return true;
  return ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19) == 0;
}

}  // namespace kcert::numerics
