#pragma once
// The interface every gate (and the baseline checks) presents to the evaluation loop: it
// observes replicate batches in replicate order and says how many more replicates it
// needs. Each gate then decides on its own result type (results.hpp).
#include <cstdint>

#include "harness/gates/observation.hpp"

namespace kcert::gates {

// Replicates come from two disjoint seed streams: the main one (replicate r, r < R_max) and
// a confirmation stream (replicates kConfirmationBase + j), drawn only after every gate's
// main need is met, for a gate that confirms a verdict reached after repeated looks.
inline constexpr std::uint64_t kConfirmationBase = std::uint64_t{1} << 62;

class Gate {
 public:
  virtual ~Gate() = default;
  // Batches arrive in replicate order, each exactly once.
  virtual void observe(const ReplicateBatch& batch) = 0;
  // How many replicates beyond `done` this gate still needs; 0 when it has enough. Not
  // const: a gate with its own stopping rule (the variance gate) takes its look here, once
  // every gate's earlier need has been met.
  virtual std::uint64_t wants_more(std::uint64_t done) = 0;
  // Replicates wanted from the confirmation stream once the main stream is done; 0: none.
  virtual std::uint64_t wants_confirmation() const { return 0; }
};

}  // namespace kcert::gates
