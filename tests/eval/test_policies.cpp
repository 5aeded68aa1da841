// Suite-level policies on plain outcomes: calibration rule kcert-cal/2, change detection
// between runs, and the nightly's exit policy.
#include "kcert_catch.hpp"

#include "eval/calibration.hpp"
#include "eval/changes.hpp"

using kcert::eval::ControlOutcome;
using kcert::stats::Verdict;

namespace {
ControlOutcome control(std::string id, std::string kind, std::string family, std::optional<double> u,
                       Verdict variance = Verdict::pass) {
  ControlOutcome o;
  o.id = std::move(id);
  o.kind = std::move(kind);
  o.family = std::move(family);
  o.variance_u = u;
  o.variance = variance;
  o.verdict = variance;
  o.bias_recomputable = true;  // no significant bucket unless a test adds a frontier
  return o;
}
}  // namespace

TEST_CASE("kcert-cal/2: warn_K = max(1, 1.5 max U of positives), fail_K = 5 warn_K", "[eval][calibration]") {
  const std::vector<ControlOutcome> controls = {
      control("p1", "positive", "rmsnorm", 0.2), control("p2", "positive", "rmsnorm", 1.2),
      control("p3", "positive", "rmsnorm", 0.0), control("n1", "negative", "rmsnorm", 3.0, Verdict::warn),
      control("q1", "positive", "rope", 0.1),    control("q2", "positive", "rope", 0.1),
  };
  const auto plans = kcert::eval::plan_calibration(controls, {{"rope", {1.0, 5.0, "cal-7"}}});
  REQUIRE(plans.size() == 2);
  const auto& rms = plans[0];
  CHECK(rms.family == "rmsnorm");
  CHECK(rms.refused.empty());
  CHECK(rms.positives == 3);
  CHECK(rms.new_warn == Approx(1.8));
  CHECK(rms.new_fail == Approx(9.0));
  CHECK(rms.old_label == "defaults");
  const auto& rope = plans[1];
  CHECK(rope.refused == "2 positive control(s) in the source run, 3 needed");
  CHECK(rope.old_label == "cal-7");
  CHECK(rope.old_warn == 1.0);

  // Under warn 1.8 / fail 9 the negative at U = 3 stays WARN; one at 10 would FAIL.
  auto after = kcert::eval::apply_calibration(controls, plans);
  CHECK(after[3].variance == Verdict::warn);
  auto hot = controls;
  hot[3].variance_u = 10.0;
  after = kcert::eval::apply_calibration(hot, plans);
  CHECK(after[3].variance == Verdict::fail);
  CHECK(after[3].verdict == Verdict::fail);
}

TEST_CASE("kcert-cal/2 refuses a family whose positive FAILed, and keeps +inf U a FAIL", "[eval][calibration]") {
  std::vector<ControlOutcome> controls = {
      control("p1", "positive", "router", 0.1), control("p2", "positive", "router", 0.1),
      control("p3", "positive", "router", 46.6, Verdict::fail), control("n1", "negative", "linear", std::nullopt, Verdict::fail),
      control("p4", "positive", "linear", 0.0), control("p5", "positive", "linear", 0.0), control("p6", "positive", "linear", 0.0),
  };
  const auto plans = kcert::eval::plan_calibration(controls, {});
  CHECK(plans[1].family == "router");
  CHECK(plans[1].refused.find("positive p3 FAILed") == 0);
  CHECK(plans[0].family == "linear");
  CHECK(plans[0].new_warn == 1.0);  // the floor
  const auto after = kcert::eval::apply_calibration(controls, plans);
  CHECK(after[3].variance == Verdict::fail);  // U = +inf stays FAIL under any threshold
}

