#include "harness/gates/baseline_checks.hpp"

#include <algorithm>

namespace kcert::gates {

void BaselineChecks::observe(const ReplicateBatch& batch) {
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
  if (n_ > 0) {
    b.assert_close.fraction = static_cast<double>(close_) / static_cast<double>(n_);
    b.flash_attention.fraction = static_cast<double>(fa_) / static_cast<double>(n_);
    b.dynamo_fp64.fraction = static_cast<double>(dyn_) / static_cast<double>(n_);
  }
  return b;
}

}  // namespace kcert::gates
