#pragma once
#include <string>
// Gate ① (method.md §2): do reference and production compute the same real function? Both
// run under the fp64 policy on the first N_alg replicates; PASS when every relative
// discrepancy d_r is within tol_alg, the NaN/Inf patterns agree and no structural defect of a
// gradient was observed. A failing gate's reason may carry what the production's own
// forward says of its backward (observe_own_forward).
#include "harness/gates/gate.hpp"
#include "harness/gates/results.hpp"

namespace kcert::gates {

class AlgebraGate final : public Gate {
 public:
  AlgebraGate(std::uint64_t replicates, double tolerance) : wanted_(replicates), tolerance_(tolerance) {}

  // The production cannot run under the exact policy (an opaque kernel): the gate asks for no
  // fp64 run and decides "not applicable" with this reason.
  void not_applicable(std::string why) {
    wanted_ = 0;
    not_applicable_ = std::move(why);
  }

  // A gradient's findings beside the fp64 comparison (issue 51, item 4: observations, not an
  // engine rewriting the verdict). A structural defect (a gradient missing, or of another
  // shape or dtype, judged as zeros) fails the gate with `problem` as its reason, whatever the
  // comparison says; the first one kept.
  void observe_structural(const std::string& problem) {
    if (structural_.empty()) structural_ = problem;
  }
  // Where the production declares its own backward: how far it is, relative, from autograd of
  // the production's own forward (fp64, the gate's replicates). A failing gate's reason then
  // tells a wrong backward (beyond the tolerance) from the backward of a different function.
  void observe_own_forward(double discrepancy) { own_forward_ = discrepancy; }

  // How many of the `count` replicates starting at `first` need the fp64 production run.
  std::uint64_t fp64_replicates(std::uint64_t first, std::uint64_t count) const;

  void observe(const ReplicateBatch& batch) override;
  std::uint64_t wants_more(std::uint64_t done) override { return done < wanted_ ? wanted_ - done : 0; }
  AlgebraResult decide() const;

 private:
  std::uint64_t wanted_;
  double tolerance_;
  double worst_ = 0.0;
  Location where_;
  bool pattern_mismatch_ = false;
  int replicates_ = 0;
  std::string not_applicable_;
  std::string structural_;
  double own_forward_ = -1.0;  // negative: not measured
};

}  // namespace kcert::gates