TEST_CASE("kcert-cal/2 leaves out a positive whose FAIL its expected_on condition predicts", "[eval][calibration]") {
  // real_matmul_long_k on a CPU without AVX512-BW: LibTorch 1.13's bf16-accumulating GEMM
  // FAILs it as its YAML's `expected_on: cpu_bf16_gemm_in_bf16` says (U 333 at smoke).
  std::vector<ControlOutcome> controls = {
      control("p1", "positive", "linear", 0.2), control("p2", "positive", "linear", 0.4),
      control("p3", "positive", "linear", 0.0), control("canary", "positive", "linear", 333.1, Verdict::fail),
  };
  controls[3].expected_condition = "cpu_bf16_gemm_in_bf16";
  controls[3].expected_fail_gates = {"variance"};
  controls[3].bias = Verdict::fail;  // as measured: bias FAILs too, a gate its condition leaves unjudged
  auto plans = kcert::eval::plan_calibration(controls, {});
  REQUIRE(plans.size() == 1);
  CHECK(plans[0].refused.empty());
  CHECK(plans[0].positives == 3);
  CHECK(plans[0].max_u == Approx(0.4));  // its U sets nothing
  CHECK(plans[0].new_warn == 1.0);
  CHECK_FALSE(plans[0].used.contains("canary"));
  CHECK(plans[0].left_out == nlohmann::json{{"canary", "cpu_bf16_gemm_in_bf16"}});
  // Under the new thresholds it still FAILs.
  CHECK(kcert::eval::apply_calibration(controls, plans)[3].verdict == Verdict::fail);

  // A FAIL its condition does not predict still refuses the family: one only in a gate the
  // condition leaves unjudged (the sdpa positives' bias on such a CPU: no prediction), an
  // unexpected verdict, or one judged by the plain `expected`.
  const auto refused = [&](const std::vector<ControlOutcome>& cs) {
    const auto p = kcert::eval::plan_calibration(cs, {});
    return p[0].refused.find("positive canary FAILed") == 0 && p[0].left_out.empty();
  };
  auto unjudged = controls;
  unjudged[3].variance = Verdict::pass;  // bias alone FAILs
  CHECK(refused(unjudged));
  unjudged[3].expected_fail_gates = {"algebra"};  // admitted, but that gate PASSed
  CHECK(refused(unjudged));
  auto unexpected = controls;
  unexpected[3].unexpected = {"variance: expected PASS, got FAIL"};
  CHECK(refused(unexpected));
  auto plain = controls;
  plain[3].expected_condition.clear();
  CHECK(refused(plain));
}

TEST_CASE("kcert-cal/2: bias floors from the positives' largest significant ULP effect, never above the shipped ones",
          "[eval][calibration]") {
  // rmsnorm: positives at 0.02 and 0.03 ULP (signed), none significant in magnitude; a
  // negative at 0.08 ULP (effect 1.2) that the shipped floor c = 0.3 only WARNs.
  std::vector<ControlOutcome> controls = {
      control("p1", "positive", "rmsnorm", 0.5), control("p2", "positive", "rmsnorm", 0.5),
      control("p3", "positive", "rmsnorm", 0.5), control("n1", "negative", "rmsnorm", 0.5),
      control("q1", "positive", "linear", 0.5),  control("q2", "positive", "linear", 0.5),
      control("q3", "positive", "linear", 0.5),
  };
  controls[0].frontier_signed = {{1.5, 0.02}};
  controls[1].frontier_signed = {{0.8, 0.03}, {0.3, 0.01}};
  controls[3].frontier_signed = {{1.2, 0.08}};
  controls[3].bias = controls[3].verdict = Verdict::warn;
  // linear: a positive at 0.24 ULP (#9's double rounding) keeps the shipped signed floor.
  controls[4].frontier_signed = {{5.6, 0.24}};
  controls[4].frontier_magnitude = {{2.7, 0.14}};
  controls[4].bias = controls[4].verdict = Verdict::warn;
  const auto plans = kcert::eval::plan_calibration(controls, {});
  REQUIRE(plans.size() == 2);
  const auto& lin = plans[0];
  const auto& rms = plans[1];
  CHECK(rms.max_ulp_signed == Approx(0.03));
  CHECK(rms.new_c == Approx(0.05));            // 1.5 x 0.03 = 0.045, clamped up to 0.05
  CHECK(rms.new_c_magnitude == Approx(0.05));  // nothing significant: the least floor
  CHECK(lin.new_c == Approx(0.3));             // 1.5 x 0.24 = 0.36, capped at the shipped 0.3
  CHECK(lin.new_c_magnitude == Approx(0.2));   // 1.5 x 0.14 = 0.21, capped at 0.2
  CHECK(rms.used_bias.at("p2")[0].get<double>() == Approx(0.03));

  const auto after = kcert::eval::apply_calibration(controls, plans);
  CHECK(after[3].bias == Verdict::fail);  // the tighter floor catches the negative
  CHECK(after[3].verdict == Verdict::fail);
  CHECK(after[0].bias == Verdict::warn);  // positives stay significant-but-negligible
  CHECK(after[0].verdict == Verdict::warn);
  CHECK(after[4].bias == Verdict::warn);
  // Judging needs the effect floor too: a bucket under s_min never FAILs.
  auto weak = controls[3];
  weak.frontier_signed = {{0.1, 5.0}};
  CHECK(kcert::eval::bias_verdict_under(weak, 0.05, 0.05) == Verdict::warn);
  // A statistic that does not decide is not judged.
  weak.frontier_signed = {};
  weak.frontier_magnitude = {{3.0, 5.0}};
  weak.magnitude_decides = false;
  CHECK(kcert::eval::bias_verdict_under(weak, 0.05, 0.05) == Verdict::pass);
  // Without stored frontiers the family is refused, with the reason.
  controls[5].bias_recomputable = false;
  CHECK(kcert::eval::plan_calibration(controls, {})[0].refused.find("no stored bias frontier") != std::string::npos);
}

