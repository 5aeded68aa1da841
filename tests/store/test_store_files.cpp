#include "tests/catch_torch.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "harness/io/regular_file.hpp"
#include "harness/store/environment.hpp"
#include "harness/store/json.hpp"
#include "harness/store/sha256.hpp"
#include "harness/store/spool.hpp"

using kcert::store::sha256_hex;

TEST_CASE("sha256 matches the FIPS 180-4 test vectors", "[store]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("the environment fingerprint is stable and follows identity fields only", "[store]") {
  const auto a = kcert::store::detect_environment();
  const auto b = kcert::store::detect_environment();
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.fingerprint.size() == 16);
  CHECK(a.identity.contains("cpu_flags"));
  CHECK(a.identity.contains("torch_version"));
  CHECK(a.identity.contains("blas"));
  CHECK_FALSE(a.identity.contains("threads"));  // speeds and loads never enter the key
  auto other = a.identity;
  other["gpu"] = "NVIDIA H100 80GB HBM3, 9.0, 550.54";
  CHECK(kcert::store::fingerprint_of(other) != a.fingerprint);
  CHECK(kcert::store::fingerprint_of(a.identity) == a.fingerprint);
}

TEST_CASE("a torn last spool line is skipped with its line number, and a bad middle line stops the read", "[store]") {
  const std::string path = "/tmp/kcert-test-spool.jsonl";
  std::remove(path.c_str());
  {
    kcert::store::SpoolWriter w(path);
    // Whole records: read_spool checks each against the spool schema.
    w.append({{"type", "run"}, {"run_id", "r"}, {"started_at", "2026-12-01T00:00:00Z"}, {"kcert_version", "0"}, {"environment", {{"fingerprint", "f"}, {"identity", nlohmann::json::object()}}}});
    w.append({{"type", "finish"}, {"run_id", "r"}, {"finished_at", "2026-12-01T00:00:01Z"}, {"status", "finished"}});
  }
  auto read = kcert::store::read_spool(path);
  CHECK(read.records.size() == 2);
  CHECK_FALSE(read.torn_tail);
  std::ofstream(path, std::ios::app) << "{\"type\": \"res";  // a crash mid-write
  read = kcert::store::read_spool(path);
  CHECK(read.records.size() == 2);  // the complete records still upload
  REQUIRE(read.torn_tail);
  CHECK_THAT(*read.torn_tail, Catch::Contains(path + ":3: torn last line (13 bytes"));
  // The same garbage followed by more records is not a torn tail: not a spool, nothing read.
  std::ofstream(path, std::ios::app) << "\n{\"type\": \"finish\"}\n";
  CHECK_THROWS_WITH(kcert::store::read_spool(path), Catch::Contains(path + ":3: not a spool record"));
  std::remove(path.c_str());
}

TEST_CASE("a run record's shard index is below its shard count", "[store]") {
  // Issue 53: `shard_index 9` of 1 was uploaded, a shard its run could never finish.
  const std::string path = "/tmp/kcert-test-spool-shard.jsonl";
  const nlohmann::json run = {{"type", "run"}, {"run_id", "r"}, {"started_at", "2026-12-01T00:00:00Z"}, {"kcert_version", "0"},
                              {"environment", {{"fingerprint", "f"}, {"identity", nlohmann::json::object()}}}};
  for (const auto& [index, count, ok] : {std::tuple{0, 1, true}, std::tuple{1, 2, true}, std::tuple{9, 1, false}, std::tuple{2, 2, false}}) {
    std::remove(path.c_str());
    auto r = run;
    r["shard_index"] = index;
    r["shard_count"] = count;
    std::ofstream(path) << r.dump() << "\n";
    INFO(index << " of " << count);
    if (ok) CHECK(kcert::store::read_spool(path).records.size() == 1);
    else CHECK_THROWS_WITH(kcert::store::read_spool(path), Catch::Contains("shard_index: expected below shard_count"));
  }
  std::remove(path.c_str());
}

