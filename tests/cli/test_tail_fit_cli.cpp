#include "kcert_catch.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "run_command.hpp"

using kcert::test::kcert_binary;
using kcert::test::run_command;

namespace {
// A temporary file holding `text`, removed when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/kcert-test-XXXXXX";
    const int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    ::close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string khat_sample() {
  // Exponential tail around 1.3: a WARN-free, well-fitted sample of 500 replicates.
  std::string text;
  for (int i = 0; i < 500; ++i) {
    const double u = (i + 0.5) / 500.0;
    text += std::to_string(1.0 - 0.1 * std::log(1.0 - u)) + "\n";
  }
  return text;
}
}  // namespace

TEST_CASE("tail-fit prints the variance-gate analysis as a table", "[cli]") {
  TempFile f(khat_sample());
  const auto r = run_command(kcert_binary() + " tail-fit " + f.path() + " 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("500 replicates"));
  CHECK_THAT(r.output, Catch::Contains("return level r_T"));
  CHECK_THAT(r.output, Catch::Contains("r_T bounds"));
  CHECK_THAT(r.output, Catch::Contains("verdict"));
}

TEST_CASE("tail-fit --json carries the documented fields and honours the thresholds", "[cli]") {
  TempFile f(khat_sample());
  const auto r = run_command(kcert_binary() + " tail-fit " + f.path() +
                             " --json --warn-k 1.5 --fail-k 1.8 --bootstrap 50 --seed 7");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK(j.at("replicates") == 500);
  CHECK(j.at("n_exc") == 50);
  CHECK(j.at("mode") == "fitted");
  CHECK(j.at("settings").at("bootstrap") == 50);
  CHECK(j.at("settings").at("seed") == 7);
  const double U = j.at("U");
  CHECK(j.at("U_kind") == "profile_likelihood_upper_bound");
  CHECK(j.at("settings").at("level") == 0.99);
  CHECK(U > j.at("r_T").get<double>());
  CHECK(j.at("r_T_lower").get<double>() < j.at("r_T").get<double>());
  // The verdict is the thresholds' reading of U.
  const std::string expected = U <= 1.5 ? "PASS" : U <= 1.8 ? "WARN" : "FAIL";
  CHECK(j.at("verdict") == expected);
  CHECK(U > 1.8);  // ≈ 1 + 0.1·ln(T·ζ) ≈ 2.1: FAIL under these tight thresholds
}

TEST_CASE("tail-fit reads standard input and reports +inf K-hat as FAIL", "[cli]") {
  const auto r = run_command("printf '1\\n2\\ninf\\n' | " + kcert_binary() + " tail-fit - --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK(j.at("verdict") == "FAIL");
  CHECK(j.at("mode") == "infinite");
  CHECK(j.at("U") == "inf");
}

TEST_CASE("tail-fit names the bad line and exits 2", "[cli]") {
  TempFile f("1.0\n0.5\nbanana\n");
  const auto r = run_command(kcert_binary() + " tail-fit " + f.path() + " 2>&1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(f.path() + ":3: expected a number >= 0 or 'inf', got 'banana'"));
  TempFile neg("1.0\n-2\n");
  const auto rn = run_command(kcert_binary() + " tail-fit " + neg.path() + " 2>&1");
  CHECK(rn.exit_code == 2);
  CHECK_THAT(rn.output, Catch::Contains(neg.path() + ":2: K-hat must be >= 0"));
  TempFile empty("");
  const auto re = run_command(kcert_binary() + " tail-fit " + empty.path() + " 2>&1");
  CHECK(re.exit_code == 2);
  CHECK_THAT(re.output, Catch::Contains("no K-hat values"));
}

TEST_CASE("tail-fit rejects inconsistent thresholds and missing files with exit 2", "[cli]") {
  TempFile f("1\n2\n");
  const auto r = run_command(kcert_binary() + " tail-fit " + f.path() + " --warn-k 5 --fail-k 3 2>&1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("fail_k must be finite and >= warn_k"));
  const auto missing = run_command(kcert_binary() + " tail-fit /nonexistent/khat.txt 2>&1");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Catch::Contains("cannot open"));
}

TEST_CASE("kcert --help teaches the three gates and lists tail-fit", "[cli]") {
  const auto r = run_command(kcert_binary() + " --help 2>&1");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("algebra"));
  CHECK_THAT(r.output, Catch::Contains("tail-fit"));
  const auto sub = run_command(kcert_binary() + " tail-fit --help 2>&1");
  CHECK(sub.exit_code == 0);
  CHECK_THAT(sub.output, Catch::Contains("--warn-k"));
  CHECK(run_command(kcert_binary() + " no-such-command 2>&1").exit_code == 2);
}

TEST_CASE("kcert list shows the families and their variants", "[cli]") {
  const auto r = run_command(kcert_binary() + " list 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("rmsnorm"));
  CHECK_THAT(r.output, Catch::Contains("gemma_offset_in_w"));
  CHECK_THAT(r.output, Catch::Contains("shape.hidden"));
  const auto j = run_command(kcert_binary() + " list rmsnorm --json");
  const auto doc = nlohmann::json::parse(j.output);
  CHECK(doc.at("format") == "kcert-families/1");
  CHECK(doc.at("families").at(0).at("family") == "rmsnorm");
  CHECK(doc.at("families").at(0).at("bucket_axes").at(0) == "channel");
  CHECK(run_command(kcert_binary() + " list nosuchfamily 2>&1").exit_code == 2);
}

TEST_CASE("tail-fit analyses many files, one JSON line each, in the order given", "[cli]") {
  TempFile a(khat_sample());
  TempFile b("0\n0\n0\n");
  const auto r = run_command(kcert_binary() + " tail-fit " + a.path() + " " + b.path() + " --json --bootstrap 0");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.output);
  std::string line;
  std::vector<nlohmann::json> docs;
  while (std::getline(lines, line)) docs.push_back(nlohmann::json::parse(line));
  REQUIRE(docs.size() == 2);
  CHECK(docs[0].at("source") == a.path());
  CHECK(docs[0].at("mode") == "fitted");
  CHECK(docs[1].at("source") == b.path());
  CHECK(docs[1].at("mode") == "trivially_aligned");
}
