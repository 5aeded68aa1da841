#pragma once
// What the gates observe, as plain values (no LibTorch): numerics/ reduces each replicate's
// kernel outputs to these numbers, the engine hands them to every gate in a ReplicateBatch.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/stats/selection.hpp"
#include "harness/stats/ulp.hpp"

namespace kcert::gates {

// Where something happened in a case's outputs.
struct Location {
  std::int64_t replicate = -1;
  std::int64_t element = -1;        // flat index within one replicate's output
  std::vector<std::int64_t> index;  // the same, per output dimension (batch excluded)
  std::int64_t bucket = -1;         // on the case's bucket axis
};

// Per replicate, the selections a selecting family made (stats/selection.hpp).
using SelectionCounts = stats::SelectionCounts;

// One replicate at the working precision against the fp64 oracle (method.md §3-§4).
struct ReplicateObservation {
  std::vector<double> delta;        // per bucket, mean of prod - ref
  std::vector<double> magnitude;    // per bucket, mean of sign(ref)·(prod - ref)
  std::vector<double> abs_oracle;   // per bucket, mean |oracle|
  // Per bucket, each side's mean error against the oracle, signed (ref - oracle, prod - oracle)
  // and as sign(ref)·error: which of the two the oracle agrees with (bias attribution).
  std::vector<double> ref_error, ref_error_magnitude, prod_error, prod_error_magnitude;
  double e_prod = 0.0, e_ref = 0.0, peak = 0.0;  // ‖prod - oracle‖∞, ‖ref - oracle‖∞, max |oracle|
  double rmse_prod = 0.0, rmse_ref = 0.0;        // against the oracle
  double close_violations = 0.0;                 // elements outside assert_close's tolerances
  // The production's output is the reference's, bit for bit, in this replicate: it amplifies
  // nothing (K̂ = 0), whatever each side's distance to the oracle (issue 54: two bit-identical
  // kernels scored U 1.98 from K̂ = (e_ref - ε)/e_ref < 1, one percent under warn_K).
  bool same_as_reference = false;
  // Selecting families only (kernels::Family::selects): decisions (rows) in the replicate,
  // those the fp64 oracle calls a near tie (either side accepted), and the rows whose
  // selected set differs from the oracle's, per side and discordantly (paired test).
  SelectionCounts selection;
};

// One replicate with both implementations under the fp64 policy (method.md §2):
// d_r = max_i |prod_i - ref_i| / max(max_i |ref_i|, tiny), NaN/Inf patterns compared.
struct AlgebraObservation {
  double discrepancy = 0.0;
  Location worst;                     // the element that set d_r
  std::optional<Location> mismatch;   // the first element whose NaN/Inf pattern differs
};

struct NonFinite {
  std::string side;   // "reference", "production", "oracle" or "production (fp64)"
  std::string value;  // "nan", "+inf", "-inf"
  Location where;
};

// "replicate r, element [i,j], bucket g", for reasons.
std::string location_text(const Location& l);
// "non-finite output (nan) from the production at replicate r, ...": the reason a gate gives
// when the run stopped on it.
std::string nonfinite_reason(const NonFinite& nf);

// Consecutive replicates first, first + 1, ... as every gate sees them.
struct ReplicateBatch {
  std::uint64_t first = 0;
  // The working-precision observations; empty when the batch held a non-finite value.
  std::span<const ReplicateObservation> replicates;
  // fp64 comparisons of the batch's first algebra.size() replicates (those the algebra
  // gate asked for; see AlgebraGate::fp64_replicates).
  std::span<const AlgebraObservation> algebra;
  // The first NaN or ±inf in the batch's working-precision outputs: the run stops here.
  const NonFinite* nonfinite = nullptr;
};

}  // namespace kcert::gates
