// `kcert history`'s renderings (report/history.hpp) on rows made here; the query against a
// real PostgreSQL is tested in tests/store.
#include "tests/catch_torch.hpp"

#include <algorithm>
#include <sstream>

#include "harness/report/history.hpp"

namespace {

kcert::store::HistoryRow row(const std::string& run, const std::string& env, const std::string& verdict, bool detected) {
  kcert::store::HistoryRow r;
  r.started_at = "2026-12-0" + run.substr(1) + "T01:00:00Z";
  r.run_id = run;
  r.fingerprint = env;
  r.cpu_model = "Xeon, \"Sapphire\"";
  r.torch_version = "1.13.0";
  r.verdict = verdict;
  r.algebra = "PASS";
  r.bias = verdict;
  r.variance = "PASS";
  r.kind = "negative";
  r.detected = detected;
  r.replicates = 64;
  r.profile = "smoke";
  r.kcert_version = "0.9";
  return r;
}

std::vector<kcert::store::HistoryRow> rows() {
  // env a: PASS -> FAIL (a change); env b: FAIL; detections in r2 and r3.
  auto r1 = row("r1", "a", "PASS", false);
  auto r2 = row("r2", "a", "FAIL", true);
  auto r3 = row("r3", "b", "FAIL", true);
  r3.variance_u = 1.5;
  r3.algebra_applicable = false;
  r3.variance_short = true;
  return {r1, r2, r3};
}

}  // namespace

TEST_CASE("a history reads its changes per environment and its first and last detection", "[report][history]") {
  const auto rs = rows();
  const auto t = kcert::report::read_timeline(rs);
  CHECK(t.verdict_changed == std::vector<bool>{false, true, false});  // b's first row is no change
  REQUIRE(t.first_flagged);
  CHECK(t.first_flagged->run_id == "r2");
  CHECK(t.last_flagged->run_id == "r3");
  CHECK(t.event == "detection");
  auto positive = rs;
  for (auto& r : positive) r.kind = "positive";
  const auto tp = kcert::report::read_timeline(positive);
  CHECK(tp.event == "false alarm");
  CHECK_FALSE(tp.first_flagged);  // a positive is flagged by a false alarm, not a detection
}

TEST_CASE("a history as JSON, CSV and a table says the same", "[report][history]") {
  const auto rs = rows();
  const auto t = kcert::report::read_timeline(rs);
  const auto j = kcert::report::history_json("n1", rs, t, "0.9");
  CHECK(j.at("format") == "kcert-history/1");
  REQUIRE(j.at("runs").size() == 3);
  CHECK(j.at("runs")[1].at("verdict_changed") == true);
  CHECK(j.at("runs")[0].at("U").is_null());
  CHECK(j.at("runs")[2].at("U") == 1.5);
  CHECK(j.at("first_detection") == "r2");
  CHECK(j.at("last_detection") == "r3");

  std::ostringstream csv;
  kcert::report::print_history_csv(csv, rs, t);
  const auto text = csv.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 4);
  CHECK_THAT(text, Catch::Contains(",\"Xeon, \"\"Sapphire\"\"\","));  // quoted, quotes doubled
  CHECK_THAT(text, Catch::Contains(",1.5,,true,false,"));

  std::ostringstream table;
  kcert::report::print_history_table(table, "n1\x1b[2J", rs, t);
  const auto shown = table.str();
  CHECK_THAT(shown, Catch::StartsWith("history of n1"));
  CHECK_THAT(shown, !Catch::Contains("\x1b"));  // an id's escape never reaches the terminal
  CHECK_THAT(shown, Catch::Contains("<- verdict changed"));
  CHECK_THAT(shown, Catch::Contains("PASS*"));
  CHECK_THAT(shown, Catch::Contains("n/a: the algebra gate did not run"));
  CHECK_THAT(shown, Catch::Contains("first detection: 2026-12-02T01:00:00Z (r2)"));
}
