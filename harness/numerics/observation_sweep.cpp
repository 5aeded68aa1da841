#include "harness/numerics/observation_sweep.hpp"
#include <string_view>
#include <vector>

namespace kcert::numerics::detail {

#define KCERT_SWEEP_DECLARE(isa)                                                                                  \
  namespace isa {                                                                                                \
  void sweep(const void* ref, const void* prod, ElementType type, const double* oracle, const double* oracle_ref, \
             const double* oracle_prod, std::int64_t n, const std::int64_t* ids, std::int64_t buckets,           \
             BucketPattern pattern, double rtol, double atol, double* scratch, SweepOutput& out);                 \
  }
KCERT_SWEEP_DECLARE(generic)
KCERT_SWEEP_DECLARE(avx2)
KCERT_SWEEP_DECLARE(avx512)

namespace {
using SweepFn = decltype(&generic::sweep);

SweepFn pick() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return &avx512::sweep;
  if (__builtin_cpu_supports("avx2")) return &avx2::sweep;
#endif
  return &generic::sweep;
}
}  // namespace

const char* sweep_isa() {
  const auto fn = pick();
  return fn == &avx512::sweep ? "avx512" : fn == &avx2::sweep ? "avx2" : "generic";
}

void sweep(const void* ref, const void* prod, ElementType type, const double* oracle, const double* oracle_ref,
           const double* oracle_prod, std::int64_t n, const std::int64_t* ids, std::int64_t buckets,
           BucketPattern pattern, double rtol, double atol, SweepOutput& out) {
  static const SweepFn fn = pick();
  thread_local std::vector<double> scratch;
  scratch.resize(static_cast<std::size_t>(kScratchPerBucket * buckets));
  fn(ref, prod, type, oracle, oracle_ref, oracle_prod, n, ids, buckets, pattern, rtol, atol, scratch.data(), out);
}

void sweep_with(const char* isa, const void* ref, const void* prod, ElementType type, const double* oracle,
                const double* oracle_ref, const double* oracle_prod, std::int64_t n, const std::int64_t* ids,
                std::int64_t buckets, BucketPattern pattern, double rtol, double atol, SweepOutput& out) {
  const std::string_view want = isa;
  const SweepFn fn = want == "avx512" ? &avx512::sweep : want == "avx2" ? &avx2::sweep : &generic::sweep;
  std::vector<double> scratch(static_cast<std::size_t>(kScratchPerBucket * buckets));
  fn(ref, prod, type, oracle, oracle_ref, oracle_prod, n, ids, buckets, pattern, rtol, atol, scratch.data(), out);
}

}  // namespace kcert::numerics::detail