TEST_CASE("a write cut short by the disk is an error naming the bytes and the OS reason, and leaves no file",
          "[store]") {
  // RLIMIT_FSIZE stands in for a full disk: write() fails with EFBIG at 4096 bytes, as it
  // failed with ENOSPC when the nightly silently kept 4096 of 13,423 bytes of a tail CSV.
  const std::string path = "/tmp/kcert-test-short-write.csv";
  std::remove(path.c_str());
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      kcert::store::write_text_file(path, std::string(13423, 'x'));
    } catch (const kcert::store::WriteError& e) {
      const std::string m = e.what();
      const bool ok = m.find("write failed after 4096 of 13423 bytes: File too large") != std::string::npos;
      std::_Exit(ok && !std::filesystem::exists(path) && !std::filesystem::exists(path + ".tmp") ? 0 : 3);
    }
    std::_Exit(4);  // no error: the short write went unnoticed
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The OS's reason when the folder is missing.
  CHECK_THROWS_WITH(kcert::store::write_text_file("/nonexistent-kcert-dir/x.md", "x"),
                    Catch::Contains("/nonexistent-kcert-dir/x.md: cannot create a temporary beside it: No such file or directory"));
  kcert::store::write_text_file(path, "ok\n");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  CHECK(line == "ok");
  std::remove(path.c_str());
}

TEST_CASE("files are written beside links, never through them, and only into folders of kcert's own user", "[store][hostile]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kcert-test-links-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto victim = (dir / "victim").string();
  kcert::store::write_text_file(victim, "precious\n");
  const auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // The temporary's old fixed name and the target itself are links to the victim: it was
  // opened O_CREAT | O_TRUNC through the first and overwritten.
  fs::create_symlink(victim, dir / "report.md.tmp");
  fs::create_symlink(victim, dir / "report.md");
  kcert::store::write_text_file((dir / "report.md").string(), "report\n");
  CHECK(read(victim) == "precious\n");
  CHECK(!fs::is_symlink(dir / "report.md"));
  CHECK(read(dir / "report.md") == "report\n");
  // The spool appends to its own file only.
  fs::create_symlink(victim, dir / "run.jsonl");
  CHECK_THROWS_WITH(kcert::store::SpoolWriter((dir / "run.jsonl").string()), Catch::Contains("run.jsonl: is a symbolic link"));
  CHECK(read(victim) == "precious\n");
  // Folders: a link, or one every user may write, is refused; one of our own is fine.
  fs::create_directories(dir / "real");
  fs::create_directory_symlink(dir / "real", dir / "linked");
  CHECK_THROWS_WITH(kcert::store::make_private_directories((dir / "linked").string() + "/"), Catch::Contains("is a symbolic link"));
  fs::create_directories(dir / "open");
  fs::permissions(dir / "open", fs::perms::all);
  CHECK_THROWS_WITH(kcert::store::make_private_directories((dir / "open").string()), Catch::Contains("writable by every user"));
  // A folder of our own below it is refused too (issue 53): anyone may rename it away after
  // the checks and put theirs in its place. Nothing is created there.
  CHECK_THROWS_WITH(kcert::store::make_private_directories((dir / "open" / "mine" / "deeper").string()),
                    Catch::Contains("its parent folder " + (dir / "open").string() + " is writable by every user"));
  CHECK_FALSE(fs::exists(dir / "open" / "mine"));
  // So is one below a group-writable folder.
  fs::create_directories(dir / "group");
  fs::permissions(dir / "group", fs::perms::owner_all | fs::perms::group_all);
  CHECK_THROWS_WITH(kcert::store::make_private_directories((dir / "group" / "mine").string()),
                    Catch::Contains("is writable by its group (mode 0770)"));
  // Sticky, as /tmp: others cannot replace what kcert creates there (O_EXCL, O_NOFOLLOW).
  fs::permissions(dir / "open", fs::perms::all | fs::perms::sticky_bit);
  CHECK_NOTHROW(kcert::store::make_private_directories((dir / "open").string()));
  CHECK_NOTHROW(kcert::store::make_private_directories((dir / "open" / "mine").string()));
  fs::remove_all(dir);
}

TEST_CASE("case ids that differ get different file names, and none is hidden", "[store][hostile]") {
  using kcert::store::safe_file_name;
  CHECK(safe_file_name("n1_gemma_rmsnorm_offset_bf16") == "n1_gemma_rmsnorm_offset_bf16");
  // `a/x` and `a_x` shared one page and one tail file.
  CHECK(safe_file_name("a/x") != safe_file_name("a_x"));
  CHECK(safe_file_name("a/x").rfind("a_x-", 0) == 0);
  CHECK(safe_file_name("..")[0] != '.');
  CHECK(safe_file_name(".hidden")[0] != '.');
  CHECK(safe_file_name(std::string(5000, 'a')).size() <= 113);
  // A control with id `index` wrote its page over the report's html/index.html (issue 53).
  for (const char* id : {"index", "INDEX", "Index"}) {
    CHECK(safe_file_name(id) != id);
    CHECK(safe_file_name(id).rfind(std::string(id) + "-", 0) == 0);
  }
}

