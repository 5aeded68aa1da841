// The thread budget and the OpenBLAS core choice (numerics/process_policy.hpp).
#include "kcert_catch.hpp"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "harness/numerics/process_policy.hpp"

using kcert::numerics::choose_openblas_core;
using kcert::numerics::decide_threads;

TEST_CASE("the thread budget comes from the job, in a stated order", "[numerics][threads]") {
  ::unsetenv("OMP_NUM_THREADS");
  ::unsetenv("SLURM_CPUS_PER_TASK");
  const auto machine = decide_threads(0);
  CHECK(machine.threads >= 1);
  CHECK((machine.threads_source == "CPU affinity" || machine.threads_source == "cgroup quota"));

  ::setenv("SLURM_CPUS_PER_TASK", "3", 1);
  CHECK(decide_threads(0).threads == 3);
  CHECK(decide_threads(0).threads_source == "SLURM_CPUS_PER_TASK");
  ::setenv("OMP_NUM_THREADS", "5", 1);
  CHECK(decide_threads(0).threads == 5);
  CHECK(decide_threads(0).threads_source == "OMP_NUM_THREADS");
  CHECK(decide_threads(7).threads == 7);
  CHECK(decide_threads(7).threads_source == "--threads");
  // Values that are not a positive count are ignored, not trusted.
  ::setenv("OMP_NUM_THREADS", "4,2", 1);  // a nested-parallelism list
  CHECK(decide_threads(0).threads_source == "SLURM_CPUS_PER_TASK");
  ::setenv("SLURM_CPUS_PER_TASK", "0", 1);
  CHECK(decide_threads(0).threads_source == machine.threads_source);
  ::unsetenv("OMP_NUM_THREADS");
  ::unsetenv("SLURM_CPUS_PER_TASK");
}

TEST_CASE("kcert replaces only OpenBLAS's generic fallback cores", "[numerics][openblas]") {
  // OpenBLAS 0.3.21 on a CPU newer than its tables: Prescott (SSE3) on an AVX-512 machine.
  CHECK(choose_openblas_core("Prescott", "SkylakeX") == "SkylakeX");
  CHECK(choose_openblas_core("Nehalem", "Haswell") == "Haswell");
  CHECK(choose_openblas_core("Core2", "Sandybridge") == "Sandybridge");
  // A core OpenBLAS recognised, no OpenBLAS, or nothing better known: left alone.
  CHECK(choose_openblas_core("Haswell", "SkylakeX").empty());
  CHECK(choose_openblas_core("Zen", "SkylakeX").empty());
  CHECK(choose_openblas_core("", "SkylakeX").empty());
  CHECK(choose_openblas_core("Prescott", "").empty());
}

// The engine's background sweep must take only the core time the kernels leave: its thread
// runs in the idle class (or at nice 19 where that is refused), and only it.
TEST_CASE("a thread lowered to idle priority lowers only itself", "[numerics][threads]") {
  const int before = ::sched_getscheduler(0);
  int policy = -1, nice = -100;
  bool lowered = false;
  std::thread t([&] {
    lowered = kcert::numerics::run_this_thread_when_idle();
    policy = ::sched_getscheduler(0);
    errno = 0;
    nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  });
  t.join();
  REQUIRE(lowered);
  CHECK((policy == SCHED_IDLE || nice == 19));
  CHECK(::sched_getscheduler(0) == before);
}
