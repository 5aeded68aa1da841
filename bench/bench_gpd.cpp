// One GPD fit plus B = 200 exceedance-bootstrap refits on 100 exceedances: the variance
// gate's statistical cost per look. Compare with bench/gpd_scipy_bench.py (same work in
// SciPy) on the same machine and report the ratio.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "harness/stats/gpd.hpp"
#include "harness/stats/random.hpp"
#include "harness/stats/tail.hpp"

namespace {

std::vector<double> exceedances(std::size_t n) {
  kcert::stats::SplitMix64 rng(2026);
  std::vector<double> y(n);
  // GPD(ξ = -0.2, σ = 0.3) by inversion.
  for (auto& v : y) v = 0.3 / -0.2 * (std::pow(1.0 - rng.uniform(), 0.2) - 1.0);
  return y;
}

void BM_FitPlus200BootstrapRefits(benchmark::State& state) {
  const auto y = exceedances(100);
  for (auto _ : state) {
    auto fit = kcert::stats::fit_gpd(y, 0.0);
    benchmark::DoNotOptimize(fit);
    std::vector<double> r(y.size());
    for (std::uint64_t b = 0; b < 200; ++b) {
      kcert::stats::SplitMix64 rng(kcert::stats::derive_seed(1, b));
      for (auto& v : r) v = y[rng.below(y.size())];
      auto refit = kcert::stats::fit_gpd(r, 0.0);
      benchmark::DoNotOptimize(refit);
    }
  }
}
BENCHMARK(BM_FitPlus200BootstrapRefits)->Unit(benchmark::kMillisecond);

void BM_SingleFit100(benchmark::State& state) {
  const auto y = exceedances(100);
  for (auto _ : state) benchmark::DoNotOptimize(kcert::stats::fit_gpd(y, 0.0));
}
BENCHMARK(BM_SingleFit100)->Unit(benchmark::kMicrosecond);

void BM_AnalyzeTail1024(benchmark::State& state) {
  // A whole variance-gate look: R = 1024 K-hat, u at q0.90 (≈100 exceedances), B = 200.
  kcert::stats::SplitMix64 rng(9);
  std::vector<double> k(1024);
  for (auto& v : k) v = 1.0 - 0.1 * std::log(1.0 - rng.uniform());
  for (auto _ : state) benchmark::DoNotOptimize(kcert::stats::analyze_tail(k, {}));
}
BENCHMARK(BM_AnalyzeTail1024)->Unit(benchmark::kMillisecond);

}  // namespace
