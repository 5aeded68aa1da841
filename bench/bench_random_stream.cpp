// The input draw's generator: ATen's CPU normal sampler (what kcert drew inputs with before)
// against kcert's RandomStream with each instruction set's code, on one thread, 2^21 fp32
// normals per iteration (one 512 x 4096 RMSNorm replicate). items_per_second is values/s;
// report the ratios of one run (docs/benchmarks.md).
#include <benchmark/benchmark.h>
#include "harness/numerics/torch_api.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <vector>

#include "harness/stats/random_stream.hpp"

namespace {

constexpr std::int64_t kValues = 512 * 4096;

void BM_AtenRandn(benchmark::State& state) {
  at::set_num_threads(1);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto out = torch::empty({kValues}, torch::kFloat32);
  for (auto _ : state) {
    at::normal_out(out, 0.0, 1.0, {kValues}, gen);
    benchmark::DoNotOptimize(out.data_ptr<float>());
  }
  state.SetItemsProcessed(state.iterations() * kValues);
}
BENCHMARK(BM_AtenRandn)->Unit(benchmark::kMillisecond);

void BM_StreamNormal(benchmark::State& state, const char* isa) {
#if defined(__x86_64__)
  if ((std::string(isa) == "avx2" && !__builtin_cpu_supports("avx2")) ||
      (std::string(isa) == "avx512" && !__builtin_cpu_supports("avx512f"))) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
#endif
  std::vector<float> out(kValues);
  std::uint64_t group = 0;
  for (auto _ : state) {
    kcert::stats::detail::normals_with(isa, 1, 2, group, kValues / 64, out.data());
    group += kValues / 64;
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kValues);
}
BENCHMARK_CAPTURE(BM_StreamNormal, generic, "generic")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamNormal, avx2, "avx2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamNormal, avx512, "avx512")->Unit(benchmark::kMillisecond);

}  // namespace
