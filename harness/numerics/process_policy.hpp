#pragma once
// How many threads kcert uses, how idle threads wait, and which OpenBLAS kernels run. These
// are read by libgomp and OpenBLAS once, when they load, so kcert sets them in its own
// environment and re-executes itself before running any kernel (issue 17):
//   - OMP_WAIT_POLICY=passive: idle OpenMP threads sleep instead of spinning. On a busy
//     machine, spinning made 2 intra-op threads 4.5-5x slower than 1.
//   - OPENBLAS_NUM_THREADS=1: OpenBLAS otherwise starts one thread per core of its own, on
//     top of LibTorch's intra-op threads (and inside them, where ATen calls BLAS from a
//     parallel loop). Measured: smoke suite 139 s -> 40 s under load, 1.1x faster idle.
//   - OPENBLAS_CORETYPE: Debian's OpenBLAS 0.3.21 does not know recent CPUs and falls back
//     to its Prescott (SSE3) kernels, 5x slower for fp32 GEMM; kcert names the best core the
//     CPU's instruction set supports. The core changes results at the ULP level, so it is
//     part of the environment fingerprint.
// A variable the user set is never overridden. Free of LibTorch headers.
#include <string>

namespace kcert::numerics {

struct ProcessPolicy {
  int threads = 1;                 // intra-op threads
  std::string threads_source;      // "--threads", "OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK", "cgroup quota", "CPU affinity"
  std::string omp_wait_policy;     // as in effect ("passive", or the user's value)
  std::string openblas_threads;    // as in effect
  std::string openblas_core;       // the core OpenBLAS runs ("SkylakeX"), "" without OpenBLAS
  std::string openblas_core_note;  // why: "selected by kcert (OpenBLAS detected Prescott)", "OPENBLAS_CORETYPE set by the user", "detected"
};

// The thread budget of this job: --threads when > 0, else OMP_NUM_THREADS, else
// SLURM_CPUS_PER_TASK, else the smaller of the CPU affinity mask and the cgroup CPU quota.
ProcessPolicy decide_threads(int requested);

// For commands that run kernels: sets the variables above where the user did not, and
// re-executes the binary (same arguments) when one of them changed, so that the libraries
// read them at load. Returns in the process that runs (with the policy in effect); does not
// return in the process it replaces. KCERT_NO_REEXEC=1 turns it off (then only the thread
// count applies).
void apply_process_policy(int argc, char** argv, int requested_threads);

// The policy in effect in this process (after apply_process_policy; else the defaults read now).
const ProcessPolicy& process_policy();

// The core kcert selects when OpenBLAS `detected` one of its generic fallbacks (Prescott,
// Nehalem, ...) on a CPU whose instruction set supports `cpu_best`; "" to leave it alone.
std::string choose_openblas_core(const std::string& detected, const std::string& cpu_best);

// Lowers the calling thread (only it, not the process) to the idle scheduling class, or to
// nice 19 where that is refused. There is no way back without privileges, so it is for
// threads that end after their work: the engine's background sweep. False if both failed.
bool run_this_thread_when_idle();

// The OpenBLAS core in use ("" when LibTorch does not run on OpenBLAS).
std::string openblas_core();

}  // namespace kcert::numerics