TEST_CASE("a spool has one writer: a second one on the same file is refused with the reason", "[store]") {
  const std::string path = "/tmp/kcert-test-spool-lock.jsonl";
  std::remove(path.c_str());
  {
    kcert::store::SpoolWriter first(path);
    CHECK_THROWS_WITH(kcert::store::SpoolWriter(path), Catch::Contains("in use by another kcert process"));
    first.append({{"type", "run"}, {"run_id", "r"}, {"started_at", "2026-12-01T00:00:00Z"}, {"kcert_version", "0"}, {"environment", {{"fingerprint", "f"}, {"identity", nlohmann::json::object()}}}});
  }
  kcert::store::SpoolWriter again(path);  // released when the first closed
  again.append({{"type", "finish"}, {"run_id", "r"}, {"finished_at", "2026-12-01T00:00:01Z"}, {"status", "finished"}});
  CHECK(kcert::store::read_spool(path).records.size() == 2);
  std::remove(path.c_str());
}

TEST_CASE("a result the harness could not finish says ERROR for every gate, not the defaults", "[store]") {
  kcert::engine::CaseResult r;
  r.testcase.id = "broken";
  r.error = "production variant 'x' returned Float, expected BFloat16";
  const auto j = kcert::store::to_json(r);
  CHECK(j.at("verdict") == "ERROR");
  CHECK(j.at("error") == r.error);
  for (const char* g : {"algebra", "bias", "variance"}) {
    INFO(g);
    CHECK(j.at("gates").at(g).at("verdict") == "ERROR");
  }
  kcert::engine::CaseResult ok;
  ok.testcase.id = "fine";
  CHECK(kcert::store::to_json(ok).at("gates").at("bias").at("verdict") == "PASS");
}

TEST_CASE("a spool that is a FIFO or a link to /dev/zero is refused at once, not read (issue 53)", "[store][hostile]") {
  const auto dir = std::filesystem::temp_directory_path() / ("kcert-spool-special-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto fifo = (dir / "fifo.jsonl").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto zero = (dir / "zero.jsonl").string();
  std::filesystem::create_symlink("/dev/zero", zero);
  // Without a writer, reading the FIFO blocked upload forever; /dev/zero read until memory ran out.
  for (const auto& path : {fifo, zero}) {
    CHECK_THROWS_WITH(kcert::store::read_spool(path),
                      Catch::Contains(path + ": not a regular file (a FIFO, device or folder), not read"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("one reader of files kcert is pointed at: links followed or refused, only regular files, a bound (issue 51)",
          "[store][hostile]") {
  using kcert::io::FileRefused;
  using kcert::io::Links;
  using kcert::io::read_regular_file;
  const auto dir = std::filesystem::temp_directory_path() / ("kcert-io-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto file = (dir / "a.txt").string();
  std::ofstream(file) << "twelve bytes";
  const auto link = (dir / "link.txt").string();
  std::filesystem::create_symlink(file, link);
  const auto fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto why = [](const std::function<void()>& read) {
    try {
      read();
    } catch (const FileRefused& e) {
      return e.why();
    }
    FAIL("not refused");
    return FileRefused::Why::cannot_open;
  };
  CHECK(read_regular_file(file, 12, Links::refuse, "x") == "twelve bytes");
  CHECK(read_regular_file(link, 12, Links::follow, "x") == "twelve bytes");  // a file the user named
  CHECK(why([&] { read_regular_file(link, 12, Links::refuse, "x"); }) == FileRefused::Why::link);
  CHECK(why([&] { read_regular_file(fifo, 12, Links::follow, "x"); }) == FileRefused::Why::not_regular);
  CHECK(why([&] { read_regular_file(dir.string(), 12, Links::follow, "x"); }) == FileRefused::Why::not_regular);
  CHECK(why([&] { read_regular_file((dir / "none").string(), 12, Links::follow, "x"); }) == FileRefused::Why::cannot_open);
  CHECK_THROWS_WITH(read_regular_file(file, 11, Links::follow, "a test file"),
                    file + ": 12 bytes, more than the 11 bytes a test file may hold; not read");
  std::filesystem::remove_all(dir);
}