TEST_CASE("changes between runs: escapes, new false alarms and flips are alarming, U moves are not", "[eval][changes]") {
  auto neg_then = control("n", "negative", "rmsnorm", 5.0, Verdict::warn);
  auto neg_now = control("n", "negative", "rmsnorm", 1.0, Verdict::pass);
  neg_now.variance_se = 0.1;
  auto pos_then = control("p", "positive", "rmsnorm", 1.0);
  auto pos_now = control("p", "positive", "rmsnorm", 12.0, Verdict::fail);
  const auto changes = kcert::eval::compare_runs({neg_now, pos_now}, {{"n", neg_then}, {"p", pos_then}});
  std::vector<std::string> what;
  for (const auto& c : changes) what.push_back(c.id + ": " + c.what + (c.alarming ? " !" : ""));
  // One line per control, its figures before -> after, each said once.
  CHECK(what == std::vector<std::string>{
                    "n: ESCAPE: no longer detected; algebra/bias/variance PASS/PASS/WARN -> PASS/PASS/PASS; "
                    "U 5 -> 1 (more than 3 se = 0.3) !",
                    "p: NEW FALSE ALARM (FAIL); algebra/bias/variance PASS/PASS/PASS -> PASS/PASS/FAIL; U 1 -> 12 !",
                });
  // A U move alone is not alarming; max |z| and R are shown where they moved.
  auto quiet_then = control("q", "positive", "rmsnorm", 1.0);
  auto quiet_now = control("q", "positive", "rmsnorm", 2.0);
  quiet_now.variance_se = 0.1;
  quiet_then.max_abs_z = 3.25, quiet_now.max_abs_z = 4.5;
  quiet_then.replicates = 64, quiet_now.replicates = 256;
  const auto moved = kcert::eval::compare_runs({quiet_now}, {{"q", quiet_then}});
  REQUIRE(moved.size() == 1);
  CHECK(moved[0].what == "U moved; U 1 -> 2 (more than 3 se = 0.3); max |z| 3.25 -> 4.5; R 64 -> 256");
  CHECK_FALSE(moved[0].alarming);
  // Nothing moved: no line.
  CHECK(kcert::eval::compare_runs({quiet_then}, {{"q", quiet_then}}).empty());

  kcert::eval::Falsifiability table;
  CHECK(kcert::eval::nightly_verdict(table, {}).status == kcert::eval::NightlyStatus::ok);
  CHECK(kcert::eval::nightly_verdict(table, changes).status == kcert::eval::NightlyStatus::finding);
  table.errors = 1;
  const auto v = kcert::eval::nightly_verdict(table, changes);
  CHECK(v.status == kcert::eval::NightlyStatus::error);
  CHECK(v.reasons.front() == "1 control(s) could not be run (harness or input error)");
}

TEST_CASE("the baseline run is named with what differs from the run compared", "[eval][changes]") {
  kcert::eval::BaselineRun b{"20261205T010000Z-aa", "2026-12-05T01:00:00Z", "0.1.0", "smoke", {64}, {}, 12};
  kcert::eval::RunFacts same{"0.1.0", {64}, {}};
  CHECK(kcert::eval::describe_baselines(same, {b}) ==
        std::vector<std::string>{"run 20261205T010000Z-aa (started 2026-12-05T01:00:00Z, kcert 0.1.0, profile smoke, R 64): 12 control(s)"});
  kcert::eval::RunFacts other{"0.2.0", {256}, {"rmsnorm: 3"}};
  CHECK(kcert::eval::describe_baselines(other, {b}) ==
        std::vector<std::string>{"run 20261205T010000Z-aa (started 2026-12-05T01:00:00Z, kcert 0.1.0, profile smoke, R 64): "
                                 "12 control(s); differs in R 64 -> 256; kcert 0.1.0 -> 0.2.0; calibration none -> rmsnorm: 3"});
}
