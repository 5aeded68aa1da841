// io::run_process (io/process.hpp): the helper-program runner the report's gnuplot and the
// Python describer share. Real programs (/bin/sh, cat), no mocks.
#include "tests/kcert_catch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "harness/io/process.hpp"

namespace {

kcert::io::ProcessSpec shell(const std::string& script) {
  kcert::io::ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  return spec;
}

}  // namespace

TEST_CASE("a program's output and errors are read back, and its exit status kept", "[io][process]") {
  const auto o = kcert::io::run_process(shell("echo out; echo err >&2; exit 3"));
  CHECK(o.start_error == 0);
  CHECK(o.exit_status == 3);
  CHECK(o.signal == 0);
  CHECK_FALSE(o.timed_out);
  CHECK(o.out == "out\n");
  CHECK(o.err == "err\n");
}

TEST_CASE("a program's input is written whole, even past a pipe's buffer, while it writes back", "[io][process]") {
  auto spec = shell("cat");
  spec.input = std::string(1 << 20, 'x') + "end";  // 1 MiB: cat echoes while we still write
  const auto o = kcert::io::run_process(spec);
  CHECK(o.exit_status == 0);
  CHECK(o.out.size() == (std::size_t{1} << 20) + 3);
  CHECK(o.out.substr(o.out.size() - 3) == "end");
  // Without input, standard input is /dev/null: cat ends at once.
  CHECK(kcert::io::run_process(shell("cat")).out.empty());
}

TEST_CASE("what is read back is bounded, and the rest is drained so the program never blocks", "[io][process]") {
  auto spec = shell("head -c 300000 /dev/zero");
  spec.max_read = 1000;
  const auto o = kcert::io::run_process(spec);
  CHECK(o.exit_status == 0);
  CHECK(o.out.size() == 1000);
}

TEST_CASE("a program past its deadline is killed with what it started", "[io][process]") {
  auto spec = shell("sleep 30 & sleep 30");
  spec.seconds = 0.3;
  const auto start = std::chrono::steady_clock::now();
  const auto o = kcert::io::run_process(spec);
  CHECK(o.timed_out);
  CHECK(o.exit_status == -1);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // A program killed by a signal says which.
  const auto killed = kcert::io::run_process(shell("kill -TERM $$"));
  CHECK(killed.signal == SIGTERM);
  CHECK(killed.exit_status == -1);
}

TEST_CASE("a program that cannot be started says why, and nothing else", "[io][process]") {
  kcert::io::ProcessSpec spec;
  spec.argv = {"/nonexistent/kcert-no-such-program"};
  CHECK(kcert::io::run_process(spec).start_error == ENOENT);
  spec.argv = {"kcert-no-such-program-on-path"};
  spec.search_path = true;
  CHECK(kcert::io::run_process(spec).start_error == ENOENT);
}

TEST_CASE("output to the caller's descriptor, in the caller's folder", "[io][process]") {
  const auto dir = std::filesystem::temp_directory_path() / ("kcert-test-process-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int log_fd = ::open((dir / "log").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(dir_fd >= 0);
  REQUIRE(log_fd >= 0);
  auto spec = shell("pwd; echo oops >&2; cat > here.txt");
  spec.input = "data\n";
  spec.output_fd = log_fd;
  spec.directory_fd = dir_fd;
  const auto o = kcert::io::run_process(spec);
  ::close(log_fd);
  ::close(dir_fd);
  CHECK(o.exit_status == 0);
  CHECK(o.out.empty());
  std::ifstream log(dir / "log");
  std::stringstream text;
  text << log.rdbuf();
  CHECK(text.str() == std::filesystem::canonical(dir).string() + "\noops\n");
  std::ifstream here(dir / "here.txt");
  std::string line;
  std::getline(here, line);
  CHECK(line == "data");
  std::filesystem::remove_all(dir);
}
