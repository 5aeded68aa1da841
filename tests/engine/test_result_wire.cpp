// The bytes a case run in a child sends back (engine/result_wire.hpp): every value as it was,
// NaN and infinities and unset optionals included, and malformed bytes refused, never read
// past or cast into an enum value that does not exist.
#include "tests/catch_torch.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmath>
#include <cstring>
#include <limits>

#include "harness/engine/result_wire.hpp"
#include "harness/store/json.hpp"

using kcert::engine::CaseResult;
using kcert::engine::decode_outcome;
using kcert::engine::encode_outcome;

namespace {

CaseResult filled() {
  CaseResult r;
  r.verdict = kcert::stats::Verdict::warn;
  r.algebra.worst = {3, 17, {1, 1}, 2};
  r.algebra.reason = "différent";  // UTF-8 kept byte for byte
  r.bias.signed_statistic.flagged.push_back({});
  r.bias.signed_statistic.flagged.back().z = -std::numeric_limits<double>::infinity();
  r.bias.signed_statistic.frontier = {{1.5, 0.25}};
  r.variance.tail.mode = kcert::stats::TailMode::fitted;
  r.variance.tail.free_fit = kcert::stats::GpdFit{0.1, 2.0, -3.0, false, true, 50};
  r.variance.tail.heavy.U_unclipped = std::numeric_limits<double>::quiet_NaN();
  r.variance.khat = {0.0, 1.25, std::numeric_limits<double>::infinity()};
  r.variance.selection = kcert::stats::SelectionTest{};
  r.nonfinite = kcert::gates::NonFinite{"production", "nan", {0, 1, {1}, 0}};
  r.math_modes.tf32_matmul = false;
  r.output_shape = {4, 8};
  r.output_format = kcert::stats::FloatFormat::fp32;
  r.unexpected = {"bias: expected PASS, got WARN"};
  r.decided_by = {{"bias", "negatives"}, {"overall", "contract"}};
  r.sweep.push_back({});
  r.sweep.back().name = "negatives";
  r.runtime.seconds = 0.125;
  return r;
}

}  // namespace

TEST_CASE("result wire: every field comes back as it was", "[wire]") {
  const auto r = filled();
  CaseResult back;
  decode_outcome(encode_outcome(r), back);
  back.testcase = r.testcase;
  CHECK(kcert::store::to_json(back) == kcert::store::to_json(r));
  // What to_json does not show, bit for bit.
  CHECK(back.variance.khat.size() == 3);
  CHECK(std::isinf(back.variance.khat[2]));
  REQUIRE(back.variance.tail.heavy.U_unclipped);
  CHECK(std::isnan(*back.variance.tail.heavy.U_unclipped));
  CHECK(!back.variance.tail.clipped_fit);
  CHECK(back.variance.tail.free_fit->at_upper_bound);
  CHECK(back.math_modes.tf32_matmul == std::optional<bool>(false));
  CHECK(!back.math_modes.tf32_cudnn);
  CHECK(back.algebra.worst.index == std::vector<std::int64_t>{1, 1});
  CHECK(back.runtime.seconds == 0.125);
}

TEST_CASE("result wire: truncated, padded or foreign bytes are refused", "[wire]") {
  const auto bytes = encode_outcome(filled());
  CaseResult out;
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    CHECK_THROWS_WITH(decode_outcome(bytes.substr(0, cut), out),
                      Catch::Contains("truncated") || Catch::Contains("malformed"));
  }
  CHECK_THROWS_WITH(decode_outcome(bytes + "x", out), Catch::Contains("bytes after its end"));
  CHECK_THROWS_WITH(decode_outcome("not a result at all", out), Catch::Contains("not a kcert case result"));
  // The first field after the magic is the verdict (an int): 7 is no verdict.
  auto bad = bytes;
  bad[4] = 7;
  CHECK_THROWS_WITH(decode_outcome(bad, out), Catch::Contains("enum value out of range"));
  // A length larger than what follows is refused before anything is allocated: after the
  // magic (4), the verdict (4) and the algebra gate's verdict, replicates, tolerance, worst
  // discrepancy, worst replicate and element (4 + 4 + 8 + 8 + 8 + 8) comes the length of
  // the worst element's index.
  auto huge = encode_outcome(CaseResult{});
  REQUIRE(huge.size() > 56);
  for (std::size_t i = 48; i < 56; ++i) huge[i] = '\xff';
  CHECK_THROWS_WITH(decode_outcome(huge, out), Catch::Contains("a length runs past the end"));
}

TEST_CASE("result wire: a vector's length costs memory only as its elements arrive (issue 53)", "[wire]") {
  // The worst element's index (a vector of int64) claims 64 Mi elements and 64 MiB follow: the
  // parent resized the vector to 512 MiB from the child's count before reading one element.
  // Decoded in a child process, whose peak resident size says what it allocated.
  auto bytes = encode_outcome(CaseResult{});
  REQUIRE(bytes.size() > 56);
  const std::uint64_t claimed = std::uint64_t{64} << 20;
  std::memcpy(bytes.data() + 48, &claimed, sizeof claimed);
  bytes.insert(56, std::string(std::size_t{64} << 20, '\0'));
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct rusage before {}, after {};
    ::getrusage(RUSAGE_SELF, &before);
    CaseResult out;
    bool refused = false;
    try {
      decode_outcome(bytes, out);
    } catch (const std::exception&) {
      refused = true;
    }
    ::getrusage(RUSAGE_SELF, &after);
    const long grown_mib = (after.ru_maxrss - before.ru_maxrss) / 1024;  // ru_maxrss is in KiB
    const long report[2] = {refused ? 1L : 0L, grown_mib};
    (void)!::write(pipe_fds[1], report, sizeof report);
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  long report[2] = {0, 0};
  REQUIRE(::read(pipe_fds[0], report, sizeof report) == static_cast<ssize_t>(sizeof report));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(report[0] == 1);   // refused: the elements run past the end
  INFO("peak grew by " << report[1] << " MiB decoding a 64 MiB message");
  CHECK(report[1] < 300);  // the message's size, not the 512 MiB its count asked for
}
