#include "harness/gates/baseline_checks.hpp"

#include <algorithm>
#include <limits>

namespace kcert::gates {

void BaselineChecks::observe(const ReplicateBatch& batch) {
  if (batch.nonfinite && batch.nonfinite->side.find("fp64") == std::string::npos) {
    // A NaN or inf in a W output or the oracle: the sweep stops there and keeps no replicate
    // of the batch. Each of the three checks fails on it as today's code does: assert_close
    // (equal_nan=False) counts the element as a mismatch, and FlashAttention's and dynamo's
    // rules compare a NaN error (max or RMSE) with `<=`, which is false.
    const auto r = static_cast<std::uint64_t>(std::max<std::int64_t>(0, batch.nonfinite->where.replicate));
    if (r < replicates_) {
      constexpr double inf = std::numeric_limits<double>::infinity();
      if (r == 0) first_ = Baselines{{true, 0.0, inf}, {true, 0.0, inf}, {true, 0.0, inf}};
      ++close_;
      ++fa_;
      ++dyn_;
      ++n_;
    }
    return;
  }
  auto r = batch.first;
  for (const auto& o : batch.replicates) {
    if (r >= replicates_) break;
    const double eps = stats::ulp_spacing(std::min(o.peak, stats::max_finite(working_)), working_);
    const double fa_allowed = 2.0 * o.e_ref + eps;
    const double dyn_allowed = 3.0 * o.rmse_ref + 1e-5;
    const bool close = o.close_violations > 0.0, fa = o.e_prod > fa_allowed, dyn = o.rmse_prod > dyn_allowed;
    if (r == 0) {  // what a user running the check once would see
      first_.assert_close = {close, 0.0, o.close_violations};
      first_.flash_attention = {fa, 0.0, o.e_prod / fa_allowed};
      first_.dynamo_fp64 = {dyn, 0.0, o.rmse_prod / dyn_allowed};
    }
    close_ += close;
    fa_ += fa;
    dyn_ += dyn;
    ++n_;
    ++r;
  }
}

Baselines BaselineChecks::decide() const {
  Baselines b = first_;
  b.assert_close.replicates = b.flash_attention.replicates = b.dynamo_fp64.replicates = n_;
  if (n_ > 0) {
    b.assert_close.fraction = static_cast<double>(close_) / static_cast<double>(n_);
    b.flash_attention.fraction = static_cast<double>(fa_) / static_cast<double>(n_);
    b.dynamo_fp64.fraction = static_cast<double>(dyn_) / static_cast<double>(n_);
  }
  return b;
}

}  // namespace kcert::gates
