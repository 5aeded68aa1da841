#include "kcert_catch.hpp"

#include "harness/stats/stopping.hpp"

using kcert::stats::next_sampling_step;
using kcert::stats::StopReason;
using kcert::stats::TailAnalysis;
using kcert::stats::TailMode;

namespace {
TailAnalysis fitted(double r_t, double se) {
  TailAnalysis a;
  a.mode = TailMode::fitted;
  a.r_t = r_t;
  a.se = se;
  a.lower = r_t - 3 * se;  // an interval [lower, U] around r_T
  a.U = r_t + 3 * se;
  return a;  // default thresholds warn 2, fail 10
}
// A thin tail: [max K̂, U] with U the exponential bound (defaults to the max itself).
TailAnalysis thin(double max, double U = -1.0) {
  TailAnalysis a;
  a.mode = TailMode::thin_tail;
  a.khat.max = max;
  a.lower = max;
  a.U = U < 0.0 ? max : U;
  return a;
}
}  // namespace

TEST_CASE("sampling stops when the interval clears both thresholds", "[stopping]") {
  const auto pass = next_sampling_step(fitted(1.2, 0.2), 1024, 8192);  // [0.6, 1.8]
  CHECK(pass.stop);
  CHECK(pass.reason == StopReason::stable);
  CHECK_FALSE(pass.unstable);
  CHECK(next_sampling_step(fitted(5.0, 0.5), 1024, 8192).stop);   // [3.5, 6.5]: inside WARN
  CHECK(next_sampling_step(fitted(20.0, 1.0), 1024, 8192).stop);  // above fail
}

TEST_CASE("sampling doubles R while the interval straddles a threshold", "[stopping]") {
  const auto grow = next_sampling_step(fitted(1.8, 0.2), 1024, 8192);  // [1.2, 2.4] ∋ 2
  CHECK_FALSE(grow.stop);
  CHECK(grow.next_replicates == 2048);
  const auto grow_fail = next_sampling_step(fitted(9.0, 1.0), 2048, 8192);  // ∋ 10
  CHECK(grow_fail.next_replicates == 4096);
  // Growth is clipped to R_max.
  CHECK(next_sampling_step(fitted(1.8, 0.2), 3000, 4096).next_replicates == 4096);
}

TEST_CASE("sampling stops at R_max and flags the verdict unstable", "[stopping]") {
  const auto cap = next_sampling_step(fitted(1.8, 0.2), 8192, 8192);
  CHECK(cap.stop);
  CHECK(cap.reason == StopReason::cap_reached);
  CHECK(cap.unstable);
}

TEST_CASE("a thin tail grows while [max K-hat, U] straddles a threshold", "[stopping]") {
  CHECK(next_sampling_step(thin(0.3, 1.9), 1024, 8192).stop);  // the bound clears warn: PASS settled
  CHECK(next_sampling_step(thin(0.3, 1.9), 1024, 8192).reason == StopReason::stable);
  // A small maximum is not enough: the bound at T must clear warn (issue 36, zero-inflated tails).
  const auto grow = next_sampling_step(thin(0.3, 2.6), 1024, 8192);
  CHECK_FALSE(grow.stop);
  CHECK(grow.next_replicates == 2048);
  CHECK(next_sampling_step(thin(3.0, 8.0), 1024, 8192).stop);        // WARN on both ends
  CHECK_FALSE(next_sampling_step(thin(3.0, 12.0), 1024, 8192).stop); // ∋ fail
  CHECK(next_sampling_step(thin(25.0, 40.0), 1024, 8192).stop);      // the maximum already FAILs
  const auto cap = next_sampling_step(thin(0.3, 2.6), 8192, 8192);
  CHECK(cap.stop);
  CHECK(cap.unstable);
  CHECK(cap.reason == StopReason::cap_reached);
}

TEST_CASE("trivially aligned and infinite K-hat never grow", "[stopping]") {
  TailAnalysis zero;
  zero.mode = TailMode::trivially_aligned;
  CHECK(next_sampling_step(zero, 1024, 8192).reason == StopReason::trivially_aligned);
  TailAnalysis inf;
  inf.mode = TailMode::infinite;
  CHECK(next_sampling_step(inf, 1024, 8192).reason == StopReason::infinite);
}

TEST_CASE("interval edge equal to a threshold counts as the PASS side", "[stopping]") {
  CHECK(kcert::stats::interval_clear_of(1.0, 2.0, 2.0));
  CHECK_FALSE(kcert::stats::interval_clear_of(1.0, 2.0001, 2.0));
  CHECK(kcert::stats::interval_clear_of(2.0001, 3.0, 2.0));
  CHECK_THROWS(next_sampling_step(thin(1.0), 0, 8192));
  CHECK_THROWS(next_sampling_step(thin(1.0), 9000, 8192));
}
