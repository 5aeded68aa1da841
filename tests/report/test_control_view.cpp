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

TEST_CASE("a control's view holds what its page shows: sides, references, expectation, sweep, gradients, provenance", "[report][view]") {
  auto d = document();
  d["reference"] = {{"variant", "llama_eager"}, {"version", "transformers 4.46"}};
  d["production"] = {{"variant", "liger_fused"}, {"version", "1"}};
  d["replicates"] = 8192;
  d["mechanism"] = "offset added twice";
  d["references"] = {"https://example.org/pr/1", 3};
  d["expected"] = {{"bias", {"FAIL", "WARN"}}, {"algebra", {"PASS"}}, {"note", "catalog N1"}};
  d["sweep"] = {{"decided_by", {{"algebra", "a"}, {"bias", "b"}, {"variance", "a"}}},
                {"settings", {{{"name", "a"}, {"probe", "x ~ N(0, 1)"}, {"verdict", "WARN"}, {"algebra", "PASS"},
                               {"algebra_applicable", false}, {"bias", "WARN"}, {"variance", "PASS"}, {"U", "inf"}, {"max_abs_z", 4.5}},
                              "not an object"}}};
  d["backward"] = {{"dy", {{"kind", "normal"}, {"shift", 0.5}, {"scale", 1}}},
                   {"gradients", {{{"name", "dw"}, {"input", "w"}, {"bucket_axis", "channel"}, {"reduction_size", 4096}, {"reduces", "tokens"},
                                   {"verdict", "PASS"}},
                                  {{"name", "dx"}, {"reduction_size", 0}}}}};
  d["provenance"] = {{"torch_version", "1.13.0"}, {"device", "cpu"}};
  d["source"] = "testcases/n1.yaml";
  d["case_text"] = "id: n1\n";
  const auto v = control_view(d);
  CHECK(v.reference.variant == "llama_eager");
  CHECK(v.reference.version == "transformers 4.46");
  CHECK(v.production.variant == "liger_fused");
  CHECK(v.replicates == 8192.0);
  CHECK(v.mechanism == "offset added twice");
  CHECK(v.references == std::vector<std::string>{"https://example.org/pr/1", "3"});
  CHECK(v.expectation_stated);
  // The gates in the order algebra, bias, variance (the page's order).
  REQUIRE(v.expected_gates.size() == 2);
  CHECK(v.expected_gates[0].first == "algebra");
  CHECK(v.expected_gates[1].second == std::vector<std::string>{"FAIL", "WARN"});
  CHECK(v.expected_note == std::optional<std::string>("catalog N1"));
  REQUIRE(v.sweep);
  CHECK(v.sweep->decided_bias == "b");
  REQUIRE(v.sweep->points.size() == 1);  // the row that is not an object is left out
  CHECK(v.sweep->points[0].probe == "x ~ N(0, 1)");
  CHECK_FALSE(v.sweep->points[0].algebra_applicable);
  CHECK(std::isinf(*v.sweep->points[0].U));  // "inf", as documents store an infinite U
  CHECK(v.sweep->points[0].max_abs_z == 4.5);
  REQUIRE(v.backward);
  CHECK(v.dy_kind == "normal");
  CHECK(v.dy_shift == 0.5);
  REQUIRE(v.backward->points.size() == 2);
  CHECK(v.backward->points[0].reduction_size == 4096.0);
  CHECK(v.backward->points[0].reduces == "tokens");
  CHECK_FALSE(v.backward->points[1].reduction_size);  // N = 0: none
  CHECK_FALSE(v.backward->points[1].U);
  CHECK(v.torch_version == "1.13.0");
  CHECK(v.device == "cpu");
  CHECK(v.source == "testcases/n1.yaml");
  CHECK(v.case_text == std::optional<std::string>("id: n1\n"));
  // Without the blocks: no sweep, no backward, no expectation line.
  const auto plain = control_view(nlohmann::json{{"id", "p"}, {"sweep", 1}});
  CHECK_FALSE(plain.sweep);
  CHECK_FALSE(plain.backward);
  CHECK_FALSE(plain.expectation_stated);
  CHECK_FALSE(plain.case_text);
}

