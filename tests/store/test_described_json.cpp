// The one result description (gates/description.hpp, issue 51 item 3): a described part of a
// result goes out as a document's object and comes back typed, field for field, with the
// documents' encodings of NaN and infinity; a field of another type is named. The documents
// themselves are pinned by the golden tests (tests/cli/golden) and the wire by tests/runner.
#include "tests/catch_torch.hpp"

#include <cmath>
#include <limits>

#include "harness/store/described_json.hpp"
#include "harness/store/json.hpp"

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }
}  // namespace

TEST_CASE("a described part goes out by its names and comes back typed", "[store][description]") {
  kcert::stats::ThinTailBound b;
  b.u = 1.5;
  b.exceedances = 7;
  b.mean_excess = kNaN;
  b.sigma_upper = kInf;
  b.zeta_upper = 0.25;
  b.U = -kInf;
  b.supported_horizon = 1e6;
  b.unseen_event_horizon = 341.0;
  const auto j = kcert::store::described_json(b);
  CHECK(j.at("u") == 1.5);
  CHECK(j.at("exceedances") == 7);
  CHECK(j.at("mean_excess").is_null());
  CHECK(j.at("sigma_upper") == "inf");
  CHECK(j.at("U") == "-inf");
  CHECK(j.size() == 8);
  const auto back = kcert::store::read_described<kcert::stats::ThinTailBound>(j, "thin_bound");
  CHECK(back.u == b.u);
  CHECK(back.exceedances == b.exceedances);
  CHECK(std::isnan(back.mean_excess));
  CHECK(back.sigma_upper == kInf);
  CHECK(back.zeta_upper == b.zeta_upper);
  CHECK(back.U == -kInf);
  CHECK(back.supported_horizon == b.supported_horizon);
  CHECK(back.unseen_event_horizon == b.unseen_event_horizon);

  kcert::gates::BucketReport::SideBias s{-0.5, kNaN, 0.25, kcert::stats::Verdict::warn};
  const auto sj = kcert::store::described_json(s);
  CHECK(sj.at("verdict") == "WARN");
  const auto sb = kcert::store::read_described<kcert::gates::BucketReport::SideBias>(sj, "x");
  CHECK(same(sb.z, s.z));
  CHECK(sb.verdict == kcert::stats::Verdict::warn);
  CHECK(sb.mean == -0.5);

  kcert::stats::GpdFit f{-0.25, 2.0, -10.5, false, true, 50};
  const auto fb = kcert::store::read_described<kcert::stats::GpdFit>(kcert::store::to_json(f), "fit");
  CHECK(fb.xi == f.xi);
  CHECK(fb.at_upper_bound);
  CHECK(fb.n == 50u);
}

TEST_CASE("a result document's described parts read back as the result held them", "[store][description]") {
  kcert::engine::CaseResult r;
  r.testcase.id = "c";
  r.variance.evidence = {4096, 12, 3, 1365.3, false, 1365.3};
  r.baselines.flash_attention = {true, 0.5, 3.25, 64};
  const auto doc = kcert::store::to_json(r);
  const auto e = kcert::store::read_described<kcert::gates::VarianceEvidence>(doc.at("gates").at("variance").at("evidence"), "evidence");
  CHECK(e.replicates == 4096u);
  CHECK(e.events == 12u);
  CHECK(e.exceedances == 3u);
  CHECK(e.horizon == 1365.3);
  CHECK_FALSE(e.reaches_horizon);
  CHECK(doc.at("gates").at("variance").at("evidence").at("sample") == "stopped");
  const auto fa = kcert::store::read_described<kcert::gates::BaselineCheck>(doc.at("baselines").at("flash_attention"), "fa");
  CHECK(fa.flagged);
  CHECK(fa.fraction == 0.5);
  CHECK(fa.first_value == 3.25);
  CHECK(fa.replicates == 64u);  // a field the description gained: written and read with no code of its own
}

TEST_CASE("a described field of another type is named; one a document lacks keeps its default", "[store][description]") {
  nlohmann::json j = {{"flagged", "yes"}, {"fraction", 0.5}};
  CHECK_THROWS_WITH(kcert::store::read_described<kcert::gates::BaselineCheck>(j, "results[2].baselines.assert_close"),
                    "results[2].baselines.assert_close.flagged: expected true or false, found string");
  j = {{"replicates", -3}};
  CHECK_THROWS_WITH(kcert::store::read_described<kcert::gates::VarianceEvidence>(j, "e"),
                    "e.replicates: expected a count (an integer >= 0), found number");
  j = {{"verdict", "MAYBE"}};
  CHECK_THROWS_WITH(kcert::store::read_described<kcert::gates::BucketReport::SideBias>(j, "s"),
                    "s.verdict: 'MAYBE' is not a verdict (PASS, INCONCLUSIVE, WARN, FAIL)");
  CHECK_THROWS_WITH(kcert::store::read_described<kcert::gates::BaselineCheck>(nlohmann::json::array(), "b"),
                    "b: expected an object, found array");
  // An older document without unseen_event_horizon: the rest is read, that one stays 0.
  const auto e = kcert::store::read_described<kcert::gates::VarianceEvidence>(
      nlohmann::json{{"replicates", 64}, {"horizon", 21.3}}, "e");
  CHECK(e.replicates == 64u);
  CHECK(e.horizon == 21.3);
  CHECK(e.unseen_event_horizon == 0.0);
}
