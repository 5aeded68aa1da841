// The observation sweep alone, per instruction set, on #16's shape (512 rows x 4096
// channels, bf16 ref and prod, fp64 oracle, one bucket per channel). "cold": eight
// replicates (192 MiB) swept in turn, so every read comes from memory, as in a run, where
// the kernels wrote the outputs a batch ago; "hot": one 64-channel replicate that stays in
// L2, the sweep's arithmetic alone. Reports ns per element (docs/benchmarks.md).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "harness/numerics/observation_sweep.hpp"
#include "harness/stats/random_stream.hpp"

namespace {

using kcert::numerics::detail::BucketPattern;
using kcert::numerics::detail::ElementType;

struct Replicates {
  std::int64_t rows, buckets, count;
  std::vector<kcert::numerics::detail::Bf16> ref, prod;
  std::vector<double> oracle;
  Replicates(std::int64_t rows_, std::int64_t buckets_, std::int64_t count_)
      : rows(rows_), buckets(buckets_), count(count_) {
    const auto n = static_cast<std::size_t>(rows * buckets * count);
    std::vector<float> x(n);
    kcert::stats::RandomStream(16).normal(x.data(), n);
    ref.resize(n);
    prod.resize(n);
    oracle.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &x[i], sizeof bits);
      ref[i].bits = static_cast<std::uint16_t>(bits >> 16);
      prod[i].bits = static_cast<std::uint16_t>((bits >> 16) + (i % 3 == 0 ? 1 : 0));  // an ULP apart in a third
      oracle[i] = x[i];
    }
  }
};

void sweep_bench(benchmark::State& state, const char* isa, std::int64_t buckets, std::int64_t count) {
  __builtin_cpu_init();
  if (std::strcmp(isa, "avx512") == 0 && !__builtin_cpu_supports("avx512bw")) return state.SkipWithError("no AVX-512");
  if (std::strcmp(isa, "avx2") == 0 && !__builtin_cpu_supports("avx2")) return state.SkipWithError("no AVX2");
  static const Replicates cold(512, 4096, 8), hot(512, 64, 1);
  const Replicates& data = buckets == cold.buckets ? cold : hot;
  const std::int64_t n = data.rows * data.buckets;
  std::vector<double> delta(static_cast<std::size_t>(data.buckets)), magnitude(delta.size()), abs_oracle(delta.size());
  std::int64_t k = 0;
  for (auto _ : state) {
    std::fill(delta.begin(), delta.end(), 0.0);
    std::fill(magnitude.begin(), magnitude.end(), 0.0);
    std::fill(abs_oracle.begin(), abs_oracle.end(), 0.0);
    kcert::numerics::detail::SweepOutput out{delta.data(), magnitude.data(), abs_oracle.data()};
    const std::int64_t at = (k++ % count) * n;
    kcert::numerics::detail::sweep_with(isa, data.ref.data() + at, data.prod.data() + at, ElementType::bf16,
                                        data.oracle.data() + at, data.oracle.data() + at, data.oracle.data() + at, n,
                                        nullptr, data.buckets, BucketPattern::periodic, 1.6e-2, 1e-5, out);
    benchmark::DoNotOptimize(out.sse_prod);
    benchmark::DoNotOptimize(delta.data());
  }
  // Seconds per element (printed with an SI prefix: "1.5n" is 1.5 ns).
  state.counters["per_element"] = benchmark::Counter(static_cast<double>(state.iterations() * n),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// The memory read bandwidth a sweep's floor is taken against (docs/benchmarks.md): a plain sum
// over 256 MiB per thread, far past the L3, on one thread and on two at once. Integer words
// with eight accumulators, so the loop is bound by memory, not by an add's latency.
void read_bandwidth(benchmark::State& state) {
  const std::size_t n = (std::size_t{256} << 20) / sizeof(std::uint64_t);
  std::vector<std::uint64_t> data(n, 1);
  for (auto _ : state) {
    std::uint64_t acc[8] = {};
    for (std::size_t i = 0; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += data[i + static_cast<std::size_t>(j)];
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(std::uint64_t)));
}

}  // namespace

BENCHMARK(read_bandwidth)->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sweep_bench, cold_avx512, "avx512", 4096, 8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sweep_bench, cold_avx2, "avx2", 4096, 8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sweep_bench, cold_generic, "generic", 4096, 8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sweep_bench, hot_avx512, "avx512", 64, 1)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(sweep_bench, hot_avx2, "avx2", 64, 1)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(sweep_bench, hot_generic, "generic", 64, 1)->Unit(benchmark::kMicrosecond);
