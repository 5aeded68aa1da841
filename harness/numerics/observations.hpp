#pragma once
// Reduces one batch of kernel outputs to the numbers the gates need (method.md §3-§4):
// per replicate and bucket the means of Δ = prod - ref, M = sign(ref)·(prod - ref) and
// |oracle|, and E_prod, E_ref and the output peak for K̂. All in fp64 on the CPU, in a
// fixed order, so results do not depend on threads or batch size.
#include "harness/numerics/torch_api.hpp"

#include <memory>
#include <optional>
#include <vector>

#include "harness/gates/observation.hpp"
#include "harness/numerics/observation_sweep.hpp"

namespace kcert::numerics {

struct BucketLayout {
  std::vector<std::int64_t> ids;     // bucket of each element of one replicate's output
  std::vector<std::int64_t> counts;  // elements per bucket
  std::int64_t buckets = 0;
  detail::BucketPattern pattern = detail::BucketPattern::general;
};

// Validates the family's bucket ids (shape, range) and counts them.
BucketLayout make_bucket_layout(const torch::Tensor& ids, at::IntArrayRef output_shape);

struct BatchObservations {
  std::vector<gates::ReplicateObservation> replicates;
  std::optional<gates::NonFinite> nonfinite;  // the first non-finite value, if any
};

// torch.testing.assert_close's default tolerances for the working dtype (rtol, atol).
std::pair<double, double> assert_close_tolerances(stats::FloatFormat working);

// ref, prod: W-valued [B, ...]; oracle: fp64 [B, ...]; first_replicate numbers the batch.
// oracle_alt (selecting families, else undefined): the oracle with near ties resolved the
// other way (Precision::exact_flipping_near_ties); in each row (last dimension) where the
// two differ, each side is measured against the one it is closer to (max |error| in the
// row), and ReplicateObservation::selection counts the decisions.
// parallel: sweep the replicates on LibTorch's intra-op threads; false sweeps them one after
// another on the calling thread.
BatchObservations observe(const torch::Tensor& ref, const torch::Tensor& prod, const torch::Tensor& oracle,
                          const torch::Tensor& oracle_alt, const BucketLayout& layout, std::int64_t first_replicate,
                          at::IntArrayRef output_shape, stats::FloatFormat working, bool parallel = true);

// observe() as a job that any number of threads can share, one replicate at a time: the
// engine gives a batch to a thread of low priority, which sweeps in the gaps the next
// batch's kernels leave on the cores, and finish() sweeps whatever is left on the intra-op
// threads. A replicate is always swept whole by one thread in element order, so the result
// is the same bits however the replicates were shared out.
class BatchSweep {
 public:
  // Prepares the batch on the calling thread (contiguous CPU copies where needed, and a
  // selecting family's side oracles, which are LibTorch operations); the tensors are kept,
  // and `layout` is referred to: it must outlive the job.
  BatchSweep(const torch::Tensor& ref, const torch::Tensor& prod, const torch::Tensor& oracle,
             const torch::Tensor& oracle_alt, const BucketLayout& layout, std::int64_t first_replicate,
             at::IntArrayRef output_shape, stats::FloatFormat working);
  BatchSweep(const BatchSweep&) = delete;
  BatchSweep& operator=(const BatchSweep&) = delete;
  ~BatchSweep();

  // Sweeps replicates no other thread has taken until none is left. Any thread, any time.
  void help();
  // Sweeps what is left (on the intra-op threads when `parallel`, else on this thread),
  // waits for the replicates other threads are sweeping, and returns the observations.
  // Call once.
  BatchObservations finish(bool parallel = true);
  // Replicates no other thread had taken when finish() began (tests, benchmarks).
  std::int64_t swept_at_finish() const { return swept_at_finish_; }

 private:
  struct Prepared;
  void sweep_one(std::int64_t b);
  std::unique_ptr<Prepared> p_;
  std::int64_t swept_at_finish_ = 0;
};

// The algebra gate's comparison (method.md §2) of the oracle (the reference under the fp64
// policy) with production under the fp64 policy, one observation per replicate [B, ...].
std::vector<gates::AlgebraObservation> compare_fp64(const torch::Tensor& ref64, const torch::Tensor& prod64,
                                                    std::int64_t first_replicate, const BucketLayout& layout,
                                                    at::IntArrayRef output_shape);

// Flat element index → per-dimension index.
std::vector<std::int64_t> unravel(std::int64_t flat, at::IntArrayRef shape);

}  // namespace kcert::numerics
