// The nightly workflow's parts in the runner room (issue 51): the shard split, the calibration
// of cases, a run read back from this process's results. The database side (a run that may
// take a shard, a finished run with its baselines) runs against a real PostgreSQL in
// tests/store and tests/nightly.
#include "tests/catch_torch.hpp"

#include <algorithm>
#include <set>

#include "harness/kernels/registry.hpp"
#include "harness/runner/errors.hpp"
#include "harness/runner/nightly.hpp"

namespace {

kcert::contract::TestCase a_case(const std::string& id, const std::string& family,
                                 kcert::contract::Direction direction = kcert::contract::Direction::forward) {
  kcert::contract::TestCase tc;
  tc.id = id;
  tc.family = family;
  tc.direction = direction;
  return tc;
}

}  // namespace

TEST_CASE("a shard is K of N, 1-based, and anything else is refused naming --shard", "[runner][nightly]") {
  using kcert::runner::parse_shard;
  CHECK(parse_shard("").index == 0);
  CHECK(parse_shard("").count == 1);
  const auto s = parse_shard("2/4");
  CHECK(s.index == 1);
  CHECK(s.count == 4);
  CHECK(parse_shard("4/4").index == 3);
  for (const char* bad : {"0/4", "5/4", "1/0", "2", "2/4/1", "-1/4", " 1/4", "1/ 4", "a/b"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_shard(bad), kcert::runner::UsageError);
  }
  // Leading zeros are digits too; more than an int holds is a usage error, not std::out_of_range.
  CHECK(parse_shard("0000002/0000004").index == 1);
  CHECK_THROWS_WITH(parse_shard("1/99999999999999999999"), Catch::Contains("--shard: K and N must be at most"));
}

TEST_CASE("the shards of a suite split it by sorted id, each case in exactly one, whatever the file order", "[runner][nightly]") {
  std::vector<kcert::contract::TestCase> cases;
  for (const char* id : {"n3", "p1", "n1", "p10", "n2", "p2", "n10"}) cases.push_back(a_case(id, "rmsnorm"));
  auto reversed = cases;
  std::reverse(reversed.begin(), reversed.end());
  std::multiset<std::string> seen;
  for (int k = 0; k < 3; ++k) {
    const auto mine = kcert::runner::select_shard(cases, {}, {k, 3});
    const auto again = kcert::runner::select_shard(reversed, {}, {k, 3});
    REQUIRE(mine.size() == again.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      CHECK(mine[i].id == again[i].id);
      seen.insert(mine[i].id);
    }
  }
  CHECK(seen == std::multiset<std::string>{"n1", "n10", "n2", "n3", "p1", "p10", "p2"});
  // Sorted ids n1 n10 n2 n3 p1 p10 p2: shard 1 of 3 takes positions 0, 3, 6.
  const auto first = kcert::runner::select_shard(cases, {}, {0, 3});
  REQUIRE(first.size() == 3);
  CHECK(first[0].id == "n1");
  CHECK(first[1].id == "n3");
  CHECK(first[2].id == "p2");
  // The filter applies before the split.
  const auto only_p = kcert::runner::select_shard(cases, {"^p"}, {0, 2});
  REQUIRE(only_p.size() == 2);
  CHECK(only_p[0].id == "p1");
  CHECK(only_p[1].id == "p2");
}

TEST_CASE("a family's calibration applies to its forward cases only, bias floors when it has them", "[runner][nightly]") {
  std::vector<kcert::contract::TestCase> cases{a_case("f", "rmsnorm"),
                                               a_case("b", "rmsnorm", kcert::contract::Direction::backward),
                                               a_case("other", "rope")};
  const auto c_before = cases[0].gates.bias.c;
  kcert::store::Calibration old;  // before kcert-cal/2: no bias floors
  old.id = 7;
  old.warn_k = 3.5;
  old.fail_k = 12.0;
  kcert::runner::apply_calibrations(cases, {{"rmsnorm", old}});
  CHECK(cases[0].gates.variance.warn_k == 3.5);
  CHECK(cases[0].gates.variance.fail_k == 12.0);
  CHECK(cases[0].gates.bias.c == c_before);
  CHECK(cases[0].calibration == "cal-7");
  CHECK(cases[1].calibration.empty());  // backward keeps its own thresholds
  CHECK(cases[1].gates.variance.warn_k == kcert::contract::TestCase{}.gates.variance.warn_k);
  CHECK(cases[2].calibration.empty());  // no calibration for its family

  kcert::store::Calibration with_floors = old;
  with_floors.id = 8;
  with_floors.bias_c = 0.2;
  with_floors.bias_c_magnitude = 0.9;
  kcert::runner::apply_calibrations(cases, {{"rmsnorm", with_floors}});
  CHECK(cases[0].gates.bias.c == 0.2);
  CHECK(cases[0].gates.bias.c_magnitude == 0.9);
  CHECK(cases[0].calibration == "cal-8");
}

TEST_CASE("a run without a database reads back as its own results, compared with nothing", "[runner][nightly]") {
  kcert::engine::CaseResult r;
  r.testcase = a_case("n1", "rmsnorm");
  r.variance.khat = {1.0, 2.0};
  kcert::store::RunInfo info;
  info.run_id = "r1";
  info.profile = "smoke";
  info.shard_count = 1;
  info.started_at = "2026-12-06T10:00:00Z";
  kcert::store::Environment env;
  env.fingerprint = "abc";
  const auto run = kcert::runner::run_from_results({r}, info, "/tmp/s.jsonl", env);
  CHECK(run.run_id == "r1");
  CHECK(run.profile == "smoke");
  CHECK(run.source == "spool (/tmp/s.jsonl)");
  CHECK(run.environments == std::vector<std::string>{"abc"});
  CHECK(run.previous.empty());
  CHECK(run.previous_note == "not compared: no database");
  REQUIRE(run.documents.size() == 1);
  CHECK(run.documents[0].at("id") == "n1");
  CHECK(run.khat.at("n1") == std::vector<double>{1.0, 2.0});
  CHECK(run.seconds < 0);
}
