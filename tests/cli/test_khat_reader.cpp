#include "kcert_catch.hpp"

#include <cmath>
#include <sstream>

#include "harness/report/khat_csv.hpp"

using kcert::runner::InputError;
using kcert::report::read_khat;

namespace {
std::vector<double> read(const std::string& text) {
  std::istringstream in(text);
  return read_khat(in, "k.txt");
}
}  // namespace

TEST_CASE("K-hat reader takes numbers and inf and skips comments and blank lines", "[khat]") {
  const auto v = read("# K-hat of case x\n0\n1.5\n\n  2e-1  \ninf\n+Infinity\n3 # trailing comment\n+4\n");
  REQUIRE(v.size() == 7);
  CHECK(v[0] == 0.0);
  CHECK(v[1] == 1.5);
  CHECK(v[2] == 0.2);
  CHECK(std::isinf(v[3]));
  CHECK(std::isinf(v[4]));
  CHECK(v[5] == 3.0);
  CHECK(v[6] == 4.0);
}

TEST_CASE("K-hat reader names the line of a non-number", "[khat]") {
  CHECK_THROWS_WITH(read("1\n2\nabc\n"), "k.txt:3: expected a number >= 0 or 'inf', got 'abc'");
  CHECK_THROWS_WITH(read("1.5x\n"), Catch::StartsWith("k.txt:1:"));
  CHECK_THROWS_WITH(read("nan\n"), Catch::StartsWith("k.txt:1:"));
}

TEST_CASE("K-hat reader rejects negatives and empty input", "[khat]") {
  CHECK_THROWS_WITH(read("1\n-0.5\n"), Catch::StartsWith("k.txt:2: K-hat must be >= 0"));
  CHECK_THROWS_WITH(read("-inf\n"), Catch::StartsWith("k.txt:1: K-hat must be >= 0"));
  CHECK_THROWS_WITH(read(""), Catch::Contains("no K-hat values"));
  CHECK_THROWS_WITH(read("# only a comment\n\n"), Catch::Contains("no K-hat values"));
  CHECK_THROWS_AS(kcert::report::read_khat_file("/nonexistent/k.txt"), InputError);
}

TEST_CASE("K-hat reader takes the nightly's own tails/<control>.csv", "[khat]") {
  const auto v = read("replicate,khat\n0,0\n1,1.25\n2,inf\n");
  REQUIRE(v.size() == 3);
  CHECK(v[1] == 1.25);
  CHECK(std::isinf(v[2]));
  CHECK_THROWS_WITH(read("replicate,khat\n0,1,2\n"), "k.txt:2: expected 'replicate,khat' (two fields), got '0,1,2'");
  CHECK_THROWS_WITH(read("1\nreplicate,khat\n"), Catch::StartsWith("k.txt:2: expected a number"));  // only as a header
}
