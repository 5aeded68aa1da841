// Harness overhead: full run_case time for a case against the bare evaluation of the same
// kernels on the same replicates (draw the inputs, evaluate reference, production and the
// oracle, plus the production under fp64 on the algebra replicates). The two are measured
// interleaved in one process (A B A B A B) and the medians compared, since the machine is
// noisy. Usage: bench_engine CASE.yaml [replicates] [repetitions] [batch] [sweep]
// (batch: replicates per kernel call on both sides; 0 or absent = the engine's automatic one;
// sweep: after or beside, where the engine sweeps a batch, engine.hpp SweepSchedule; absent =
// the engine's choice for the device)
#include "harness/numerics/torch_api.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "harness/engine/draw.hpp"
#include "harness/engine/row_blocks.hpp"
#include "harness/engine/engine.hpp"
#include "harness/testcase/loader.hpp"
#include "harness/numerics/process_policy.hpp"
#include "harness/numerics/runtime.hpp"
#include "harness/stats/random.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// R replicates from index 0; when the run also evaluated a confirmation stream (a gate asked
// for fresh replicates to confirm its verdict), `extra` more, so both sides evaluate as many.
struct Bare {
  double seconds = 0, draw = 0;
};
Bare bare_evaluation(const kcert::contract::TestCase& tc, const kcert::kernels::Registry& registry, std::int64_t batch,
                     std::uint64_t extra) {
  Bare out;
  const auto t0 = Clock::now();
  const auto& family = registry.family(tc.family);
  const auto& ref = registry.variant(tc.family, tc.reference.variant);
  const auto& prod = registry.variant(tc.family, tc.production.variant);
  const auto working = kcert::numerics::Precision::working(tc.probe.dtype);
  const auto exact = kcert::numerics::Precision::exact();
  const auto fixed = family.make_fixed(tc.probe, kcert::stats::derive_seed(tc.probe.seed, ~0ULL));
  kcert::kernels::KernelInputs fixed64;
  for (const auto& [n, t] : fixed.tensors()) fixed64.set(n, t.to(torch::kFloat64));
  torch::NoGradGuard no_grad;
  const auto R = static_cast<std::int64_t>(tc.gates.replicates + extra);
  for (std::int64_t done = 0; done < R; done += batch) {
    const auto b = std::min(batch, R - done);
    const auto td = Clock::now();
    // The same parallel draw as the engine's: the bare work done the best way it can be.
    const auto drawn = kcert::engine::draw_replicates(family, tc.probe, fixed, tc.probe.seed,
                                                      static_cast<std::uint64_t>(done), b);
    kcert::kernels::KernelInputs batch_64;
    for (const auto& [n, stacked] : drawn.tensors()) batch_64.set(n, stacked.to(torch::kFloat64));
    out.draw += std::chrono::duration<double>(Clock::now() - td).count();
    // Each variant as the engine evaluates it (row blocks where it does; engine/row_blocks.hpp).
    const auto run = [&](const kcert::kernels::Variant& v, const kcert::kernels::KernelInputs& fixed_part,
                         const kcert::kernels::KernelInputs& batch_part, const kcert::numerics::Precision& policy,
                         const kcert::kernels::ParamMap& params) {
      return kcert::engine::evaluate_variant(family, v, fixed_part, batch_part, policy, params, torch::kCPU);
    };
    auto a = run(ref, fixed, drawn, working, tc.reference.params);
    auto p = run(prod, fixed, drawn, working, tc.production.params);
    auto o = run(ref, fixed64, batch_64, exact, tc.reference.params);
    if (done < tc.gates.algebra_replicates) {
      const auto k = std::min<std::int64_t>(b, tc.gates.algebra_replicates - done);
      auto q = run(prod, fixed64, kcert::engine::narrow_batch(batch_64, 0, k), exact, tc.production.params);
    }
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// User plus system CPU seconds of the whole process (every thread).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_engine CASE.yaml [replicates] [repetitions] [batch] [after|beside]\n");
    return 2;
  }
  // The process policy kcert runs under (passive OpenMP waiting, one OpenBLAS thread; a
  // re-exec when it changes the environment), so both sides are timed as a kcert run is.
  // KCERT_NO_REEXEC=1 times them under the libraries' defaults instead.
  kcert::numerics::apply_process_policy(argc, argv, 0);
  kcert::numerics::configure_allocator();
  kcert::numerics::configure_intra_op_threads(kcert::numerics::process_policy().threads);
  kcert::kernels::Registry registry;
  kcert::kernels::register_builtin_families(registry);
  kcert::testcase::FamilySchemas schemas;
  for (const auto& n : registry.family_names()) schemas.emplace(n, registry.family(n).schema());
  auto tc = kcert::testcase::load_testcase(argv[1], schemas);
  if (argc > 2) tc.gates.replicates = std::stoull(argv[2]);
  tc.gates.max_replicates = tc.gates.replicates;  // same replicates on both sides: no growth
  tc.gates.algebra_replicates = std::min<int>(tc.gates.algebra_replicates, static_cast<int>(tc.gates.replicates));
  const int reps = argc > 3 ? std::stoi(argv[3]) : 3;
  kcert::engine::RunOptions options;
  options.batch = argc > 4 ? std::stoll(argv[4]) : 0;
  const std::string sweep = argc > 5 ? argv[5] : "";
  if (sweep == "after") {
    options.sweep = kcert::engine::SweepSchedule::after_kernels;
  } else if (sweep == "beside") {
    options.sweep = kcert::engine::SweepSchedule::beside_next_batch;
  } else if (!sweep.empty()) {
    std::fprintf(stderr, "bench_engine: sweep must be 'after' or 'beside', not '%s'\n", sweep.c_str());
    return 2;
  }

  std::vector<double> harness_cpu, bare_cpu, harness_faults, bare_faults, harness, bare, bare_draw, kernels, observe, draw, stats;
  std::int64_t batch = 0;
  std::uint64_t evaluated = 0;
  for (int i = 0; i < reps; ++i) {
    const auto f0 = minor_faults();
    const auto c0 = cpu_seconds();
    const auto r = kcert::engine::run_case(tc, registry, options);
    harness_faults.push_back(static_cast<double>(minor_faults() - f0));
    harness_cpu.push_back(cpu_seconds() - c0);
    harness.push_back(r.runtime.seconds);
    kernels.push_back(r.runtime.kernel_seconds);
    observe.push_back(r.runtime.observe_seconds);
    draw.push_back(r.runtime.draw_seconds);
    stats.push_back(r.runtime.stats_seconds);
    batch = r.runtime.batch;
    evaluated = r.replicates;
    const auto extra = r.replicates > tc.gates.replicates ? r.replicates - tc.gates.replicates : 0;
    const auto f1 = minor_faults();
    const auto c1 = cpu_seconds();
    const auto b = bare_evaluation(tc, registry, batch, extra);
    bare_faults.push_back(static_cast<double>(minor_faults() - f1));
    bare_cpu.push_back(cpu_seconds() - c1);
    bare.push_back(b.seconds);
    bare_draw.push_back(b.draw);
  }
  const double h = median(harness), b = median(bare), k = median(kernels);
  const auto& policy = kcert::numerics::process_policy();
  std::printf("case %s: R = %llu replicates, batch %lld, %d threads, %d repetitions (medians)\n", tc.id.c_str(),
              static_cast<unsigned long long>(tc.gates.replicates), static_cast<long long>(batch), at::get_num_threads(), reps);
  std::printf("  replicates evaluated    %8llu  (R plus any confirmation replicates; bare evaluates as many)\n",
              static_cast<unsigned long long>(evaluated));
  std::printf("  OMP_WAIT_POLICY %s, OpenBLAS threads %s\n", policy.omp_wait_policy.c_str(), policy.openblas_threads.c_str());
  std::printf("  kcert run_case          %8.3f s  (%.0f replicates/s)\n", h, tc.gates.replicates / h);
  std::printf("  bare draw + evaluation  %8.3f s\n", b);
  std::printf("  draw inside bare        %8.3f s\n", median(bare_draw));
  std::printf("  kernels inside run_case %8.3f s\n", k);
  std::printf("  draw inside run_case    %8.3f s\n", median(draw));
  std::printf("  sweep and gates waited  %8.3f s  (what the kernels did not hide; on the CPU the whole sweep)\n", median(observe));
  std::printf("  statistics (decisions)  %8.3f s  (tail fits, bootstrap, bias decision)\n", median(stats));
  std::printf("  CPU seconds             %8.3f harness, %.3f bare (all threads)\n", median(harness_cpu), median(bare_cpu));
  std::printf("  minor page faults       %8.0f harness, %.0f bare\n", median(harness_faults), median(bare_faults));
  std::printf("  ratio harness / bare    %8.2f\n", h / b);
  std::printf("  ratio harness / kernels %8.2f\n", h / k);
  return 0;
}
