#pragma once
// The checks people use today (docs/baselines.md), computed on the same replicates as the
// gates so the falsifiability table can set them side by side: torch.testing.assert_close,
// FlashAttention's 2x + 1 ULP rule and dynamo's fp64 RMSE rule. An observer that never
// gates: its result decides nothing.
#include "harness/gates/gate.hpp"
#include "harness/gates/results.hpp"

namespace kcert::gates {

class BaselineChecks final : public Gate {
 public:
  // `replicates`: the bias gate's R (the fractions are over the same replicates).
  BaselineChecks(std::uint64_t replicates, stats::FloatFormat working) : replicates_(replicates), working_(working) {}

  void observe(const ReplicateBatch& batch) override;
  std::uint64_t wants_more(std::uint64_t) override { return 0; }
  Baselines decide() const;

 private:
  std::uint64_t replicates_;
  stats::FloatFormat working_;
  Baselines first_;
  std::uint64_t close_ = 0, fa_ = 0, dyn_ = 0, n_ = 0;
};

}  // namespace kcert::gates
