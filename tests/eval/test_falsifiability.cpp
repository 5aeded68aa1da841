#include "kcert_catch.hpp"

#include "eval/falsifiability.hpp"

using kcert::stats::Verdict;

namespace {
kcert::engine::CaseResult result(kcert::contract::Kind kind, Verdict alg, Verdict bias, Verdict var, Verdict magnitude = Verdict::pass) {
  kcert::engine::CaseResult r;
  r.testcase.id = "c";
  r.testcase.kind = kind;
  r.algebra.verdict = alg;
  // Both statistics decide (the default): the gate is the worse of the two.
  r.bias.verdict = kcert::stats::worst(bias, magnitude);
  r.bias.signed_statistic.verdict = bias;
  r.bias.magnitude_statistic.verdict = magnitude;
  r.variance.verdict = var;
  r.verdict = kcert::stats::worst(alg, kcert::stats::worst(r.bias.verdict, var));
  return r;
}
}  // namespace

TEST_CASE("falsifiability counts detections, false FAILs and false WARNs per gate", "[eval]") {
  using K = kcert::contract::Kind;
  std::vector<kcert::engine::CaseResult> rs = {
      result(K::negative, Verdict::pass, Verdict::fail, Verdict::pass),                 // bias catches it
      result(K::negative, Verdict::pass, Verdict::pass, Verdict::pass, Verdict::fail),  // only magnitude sees it
      result(K::negative, Verdict::fail, Verdict::pass, Verdict::warn),
      result(K::positive, Verdict::pass, Verdict::warn, Verdict::pass),
      result(K::positive, Verdict::pass, Verdict::pass, Verdict::fail),
  };
  rs[2].baselines.assert_close.flagged = true;
  rs[4].baselines.flash_attention.flagged = true;  // a false flag by today's check
  rs[4].unexpected = {"variance: expected PASS, got FAIL"};
  const auto f = kcert::eval::tabulate(rs);
  CHECK(f.negatives == 3);
  CHECK(f.positives == 2);
  CHECK(f.algebra.detected == 1);
  CHECK(f.bias.detected == 2);  // the magnitude-only defect counts: both statistics decide
  CHECK(f.bias_signed_only.detected == 1);
  CHECK(f.variance.detected == 1);
  CHECK(f.combined.detected == 3);
  CHECK(f.combined_signed_only.detected == 2);
  CHECK(f.combined.false_fail == 1);
  CHECK(f.combined.false_warn == 1);
  CHECK(f.bias.false_warn == 1);
  CHECK(f.assert_close.detected == 1);
  CHECK(f.flash_attention.false_fail == 1);
  CHECK(f.expectations_met == 4);
  REQUIRE(f.unexpected.size() == 1);
  CHECK(f.unexpected[0] == "c: variance: expected PASS, got FAIL");
  const auto j = kcert::eval::to_json(f);
  CHECK(j.at("gates").at("combined").at("negatives_detected") == 3);
}

TEST_CASE("an INCONCLUSIVE control is neither a detection nor an escape nor a false alarm: it has its own count", "[eval]") {
  using K = kcert::contract::Kind;
  std::vector<kcert::engine::CaseResult> rs = {
      result(K::negative, Verdict::pass, Verdict::inconclusive, Verdict::pass),  // underpowered: not detected
      result(K::negative, Verdict::pass, Verdict::fail, Verdict::inconclusive),  // the FAIL decides
      result(K::positive, Verdict::pass, Verdict::pass, Verdict::inconclusive),
  };
  const auto f = kcert::eval::tabulate(rs);
  CHECK(f.combined.detected == 1);
  CHECK(f.combined.negatives_inconclusive == 1);
  CHECK(f.bias.negatives_inconclusive == 1);
  CHECK(f.variance.negatives_inconclusive == 1);
  CHECK(f.combined.positives_inconclusive == 1);
  CHECK(f.combined.false_fail == 0);
  CHECK(f.combined.false_warn == 0);
  kcert::eval::ControlOutcome o = kcert::eval::outcome(rs[0]);
  CHECK_FALSE(o.detected());
  CHECK(o.inconclusive());
  const auto j = kcert::eval::to_json(f);
  CHECK(j.at("gates").at("combined").at("negatives_inconclusive") == 1);
  CHECK(j.at("gates").at("combined").at("positives_inconclusive") == 1);
}

