// The first family end to end, through the real binary and the real YAML files.
#include "kcert_catch.hpp"

#include <fstream>
#include <initializer_list>
#include <string>
#include <nlohmann/json.hpp>

#include "../cli/run_command.hpp"

using kcert::test::kcert_binary;
using kcert::test::run_command;

namespace {

const std::string kCases = std::string(KCERT_SOURCE_DIR) + "/testcases";

// The controls each test needs, by path (issue 50: whole folders made these tests take minutes,
// mostly two backward controls of 20-35 s that tell none of them anything more; every control
// runs at smoke shapes in the controls_smoke_* tests).
std::string files(std::initializer_list<const char*> names) {
  std::string out;
  for (const char* n : names) out += " " + kCases + "/" + n + ".yaml";
  return out;
}
const std::string kN1 = "negative/rmsnorm/n1_gemma_rmsnorm_offset_bf16", kN2 = "negative/rmsnorm/n2_gemma_rmsnorm_missing_offset",
                  kN3 = "negative/rmsnorm/n3_rmsnorm_cast_before_weight";

nlohmann::json run_json(const std::string& args, const std::string& out) {
  const auto r = run_command(kcert_binary() + " run " + args + " --quiet --json " + out + " 2>&1");
  INFO(r.output);
  REQUIRE((r.exit_code == 0 || r.exit_code == 1));
  std::ifstream in(out);
  return nlohmann::json::parse(in);
}

const nlohmann::json& find(const nlohmann::json& doc, const std::string& id) {
  for (const auto& r : doc.at("results")) {
    if (r.at("id") == id) return r;
  }
  FAIL("no result for " << id);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("RMSNorm controls give their catalog verdicts at the smoke profile", "[integration]") {
  const auto doc = run_json(files({kN1.c_str(), kN2.c_str(), kN3.c_str(), "positive/rmsnorm/rw_rmsnorm_rsqrt_vs_recip_sqrt"}) +
                                " --profile smoke",
                            "/tmp/kcert-it-rmsnorm.json");
  const auto& n1 = find(doc, "n1_gemma_rmsnorm_offset_bf16");
  CHECK(n1.at("gates").at("algebra").at("verdict") == "PASS");
  CHECK(n1.at("gates").at("bias").at("verdict") == "FAIL");
  CHECK(n1.at("gates").at("bias").at("axis") == "channel");
  // The direction of each flagged channel is reported (both signs occur: gains round both ways).
  bool up = false, down = false;
  for (const auto& b : n1.at("gates").at("bias").at("signed").at("flagged")) {
    up |= b.at("direction") == 1;
    down |= b.at("direction") == -1;
  }
  CHECK(up);
  CHECK(down);
  CHECK(n1.at("gates").at("variance").at("verdict") != "FAIL");

  const auto& n2 = find(doc, "n2_gemma_rmsnorm_missing_offset");
  CHECK(n2.at("gates").at("algebra").at("verdict") == "FAIL");
  CHECK(n2.at("verdict") == "FAIL");

  const auto& n3 = find(doc, "n3_rmsnorm_cast_before_weight");
  CHECK(n3.at("gates").at("algebra").at("verdict") == "PASS");
  CHECK(n3.at("gates").at("variance").at("verdict") == "PASS");
  // method.md's prototype reads magnitude FAIL at 0.35 ULP; the attribution against the oracle
  // (issue 30) finds the reference (HF's double rounding) carries it and the production (TE,
  // one rounding) is closer to exact: the control stays detected, as a WARN for review.
  const auto& n3m = n3.at("gates").at("bias").at("magnitude");
  CHECK(n3m.at("verdict") == "WARN");
  CHECK(n3m.at("attributed_buckets").get<int>() > 0);
  CHECK(n3m.at("fail_buckets").get<int>() == 0);
  CHECK(n3.at("verdict") != "PASS");

  const auto& rw = find(doc, "rw_rmsnorm_rsqrt_vs_recip_sqrt");
  CHECK(rw.at("verdict") == "PASS");
  CHECK(rw.at("kind") == "positive");
  CHECK(rw.at("family") == "rmsnorm");

  for (const auto& r : doc.at("results")) {
    INFO(r.at("id"));
    CHECK(r.at("unexpected").empty());  // every YAML expectation holds
  }
}

TEST_CASE("kcert run output is byte-identical across threads and batch sizes", "[integration][determinism]") {
  // Forward cases and two backward ones (a per-element dW, a missing dW): the backward results
  // carry per-gradient fields that once broke this.
  const std::string args = files({kN1.c_str(), kN2.c_str(), kN3.c_str(), "negative/rmsnorm/bn7_rmsnorm_bwd_missing_dw",
                                  "negative/rmsnorm/bn30_rmsnorm_dw_bf16_accumulation"}) +
                           " --profile smoke";
  auto a = run_json(args + " --threads 1 --batch 1", "/tmp/kcert-it-det-a.json");
  auto b = run_json(args + " --threads 2 --batch 5", "/tmp/kcert-it-det-b.json");
  for (auto* d : {&a, &b}) {
    for (auto& r : (*d)["results"]) r.erase("runtime");
  }
  CHECK(a.dump() == b.dump());
}

TEST_CASE("kcert run --expect exits 0 when every case meets its expectation", "[integration]") {
  const std::string controls = files({kN1.c_str(), kN2.c_str(), "negative/rmsnorm/n6_norm_eps_placement"});
  const auto r = run_command(kcert_binary() + " run" + controls + " --profile smoke --expect --quiet --brief");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  const auto plain = run_command(kcert_binary() + " run" + controls + " --profile smoke --quiet --brief");
  CHECK(plain.exit_code == 1);  // without --expect, a FAIL verdict is a finding
  CHECK_THAT(plain.output, Catch::Contains("n1_gemma_rmsnorm_offset_bf16"));
}

TEST_CASE("kcert run reports every bad case file before running anything", "[integration]") {
  const std::string dir = "/tmp/kcert-it-bad";
  run_command("rm -rf " + dir + " && mkdir -p " + dir);
  std::ofstream(dir + "/a.yaml") << "schema: 1\nid: a\nkind: sideways\n";
  std::ofstream(dir + "/b.yaml") << "schema: 1\nid: [\n";
  const auto r = run_command(kcert_binary() + " run " + dir + " 2>&1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(dir + "/a.yaml:3:7: kind: expected negative"));
  CHECK_THAT(r.output, Catch::Contains(dir + "/b.yaml:3:1: YAML syntax error"));
  const auto missing = run_command(kcert_binary() + " run /nonexistent/dir 2>&1");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Catch::Contains("no such file or directory"));
}
