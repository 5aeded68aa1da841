#pragma once
// The verdict-stable sampling rule (method.md §5) as a pure function: given what the
// variance gate concluded at the current replicate count, stop or double.
#include <cstdint>
#include <string_view>

#include "harness/stats/tail.hpp"

namespace kcert::stats {

enum class StopReason {
  none,               // not stopping: grow
  stable,             // the interval [lower, U] of r_T (fitted, or thin tail: [max K̂, U]) on one side of warn_K and of fail_K
  infinite,           // a K̂ = +∞ decided the gate
  trivially_aligned,  // all K̂ = 0
  cap_reached,        // R_max reached before the verdict was stable (flag: unstable)
};
std::string_view to_string(StopReason r);

struct SamplingStep {
  bool stop = true;
  std::uint64_t next_replicates = 0;  // R to reach before the next look (when !stop)
  StopReason reason = StopReason::stable;
  bool unstable = false;              // stopped at the cap with an unsettled verdict
};

// True when the interval [lower, upper] lies wholly on one side of `threshold`,
// with the PASS side closed (a value equal to a threshold reads as at-or-below it).
bool interval_clear_of(double lower, double upper, double threshold);

// Decides after a look at `replicates` replicates whether the variance gate's verdict is
// settled. Growth doubles R, clipped to r_max. Throws std::invalid_argument when
// replicates is 0 or exceeds r_max.
SamplingStep next_sampling_step(const TailAnalysis& analysis, std::uint64_t replicates,
                                std::uint64_t r_max);

}  // namespace kcert::stats
