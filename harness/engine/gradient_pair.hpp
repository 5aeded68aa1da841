#pragma once
// The kernel pair of a backward case, for one gradient (issue 31): per replicate, the
// upstream-gradient probe dy drawn from kcert's own stream and rounded to W, then the VJP of
// the reference and of the production at the working precision and the oracle (the fp64 VJP
// of the reference's real function at the W-rounded inputs and dy). Each replicate runs on its
// own (a batch of one) so that a fixed input's gradient (a weight's) is that replicate's own
// sum over its tokens, not a sum over the batch.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/contract/test_case.hpp"
#include "harness/engine/batch_pipeline.hpp"
#include "harness/engine/case_result.hpp"
#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/numerics/precision.hpp"

namespace kcert::engine {

// One replicate's upstream gradient dy in fp64 (before rounding to W), shaped like the
// reference's output y64, from the replicate's own stream (contract::BackwardProbe: kinds and
// stress rows). Rows are all axes but the last, flattened.
torch::Tensor draw_dy(kernels::InputStream& stream, const torch::Tensor& y64, const contract::BackwardProbe& probe);

class GradientPair final : public PairSource {
 public:
  GradientPair(const contract::TestCase& tc, const kernels::Family& family, const kernels::Family::Gradient& gradient,
               const kernels::Variant& reference, const kernels::Variant& production, const kernels::KernelInputs& fixed_cpu,
               torch::Device device, std::uint64_t dy_seed, Runtime& runtime);

  PairOutputs evaluate(std::uint64_t first, std::int64_t count) override;
  torch::Tensor production_fp64(std::int64_t k) override;
  double last_input_bytes_fp64() const override { return input_bytes_fp64_; }
  // The structural defect and the own-forward discrepancy below, as the algebra gate's observations.
  void report_findings(gates::AlgebraGate& algebra) const override {
    if (!structural_.empty()) algebra.observe_structural(structural_);
    if (own_forward_discrepancy_ >= 0) algebra.observe_own_forward(own_forward_discrepancy_);
  }

  // The first structural defect of the production's gradient (missing, wrong shape or dtype),
  // or empty. Such a gradient is judged as zeros: the algebra gate fails it, and the reason is
  // this message (handed over by report_findings).
  const std::string& structural() const { return structural_; }
  // Where the production declares its own backward: the largest difference, relative to the
  // largest |value|, between it and autograd of the production's forward, both fp64 on the
  // algebra gate's replicates; negative when not measured. Tells a wrong backward of the right
  // function (large) from the backward of a different function (zero).
  double own_forward_discrepancy() const { return own_forward_discrepancy_; }

 private:
  torch::Tensor per_replicate(const torch::Tensor& g) const;
  torch::Tensor checked_production(torch::Tensor g, const torch::Tensor& like, const char* where);
  void check_upstream_gradient(const torch::Tensor& dy, const torch::Tensor& dy_w) const;

  const contract::TestCase& tc_;
  const kernels::Family& family_;
  const kernels::Family::Gradient& gradient_;
  const kernels::Variant& ref_;
  const kernels::Variant& prod_;
  torch::Device device_;
  // flipping_: the fp64 policy with near ties resolved the other way, the second oracle of a
  // selecting family (a tie W cannot resolve is not an error, as in the forward).
  numerics::Precision working_, exact_, flipping_;
  torch::Dtype working_dtype_;
  kernels::KernelInputs fixed_cpu_, fixed_w_, fixed_64_;
  bool fixed_input_ = false;  // the gradient's input is fixed across replicates (a weight)
  std::uint64_t dy_seed_;
  Runtime& runtime_;
  std::vector<std::string> wrt_;
  // The last batch's per-replicate fp64 inputs and dy (the algebra gate's run).
  std::vector<kernels::KernelInputs> last_64_;
  std::vector<torch::Tensor> last_dy64_;
  double input_bytes_fp64_ = 0;
  std::string structural_;
  double own_forward_discrepancy_ = -1.0;
};

}  // namespace kcert::engine
