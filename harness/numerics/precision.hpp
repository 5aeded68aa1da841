#pragma once
// The precision policy (method.md §1). A kernel variant is a pure function of
// (inputs, Precision) and never names a dtype: it writes `p.up(x)`, `p.round_w(t)`,
// `p.trunc_w(t)`, `p.tf32(t)`, `p.constant_w(v)`. Under the working policy these are the
// real roundings; under the exact (fp64) policy every one of them is exact, so the same
// code yields the oracle and the algebra gate's evaluations.
#include "harness/numerics/torch_api.hpp"

#include <memory>
#include <optional>
#include <string>

#include "harness/stats/ulp.hpp"

namespace kcert::numerics {

class Precision {
 public:
  // Working dtype W from its format; accumulation in fp32 (fp64 when W is fp64).
  static Precision working(stats::FloatFormat format);
  // Everything in fp64 and every policy operation exact: the oracle and the algebra gate.
  static Precision exact();
  // The exact policy with every near tie of a selection resolved the other way: the
  // second oracle of a selecting family (Family::selects). A decision is a near tie when
  // its fp64 margin is within the resolution of the format the working kernel decides in
  // (`working` sets W; a kernel that decides in fp32 uses fp32). Kernels that do not
  // select never look at it.
  static Precision exact_flipping_near_ties(stats::FloatFormat working);

  // Where a selecting kernel, run under exact_noting_near_ties, notes the decisions it found
  // to be near ties: the second oracle then needs computing only there (issue 37: the whole
  // flipped run cost a router control a quarter of its time for a few near ties in 10^5).
  struct NearTieNotes {
    // bool, one entry per decision (the kernel's output shape without its last dimension).
    torch::Tensor rows;
    // How many selections noted: a kernel that selects more than once notes more than once,
    // and its rows then say nothing a caller can rely on.
    int selections = 0;
  };
  // The exact policy, computing exactly what exact() computes (no tie is flipped), with the
  // near ties a selecting kernel finds noted in `notes` (the same margin rule as
  // exact_flipping_near_ties, so a noted row is exactly a row the flipping policy flips).
  // A kernel that does not note leaves `notes` empty: the caller then runs it whole.
  static Precision exact_noting_near_ties(stats::FloatFormat working, std::shared_ptr<NearTieNotes> notes);

  // Under exact_flipping_near_ties and exact_noting_near_ties: the working format W of the
  // case, whose resolution decides what a near tie is.
  std::optional<stats::FloatFormat> near_tie_format() const { return near_tie_working_; }
  bool flips_near_ties() const { return near_tie_working_.has_value() && !near_tie_notes_; }
  // Under exact_noting_near_ties: where a selecting kernel notes its near ties (the policy
  // is passed by const reference, the notes are the caller's to read afterwards).
  NearTieNotes* near_tie_notes() const { return near_tie_notes_.get(); }

  bool is_exact() const { return exact_; }
  torch::Dtype working_dtype() const { return working_; }
  torch::Dtype accumulation_dtype() const { return accumulation_; }
  // The format the policy rounds to (fp64 under the exact policy).
  stats::FloatFormat format() const { return format_; }
  std::string name() const;

  // Round to the working dtype, round-to-nearest-even. Exact policy: to fp64, no rounding.
  torch::Tensor round_w(const torch::Tensor& t) const;
  // Upcast to the accumulation dtype (exact for W-valued tensors).
  torch::Tensor up(const torch::Tensor& t) const;
  // Round toward zero to the working dtype (a truncating store). Exact policy: to fp64.
  torch::Tensor trunc_w(const torch::Tensor& t) const;
  // Round an fp32 GEMM operand to TF32 (10 explicit mantissa bits, nearest, ties away
  // from zero, as the hardware does). Result in fp32. Exact policy: to fp64, no rounding.
  torch::Tensor tf32(const torch::Tensor& t) const;
  // A constant as a kernel written in W would build it (`tensor(v, dtype=W)`): v rounded
  // to W. Exact policy: v itself.
  double constant_w(double v) const;

 private:
  Precision(torch::Dtype working, torch::Dtype accumulation, stats::FloatFormat format, bool exact)
      : working_(working), accumulation_(accumulation), format_(format), exact_(exact) {}
  torch::Dtype working_;
  torch::Dtype accumulation_;
  stats::FloatFormat format_;
  bool exact_;
  std::optional<stats::FloatFormat> near_tie_working_;
  std::shared_ptr<NearTieNotes> near_tie_notes_;
};

torch::Dtype to_dtype(stats::FloatFormat format);

}  // namespace kcert::numerics
