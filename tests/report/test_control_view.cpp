// The typed view the renderers read (issue 51, item 2): built from a result document once,
// leniently, and the JUnit rendering reads only it.
#include "kcert_catch.hpp"

#include <cmath>

#include "harness/report/control_view.hpp"
#include "harness/report/junit.hpp"

using kcert::report::control_view;

namespace {
nlohmann::json document() {
  return {{"id", "n1"},
          {"kind", "negative"},
          {"family", "rmsnorm"},
          {"verdict", "PASS"},
          {"expected", {{"bias", {"FAIL"}}}},
          {"unexpected", {"bias: expected FAIL, got PASS", 7}},
          {"gates",
           {{"algebra", {{"verdict", "PASS"}, {"reason", "same function"}}},
            {"bias", {{"verdict", "PASS"}, {"reason", "max |z| 3.1"}}},
            {"variance", {{"verdict", "PASS"}, {"reason", "thin tail"}, {"evidence", {{"horizon", 85.3}, {"reaches_horizon", false}}}}}}},
          {"runtime", {{"seconds", 1.25}}}};
}
}  // namespace

TEST_CASE("a control's view holds what the renderers show, read once from its document", "[report][view]") {
  const auto v = control_view(document());
  CHECK(v.id == "n1");
  CHECK(v.kind == "negative");
  CHECK(v.family == "rmsnorm");
  CHECK(v.verdict == "PASS");
  CHECK(v.seconds == 1.25);
  CHECK(v.has_expectation);
  REQUIRE(v.unexpected.size() == 2);
  CHECK(v.unexpected[0] == "bias: expected FAIL, got PASS");
  CHECK(v.unexpected[1] == "7");  // not a string: shown as its JSON
  REQUIRE(v.gates.size() == 3);
  CHECK(v.gates[1].gate == "bias");
  CHECK(v.gates[1].reason == "max |z| 3.1");
  REQUIRE(v.variance_short_of_horizon);
  CHECK(*v.variance_short_of_horizon == 85.3);
  CHECK_FALSE(v.error);
  CHECK_FALSE(v.skipped);
}

TEST_CASE("a control's view is lenient: an old or cut-down document gives empty fields, never an exception", "[report][view]") {
  CHECK(control_view(nlohmann::json::array()).id.empty());
  const auto bare = control_view(nlohmann::json{{"id", "x"}, {"runtime", "soon"}, {"gates", 3}, {"expected", nlohmann::json::object()}});
  CHECK(bare.id == "x");
  CHECK(bare.seconds == 0.0);
  CHECK(bare.gates.empty());
  CHECK_FALSE(bare.has_expectation);
  CHECK_FALSE(bare.variance_short_of_horizon);
  auto no_number = document();
  no_number["gates"]["variance"]["evidence"].erase("horizon");
  const auto v = control_view(no_number);
  REQUIRE(v.variance_short_of_horizon);
  CHECK(std::isnan(*v.variance_short_of_horizon));
  auto error = document();
  error["verdict"] = "ERROR";
  error["error"] = "plugin refused";
  CHECK(control_view(error).error == std::optional<std::string>("plugin refused"));
}

TEST_CASE("JUnit renders the view: the same XML from the documents and from their views", "[report][view]") {
  std::vector<nlohmann::json> docs{document()};
  auto skipped = document();
  skipped["id"] = "s";
  skipped["skipped"] = "needs LibTorch 2";
  docs.push_back(skipped);
  const auto from_docs = kcert::report::junit_xml(docs, "kcert", "2026-12-06T00:00:00");
  CHECK(from_docs == kcert::report::junit_xml(kcert::report::control_views(docs), "kcert", "2026-12-06T00:00:00"));
  CHECK_THAT(from_docs, Catch::Contains("verdicts differ from the YAML expectation: bias: expected FAIL, got PASS; 7"));
  CHECK_THAT(from_docs, Catch::Contains("<skipped message=\"needs LibTorch 2\"/>"));
  CHECK_THAT(from_docs, Catch::Contains("the evidence supports 85.3 replicates"));
}
