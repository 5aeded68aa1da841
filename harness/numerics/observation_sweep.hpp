#pragma once
// The per-element sweep behind observe(): plain loops over raw arrays, compiled apart with
// -O3, once per instruction set, so the channel-periodic case vectorizes. A non-finite value
// anywhere is reported in SweepOutput::finite (the caller then locates it with a slow scan).
#include <cstdint>

namespace kcert::numerics::detail {

enum class BucketPattern {
  periodic,  // bucket of element i is i % G (the last dimension is the bucket axis)
  blocked,   // bucket of element i is i / (n / G) (a leading dimension is the axis)
  general,   // an arbitrary id table
};

struct SweepOutput {
  double* delta;       // [G] sums of prod - ref
  double* magnitude;   // [G] sums of sign(ref)·(prod - ref)
  double* abs_oracle;  // [G] sums of |oracle|
  // [G] sums of each side's error against the primary oracle (not the side oracles, so that
  // err_prod - err_ref sums prod - ref), signed and as sign(ref)·error: the bias gate's
  // attribution (which side the oracle agrees with, method.md §3).
  double* err_ref;
  double* err_ref_magnitude;
  double* err_prod;
  double* err_prod_magnitude;
  double e_prod = 0.0, e_ref = 0.0, peak = 0.0;
  double sse_prod = 0.0, sse_ref = 0.0;  // sums of squared errors against the oracle (RMSE baselines)
  double close_violations = 0.0;         // elements failing |prod - ref| <= atol + rtol·|ref|
  bool finite = true;  // false: some input was NaN or ±inf and the sums are meaningless
};

// Doubles of scratch memory the sweep needs per bucket (the periodic layout's per-bucket
// maxima, squared errors and tolerance violations).
inline constexpr std::int64_t kScratchPerBucket = 6;

// How ref and prod are stored: fp64, fp32, or bfloat16 bits (the sweep widens them itself).
enum class ElementType { f64, f32, bf16 };
struct Bf16 {
  std::uint16_t bits;
};

// One replicate: n elements of ref and prod (W values, exact in fp64) and the oracles.
// `oracle` gives the ULP scale (|oracle|, peak); errors are taken against `oracle_ref` and
// `oracle_prod`, which are `oracle` itself except in a selecting family's near-tie rows
// (kernels::Family::selects). rtol, atol: the assert_close tolerances counted in
// close_violations.
// Runs the copy compiled for the best instruction set this CPU has (AVX-512, AVX2, or the
// baseline x86-64); all copies give the same bits.
void sweep(const void* ref, const void* prod, ElementType type, const double* oracle, const double* oracle_ref,
           const double* oracle_prod, std::int64_t n, const std::int64_t* ids, std::int64_t buckets,
           BucketPattern pattern, double rtol, double atol, SweepOutput& out);
// The instruction set sweep() runs ("avx512", "avx2", "generic").
const char* sweep_isa();
// One named copy, for the test that all copies agree (the CPU must support it).
void sweep_with(const char* isa, const void* ref, const void* prod, ElementType type, const double* oracle,
                const double* oracle_ref, const double* oracle_prod, std::int64_t n, const std::int64_t* ids,
                std::int64_t buckets, BucketPattern pattern, double rtol, double atol, SweepOutput& out);

}  // namespace kcert::numerics::detail
