// The report room's nightly folder (issue 51): a run's results read once and rendered as
// summary.md, results.json, tails/ and html/; the folder's lock. The whole nightly through the
// binary (console, exit codes, a real PostgreSQL) is tested in tests/nightly and tests/cli.
#include "tests/catch_torch.hpp"

#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness/report/nightly_folder.hpp"
#include "harness/store/json.hpp"

namespace {

namespace fs = std::filesystem;

// A skipped case's document as kcert writes it (store::to_json), so the site reads it too.
nlohmann::json skipped(const std::string& id, kcert::contract::Kind kind, const std::string& why) {
  kcert::engine::CaseResult r;
  r.testcase.id = id;
  r.testcase.kind = kind;
  r.testcase.family = "rmsnorm";
  r.skipped = why;
  return kcert::store::to_json(r);
}

kcert::runner::NightlyRun a_run() {
  kcert::runner::NightlyRun run;
  run.run_id = "r1";
  run.profile = "smoke";
  run.source = "spool (/x|y)";
  run.environments = {"abc123"};
  run.documents = {skipped("p2", kcert::contract::Kind::positive, "needs LibTorch >= 2.4"),
                   skipped("n1|<b>x</b>", kcert::contract::Kind::negative, "needs a GPU")};
  run.khat = {{"p2", {}}, {"n0", {0.5, 1.25}}};
  run.previous_note = "No earlier run.";
  return run;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path fresh_folder(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kcert-test-report-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("a nightly's results are read once: outcomes sorted by kind, family and id, status from the table",
          "[report][nightly]") {
  const auto a = kcert::report::assess_nightly(a_run());
  REQUIRE(a.outcomes.size() == 2);
  CHECK(a.outcomes[0].id == "n1|<b>x</b>");  // negatives first
  CHECK(a.outcomes[1].id == "p2");
  CHECK(a.table.skipped.size() == 2);
  CHECK(a.changes.empty());
  CHECK(a.verdict.status == kcert::eval::NightlyStatus::ok);
}

TEST_CASE("summary.md carries texts from results as cells, never as lines or markup", "[report][nightly]") {
  const auto run = a_run();
  const auto a = kcert::report::assess_nightly(run);
  const auto md = kcert::report::nightly_summary_markdown(run, a, {"", "Xeon, AVX-512", 0, "9.9"});
  CHECK_THAT(md, Catch::StartsWith("# kcert nightly r1\n\n- profile: smoke\n"));
  CHECK_THAT(md, Catch::Contains("results read from the spool (/x\\|y)"));
  CHECK_THAT(md, Catch::Contains("`abc123`: Xeon, AVX-512"));
  CHECK_THAT(md, Catch::Contains("status: every control behaved as expected (exit 0)"));
  CHECK_THAT(md, !Catch::Contains("<b>"));
  const auto attention = kcert::report::nightly_summary_markdown(run, a, {"", "", 1, "9.9"});
  CHECK_THAT(attention, Catch::Contains("status: ATTENTION (exit 1)"));
}

TEST_CASE("results.json states the run, its status and every document as stored", "[report][nightly]") {
  auto run = a_run();
  run.seconds = 12.5;
  const auto a = kcert::report::assess_nightly(run);
  const auto j = kcert::report::nightly_results_document(run, a, {"", "", 2, "9.9"});
  CHECK(j.at("format") == "kcert-nightly/1");
  CHECK(j.at("kcert_version") == "9.9");
  CHECK(j.at("exit_status") == 2);
  CHECK(j.at("seconds") == 12.5);
  CHECK(j.at("started_at").is_null());
  CHECK(j.at("results") == nlohmann::json(run.documents));
  CHECK(j.at("falsifiability").at("skipped").size() == 2);
}

TEST_CASE("the report folder holds summary.md, results.json, a tail file per measured case and the site",
          "[report][nightly]") {
  const auto dir = fresh_folder("folder");
  const auto run = a_run();
  const auto a = kcert::report::assess_nightly(run);
  const kcert::report::NightlyFolderOptions options{(dir / "junit.xml").string(), "", 0, "9.9"};
  const auto results = kcert::report::write_nightly_data(run, a, options, dir);
  CHECK(results.at("run_id") == "r1");
  const auto html = kcert::report::write_nightly_site(run, results, options, dir);
  CHECK(fs::is_regular_file(dir / "summary.md"));
  CHECK(nlohmann::json::parse(read(dir / "results.json")).at("run_id") == "r1");
  CHECK(read(dir / "tails" / "n0.csv") == "replicate,khat\n0,0.5\n1,1.25\n");
  CHECK_FALSE(fs::exists(dir / "tails" / "p2.csv"));  // measured nothing: no tail file
  CHECK_THAT(read(dir / "junit.xml"), Catch::Contains("kcert nightly r1"));
  CHECK(fs::is_regular_file(dir / "html" / "index.html"));
  CHECK(html.pages >= 1);
  // The JUnit file in the folder is linked from the pages.
  CHECK_THAT(read(dir / "html" / "index.html"), Catch::Contains("../junit.xml"));
  fs::remove_all(dir);
}

TEST_CASE("a second writer of a report folder waits for the first, and says so once", "[report][nightly]") {
  const auto dir = fresh_folder("lock");
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all);
  const int held = ::open((dir / ".kcert-report.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX) == 0);
  std::thread release([held] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::close(held);
  });
  int told = 0;
  std::string said;
  const auto start = std::chrono::steady_clock::now();
  {
    const kcert::report::ReportFolderLock lock(dir.string(), [&](const std::string& why) {
      ++told;
      said = why;
    });
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(250));
  }
  release.join();
  CHECK(told == 1);
  CHECK_THAT(said, Catch::Contains("is being written by another kcert; waiting for it"));
  fs::remove_all(dir);
}