TEST_CASE("a skipped control counts nowhere: not a detection, not a pass, not a met expectation", "[eval]") {
  using K = kcert::contract::Kind;
  std::vector<kcert::engine::CaseResult> rs = {
      result(K::negative, Verdict::pass, Verdict::fail, Verdict::pass),
      result(K::positive, Verdict::pass, Verdict::pass, Verdict::pass),
      result(K::positive, Verdict::pass, Verdict::pass, Verdict::pass),  // skipped below: its verdicts are defaults
      result(K::negative, Verdict::pass, Verdict::pass, Verdict::pass),  // skipped: would count as an escape
  };
  rs[2].testcase.id = "flash";
  rs[2].skipped = "sdpa_flash_cpu: needs LibTorch >= 2.1";
  rs[3].testcase.id = "newer";
  rs[3].skipped = "needs LibTorch >= 2.4";
  rs[0].torch_version = rs[1].torch_version = "1.13.0";
  const auto f = kcert::eval::tabulate(rs);
  CHECK(f.negatives == 1);
  CHECK(f.positives == 1);
  CHECK(f.combined.detected == 1);
  CHECK(f.expectations_met == 2);
  REQUIRE(f.skipped.size() == 2);
  CHECK(f.skipped[0].first == "flash");
  CHECK(f.skipped[1].second == "needs LibTorch >= 2.4");
  CHECK(f.torch_version == "1.13.0");
  const auto j = kcert::eval::to_json(f);
  CHECK(j.at("skipped").size() == 2);
  CHECK(j.at("torch") == "1.13.0");

  // The same through a stored document: SKIP, with the reason, and not detected.
  nlohmann::json doc = {{"id", "newer"}, {"kind", "negative"}, {"family", "rmsnorm"}, {"verdict", "SKIP"},
                        {"skipped", "needs LibTorch >= 2.4"}, {"provenance", {{"torch_version", "1.13.0"}}}};
  const auto o = kcert::eval::outcome_from_document(doc);
  CHECK(o.skipped == "needs LibTorch >= 2.4");
  CHECK_FALSE(o.ran());
  CHECK_FALSE(o.detected());
  CHECK(o.torch_version == "1.13.0");
}