TEST_CASE("a control's view holds the bias gate's flagged buckets in the family's terms, signed first", "[report][view]") {
  auto d = document();
  d["probe"] = {{"params", {{"shape.head_dim", 8}}}};
  d["gates"]["bias"] = {
      {"axis", "position_frequency"}, {"buckets", 64}, {"replicates", 256},
      {"thresholds", {{"z_cut", 5.2}, {"s_min", 0.2}, {"c", 0.3}, {"c_magnitude", 0.2}}},
      {"magnitude", {{"fail_buckets", 1}, {"flagged", {{{"bucket", 3}, {"ulp_effect", 0.5}, {"verdict", "FAIL"}}}}}},
      {"signed",
       {{"fail_buckets", 1}, {"warn_buckets", 2},
        {"flagged", {{{"bucket", 21}, {"direction", -1}, {"ulp_effect", 0.8}, {"z", -7.5}, {"effect", 0.9}, {"verdict", "FAIL"}},
                     {{"bucket", "x"}},
                     {{"bucket", 5}, {"ulp_effect", nullptr}, {"verdict", "WARN"}, {"attributed", true}}}}}}};
  const auto v = control_view(d);
  const auto& b = v.bias;
  REQUIRE(b.present);
  CHECK(b.axis == "position_frequency");
  CHECK(b.buckets == 64.0);
  CHECK(b.z_cut == 5.2);
  CHECK(b.c_magnitude == 0.2);
  REQUIRE(b.flagged_counts.size() == 2);
  CHECK(b.flagged_counts[0] == std::pair<std::string, std::int64_t>{"signed", 3});
  CHECK(b.flagged_counts[1] == std::pair<std::string, std::int64_t>{"magnitude", 1});
  REQUIRE(b.flagged.size() == 3);  // the bucket that is not an integer is left out
  CHECK(b.flagged[0].label == "position 5 x pair 1");
  CHECK(b.flagged[0].signed_ulp == -0.8);  // the direction's sign
  CHECK(b.flagged[0].z == -7.5);
  CHECK_FALSE(b.flagged[1].signed_ulp);  // NaN is stored as null
  CHECK(b.flagged[1].attributed);
  CHECK(b.flagged[2].statistic == "magnitude");
  CHECK(b.flagged[2].label == "position 0 x pair 3");
  // No bias block with a signed statistic: nothing to show.
  CHECK_FALSE(control_view(document()).bias.present);
}

TEST_CASE("a control's view holds the tail the plots draw and every kept bias bucket", "[report][view]") {
  auto d = document();
  d["gates"]["variance"]["tail"] = {{"mode", "fitted"}, {"xi_clipped", -0.2}, {"sigma", 0.5}, {"u", 0.1}, {"zeta", 0.05},
                                    {"r_T", 1.7}, {"settings", {{"warn_K", 3.0}, {"horizon", 1e6}}}};
  d["gates"]["bias"] = {{"signed", {{"flagged", {{{"bucket", 1}, {"verdict", "FAIL"}, {"ulp_effect", 0.5}, {"effect", 2.0}}}},
                                    {"top", {{{"verdict", "PASS"}, {"ulp_effect", 0.01}, {"effect", nullptr}}, 4}}}},
                        {"magnitude", {{"top", {{{"verdict", "PASS"}, {"ulp_effect", 0.02}, {"effect", 0.1}}}}}}};
  const auto v = control_view(d);
  CHECK(v.tail.drawable_fit);
  CHECK(v.tail.xi == -0.2);
  CHECK(v.tail.r_t == 1.7);
  CHECK(v.tail.warn_k == 3.0);
  CHECK(v.tail.fail_k == 10.0);  // absent: kcert's default
  CHECK(v.tail.horizon == 1e6);
  REQUIRE(v.bias.kept.size() == 3);  // flagged, then top (the 4 is not a bucket), signed first
  CHECK(v.bias.kept[0].verdict == "FAIL");
  CHECK_FALSE(v.bias.kept[1].effect);
  CHECK(v.bias.kept[2].statistic == "magnitude");
  // A fit the curve cannot be drawn from: a sigma of 0, or a thin tail.
  d["gates"]["variance"]["tail"]["sigma"] = 0;
  CHECK_FALSE(control_view(d).tail.drawable_fit);
  d["gates"]["variance"]["tail"]["sigma"] = 0.5;
  d["gates"]["variance"]["tail"]["mode"] = "thin_tail";
  CHECK_FALSE(control_view(d).tail.drawable_fit);
  CHECK_FALSE(control_view(d).tail.r_t);
}
