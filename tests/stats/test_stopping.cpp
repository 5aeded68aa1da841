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
TailAnalysis thin(double max) {
  TailAnalysis a;
  a.mode = TailMode::thin_tail;
  a.khat.max = max;
  a.U = max;
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

TEST_CASE("thin tails grow only when the max is within a factor 2 of a threshold", "[stopping]") {
  CHECK(next_sampling_step(thin(0.9), 1024, 8192).stop);            // < warn/2
  CHECK(next_sampling_step(thin(0.9), 1024, 8192).reason == StopReason::thin_tail_far);
  CHECK_FALSE(next_sampling_step(thin(1.0), 1024, 8192).stop);      // = warn/2
  CHECK_FALSE(next_sampling_step(thin(3.9), 1024, 8192).stop);      // < 2·warn
  CHECK(next_sampling_step(thin(4.5), 1024, 8192).stop);            // between the zones
  CHECK_FALSE(next_sampling_step(thin(6.0), 1024, 8192).stop);      // ≥ fail/2
  CHECK(next_sampling_step(thin(25.0), 1024, 8192).stop);           // > 2·fail
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

TEST_CASE("a thin tail grows when two doublings (within R_max) would give the exceedances a fit needs", "[stopping]") {
  auto a = thin(0.5);  // far from both thresholds
  a.n_exc = 13;        // 13 at R = 1024 -> 52 expected at 4 R = 4096 >= 50
  const auto grow = next_sampling_step(a, 1024, 8192);
  CHECK_FALSE(grow.stop);
  CHECK(grow.next_replicates == 2048);
  a.n_exc = 12;  // 48 expected within two doublings: a fit is out of reach, nothing to gain
  CHECK(next_sampling_step(a, 1024, 8192).stop);
  a.n_exc = 13;  // ... and R_max bounds the reach too: 13 · 1536/1024 < 50
  CHECK(next_sampling_step(a, 1024, 1536).stop);
  a.n_exc = 0;
  CHECK(next_sampling_step(a, 1024, 8192).stop);
  auto failed = thin(30.0);  // an observed K-hat beyond 2 fail_K: FAIL already, nothing to certify
  failed.verdict = kcert::stats::Verdict::fail;
  failed.n_exc = 20;
  CHECK(next_sampling_step(failed, 1024, 8192).stop);
}