TEST_CASE("a control judged by an environment condition is listed with it, from a result and from its document",
          "[eval]") {
  using K = kcert::contract::Kind;
  std::vector<kcert::engine::CaseResult> rs = {
      result(K::positive, Verdict::pass, Verdict::fail, Verdict::fail),  // the canary on a bf16-accumulating GEMM
      result(K::positive, Verdict::pass, Verdict::pass, Verdict::pass),
  };
  rs[0].testcase.id = "real_matmul_long_k";
  rs[0].testcase.expected.condition = "cpu_bf16_gemm_in_bf16";
  const auto f = kcert::eval::tabulate(rs);
  CHECK(f.positives == 2);
  CHECK(f.combined.false_fail == 1);  // still counted as measured: the list says why
  REQUIRE(f.conditioned.size() == 1);
  CHECK(f.conditioned[0] == std::pair<std::string, std::string>{"real_matmul_long_k", "cpu_bf16_gemm_in_bf16"});
  const auto j = kcert::eval::to_json(f);
  REQUIRE(j.at("expected_under_condition").size() == 1);
  CHECK(j.at("expected_under_condition")[0].at("condition") == "cpu_bf16_gemm_in_bf16");
  // Through the stored document (the result's `expected.condition`), as a merged nightly reads it.
  nlohmann::json doc = {
      {"id", "real_matmul_long_k"}, {"kind", "positive"}, {"family", "linear"}, {"verdict", "FAIL"},
      {"gates",
       {{"algebra", {{"verdict", "PASS"}}},
        {"bias", {{"verdict", "FAIL"}, {"signed", {{"verdict", "FAIL"}}}, {"magnitude", {{"verdict", "FAIL"}}}}},
        {"variance", {{"verdict", "FAIL"}}}}},
      {"baselines",
       {{"assert_close", {{"flagged", true}}}, {"flash_attention", {{"flagged", true}}}, {"dynamo_fp64", {{"flagged", true}}}}},
      {"expected", {{"algebra", {"PASS"}}, {"variance", {"FAIL"}}, {"condition", "cpu_bf16_gemm_in_bf16"}}}};
  CHECK(kcert::eval::outcome_from_document(doc).expected_condition == "cpu_bf16_gemm_in_bf16");
  // The gates whose expectation admits FAIL (calibration leaves out a FAIL predicted there),
  // read from the document and from the result (each on its own expectation); a note saying
  // FAIL is not a gate.
  doc["expected"]["note"] = "FAIL";
  doc["expected"]["bias"] = {"WARN", "FAIL"};
  CHECK(kcert::eval::outcome_from_document(doc).expected_fail_gates == std::vector<std::string>{"bias", "variance"});
  rs[0].testcase.expected.gates = {{"algebra", {Verdict::pass}}, {"variance", {Verdict::warn, Verdict::fail}}};
  CHECK(kcert::eval::outcome(rs[0]).expected_fail_gates == std::vector<std::string>{"variance"});
  doc["expected"].erase("condition");
  CHECK(kcert::eval::outcome_from_document(doc).expected_condition.empty());
}

TEST_CASE("a case certified in both directions counts once, with the worse of its two verdicts", "[eval][backward]") {
  using K = kcert::contract::Kind;
  const auto half = [](K kind, const std::string& id, kcert::contract::Direction d, Verdict v) {
    auto r = result(kind, Verdict::pass, v, Verdict::pass);
    r.testcase.id = id;
    r.testcase.case_id = id.substr(0, id.find('@'));
    r.testcase.both_directions = true;
    r.testcase.direction = d;
    return r;
  };
  using D = kcert::contract::Direction;
  std::vector<kcert::engine::CaseResult> rs = {
      half(K::negative, "n", D::forward, Verdict::pass), half(K::negative, "n@backward", D::backward, Verdict::fail),
      half(K::positive, "p", D::forward, Verdict::warn), half(K::positive, "p@backward", D::backward, Verdict::fail),
      half(K::positive, "q", D::forward, Verdict::pass), half(K::positive, "q@backward", D::backward, Verdict::warn),
      result(K::negative, Verdict::pass, Verdict::pass, Verdict::pass),  // a forward-only case: not counted there
  };
  const auto f = kcert::eval::tabulate(rs);
  REQUIRE(f.both_directions);
  CHECK(f.both_directions->negatives == 1);
  CHECK(f.both_directions->positives == 2);
  CHECK(f.both_directions->combined.detected == 1);    // the backward caught what the forward did not
  CHECK(f.both_directions->combined.false_fail == 1);  // p: a FAIL in either direction FAILs the case
  CHECK(f.both_directions->combined.false_warn == 1);  // q
  CHECK(f.by_direction.at("backward").negatives == 1);
  CHECK(f.by_direction.at("forward").negatives == 2);
  // From the stored documents' `case` field the same.
  std::vector<kcert::eval::ControlOutcome> docs;
  for (const auto& r : rs) {
    auto o = kcert::eval::outcome(r);
    nlohmann::json d = {{"id", o.id}, {"error", "x"}};
    if (r.testcase.both_directions) d["case"] = {{"id", r.testcase.case_id}, {"directions", {"forward", "backward"}}};
    CHECK(kcert::eval::outcome_from_document(d).case_id == o.case_id);
  }
  CHECK(kcert::eval::to_json(f).at("both_directions").at("positives") == 2);
  CHECK(kcert::eval::to_json(kcert::eval::tabulate(std::vector<kcert::engine::CaseResult>{rs.back()})).at("both_directions").is_null());
}
