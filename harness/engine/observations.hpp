#pragma once
// Reduces one batch of kernel outputs to the numbers the gates need (method.md §3-§4):
// per replicate and bucket the means of Δ = prod - ref, M = sign(ref)·(prod - ref) and
// |oracle|, and E_prod, E_ref and the output peak for K̂. All in fp64 on the CPU, in a
// fixed order, so results do not depend on threads or batch size.
#include <torch/torch.h>

#include <optional>
#include <vector>

#include "harness/engine/case_result.hpp"
#include "harness/engine/observation_sweep.hpp"

namespace kcert::engine {

struct BucketLayout {
  std::vector<std::int64_t> ids;     // bucket of each element of one replicate's output
  std::vector<std::int64_t> counts;  // elements per bucket
  std::int64_t buckets = 0;
  detail::BucketPattern pattern = detail::BucketPattern::general;
};

// Validates the family's bucket ids (shape, range) and counts them.
BucketLayout make_bucket_layout(const torch::Tensor& ids, at::IntArrayRef output_shape);

struct ReplicateObservation {
  std::vector<double> delta;        // per bucket
  std::vector<double> magnitude;    // per bucket
  std::vector<double> abs_oracle;   // per bucket, mean |oracle|
  double e_prod = 0.0, e_ref = 0.0, peak = 0.0;
  double rmse_prod = 0.0, rmse_ref = 0.0;  // against the oracle
  double close_violations = 0.0;           // elements outside assert_close's tolerances
};

struct BatchObservations {
  std::vector<ReplicateObservation> replicates;
  std::optional<NonFinite> nonfinite;  // the first non-finite value, if any
};

// torch.testing.assert_close's default tolerances for the working dtype (rtol, atol).
std::pair<double, double> assert_close_tolerances(stats::FloatFormat working);

// ref, prod: W-valued [B, ...]; oracle: fp64 [B, ...]; first_replicate numbers the batch.
BatchObservations observe(const torch::Tensor& ref, const torch::Tensor& prod, const torch::Tensor& oracle,
                          const BucketLayout& layout, std::int64_t first_replicate, at::IntArrayRef output_shape,
                          stats::FloatFormat working);

// K̂ = max(0, (E_prod - ε)/E_ref) with ε one true ULP of W at the output peak; 0 when
// E_prod ≤ ε, +∞ when E_ref = 0 < E_prod - ε.
double k_hat(const ReplicateObservation& o, stats::FloatFormat working);

// Flat element index → per-dimension index.
std::vector<std::int64_t> unravel(std::int64_t flat, at::IntArrayRef shape);

}  // namespace kcert::engine
