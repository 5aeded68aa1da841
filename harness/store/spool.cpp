#include "harness/store/spool.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <set>
#include <stdexcept>

#include "harness/store/json.hpp"
#include "harness/store/json_text.hpp"
#include "harness/io/regular_file.hpp"
#include "harness/store/sha256.hpp"

namespace kcert::store {

std::string utc_now_iso() {
  const auto now = std::chrono::system_clock::now();
  const auto t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03lldZ", buf, static_cast<long long>(ms));
  return out;
}

std::string new_run_id() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return std::string(buf) + "-" + suffix;
}

nlohmann::json run_record(const RunInfo& run) {
  return {{"format", "kcert-spool/1"}, {"type", "run"},
          {"run_id", run.run_id},
          {"started_at", run.started_at},
          {"kcert_version", run.kcert_version},
          {"git_revision", run.git_revision},
          {"profile", run.profile},
          {"shard_index", run.shard_index},
          {"shard_count", run.shard_count},
          {"configuration", run.configuration},
          {"environment",
           {{"fingerprint", run.environment.fingerprint},
            {"identity", run.environment.identity},
            {"details", run.environment.details}}}};
}

nlohmann::json result_record(const RunInfo& run, const engine::CaseResult& result) {
  const auto& tc = result.testcase;
  // The hash of the text that ran (kept in the result as case_text), not of whatever the
  // file holds by the time the record is written.
  const std::string& yaml = tc.text;
  nlohmann::json khat = nlohmann::json::array();
  for (double k : result.variance.khat) khat.push_back(json_number(k));
  return {{"format", "kcert-spool/1"}, {"type", "result"},
          {"run_id", run.run_id},
          {"shard_index", run.shard_index},
          {"environment", run.environment.fingerprint},
          {"testcase",
           {{"case_id", tc.id},
            {"kind", std::string(contract::to_string(tc.kind))},
            {"family", tc.family},
            {"mechanism", tc.mechanism},
            {"references", tc.references},
            {"yaml_sha256", sha256_hex(yaml)}}},
          {"result", to_json(result)},
          {"khat", khat}};
}

nlohmann::json finish_record(const RunInfo& run, const std::string& status) {
  return {{"format", "kcert-spool/1"}, {"type", "finish"}, {"run_id", run.run_id}, {"shard_index", run.shard_index},
          {"finished_at", utc_now_iso()}, {"status", status}};
}

SpoolWriter::SpoolWriter(const std::string& path) : path_(path) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) make_private_directories(parent.string());
  // O_NOFOLLOW: records are appended to the spool file itself, never through a link planted
  // at its name (they were appended to whatever file the link named).
  // O_RDWR, not O_WRONLY: the torn-tail check below reads the file's last bytes.
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw std::runtime_error(path + (errno == ELOOP ? std::string(": is a symbolic link; the spool is written only to a file of its own")
                                                     : ": cannot open spool file for writing: " + std::string(std::strerror(errno))));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + ": is not a regular file; the spool is written only to a file of its own");
  }
  file_ = ::fdopen(fd, "a");
  if (!file_) {
    ::close(fd);
    throw std::runtime_error(path + ": cannot open spool file for writing: " + std::strerror(errno));
  }
  // One writer per spool (each shard has its own file): two runs started with one run id
  // used to interleave their records in it and both exit 0. The lock dies with the process.
  if (::flock(::fileno(file_), LOCK_EX | LOCK_NB) != 0) {
    const bool busy = errno == EWOULDBLOCK;
    std::fclose(file_);
    file_ = nullptr;
    throw std::runtime_error(path + (busy ? ": in use by another kcert process (same run id and shard?); "
                                            "give this run its own --run-id"
                                          : std::string(": cannot lock spool file: ") + std::strerror(errno)));
  }
  // A run cut short mid-write leaves a last line without its newline. A resumed run appended
  // its records to that line, and the glued line stopped every later upload of the file; the
  // torn bytes (never a whole record) are cut off first, under the lock, and said.
  const int fd_locked = ::fileno(file_);
  struct stat now {};
  if (::fstat(fd_locked, &now) == 0 && now.st_size > 0) {
    char last = '\n';
    if (::pread(fd_locked, &last, 1, now.st_size - 1) == 1 && last != '\n') {
      off_t keep = 0;
      char buf[4096];
      for (off_t end = now.st_size; end > 0 && keep == 0;) {
        const off_t begin = end > static_cast<off_t>(sizeof buf) ? end - static_cast<off_t>(sizeof buf) : 0;
        const auto got = ::pread(fd_locked, buf, static_cast<std::size_t>(end - begin), begin);
        if (got <= 0) break;
        for (auto i = got; i > 0; --i) {
          if (buf[i - 1] == '\n') {
            keep = begin + i;
            break;
          }
        }
        end = begin;
      }
      if (::ftruncate(fd_locked, keep) != 0) {
        const std::string reason = std::strerror(errno);
        std::fclose(file_);
        file_ = nullptr;
        throw std::runtime_error(path + ": cannot cut off its torn last line: " + reason);
      }
      std::cerr << "kcert: warning: " << path << ": cut off a torn last line (" << (now.st_size - keep)
                << " bytes, no newline: a run cut short mid-write) before appending\n";
    }
  }
}

int SpoolWriter::fd() const { return file_ ? ::fileno(file_) : -1; }

SpoolWriter::~SpoolWriter() {
  if (file_) std::fclose(file_);
}

void SpoolWriter::append(const nlohmann::json& record) {
  // Replace, not throw: the loader refuses invalid UTF-8, and a stray byte from elsewhere (a
  // plugin's exception text) must cost one U+FFFD, not the record and the rest of the run.
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0 ||
      ::fsync(::fileno(file_)) != 0) {
    // errno says why (ENOSPC, EFBIG past a file-size limit: main ignores SIGXFSZ for this).
    throw std::runtime_error(path_ + ": cannot write spool record: " + std::strerror(errno));
  }
}

namespace {

// nlohmann's DOM copies and compares recursively: a 100,000-deep array in a crafted spool
// segfaulted `upload` (json_nested_deeper_than counts before parsing).
constexpr int kMaxSpoolDepth = 64;

bool plain_run_id(const std::string& id) {
  return !id.empty() && id.size() <= 128 && std::isalnum(static_cast<unsigned char>(id[0])) &&
         std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; });
}

// The fields `upload` reads, with the types it reads them as (docs/schema/kcert-spool-1):
// a record that differs is refused with its line and field, not met as an internal JSON
// error halfway through the inserts. Throws "field: expected ...".
void check_spool_record(const nlohmann::json& j) {
  using J = nlohmann::json;
  const auto fail = [](const std::string& field, const std::string& what) { throw std::runtime_error(field + ": expected " + what); };
  const auto at = [&](const J& o, const std::string& path, const char* key) -> const J& {
    if (!o.is_object() || !o.contains(key)) fail(path + key, "a field here");
    return o.at(key);
  };
  const auto str = [&](const J& o, const std::string& path, const char* key) {
    if (!at(o, path, key).is_string()) fail(path + key, "a string");
  };
  const auto optional_type = [&](const J& o, const std::string& path, const char* key, J::value_t type, const char* what) {
    if (o.contains(key) && !o.at(key).is_null() && o.at(key).type() != type &&
        !(type == J::value_t::number_integer && o.at(key).is_number_unsigned()))
      fail(path + key, what);
  };
  if (j.contains("format") && j.at("format") != "kcert-spool/1") fail("format", "kcert-spool/1");
  str(j, "", "type");
  str(j, "", "run_id");
  if (!plain_run_id(j.at("run_id").get<std::string>())) fail("run_id", "1-128 characters of [A-Za-z0-9._-]");
  if (j.contains("shard_index") && !(j.at("shard_index").is_number_integer() && j.at("shard_index").get<long long>() >= 0 &&
                                     j.at("shard_index").get<long long>() < 100000))
    fail("shard_index", "an integer from 0");
  const auto type = j.at("type").get<std::string>();
  if (type == "run") {
    str(j, "", "started_at");
    str(j, "", "kcert_version");
    str(at(j, "", "environment"), "environment.", "fingerprint");
    if (!at(j.at("environment"), "environment.", "identity").is_object()) fail("environment.identity", "an object");
    optional_type(j, "", "details", J::value_t::object, "an object");
    optional_type(j, "", "git_revision", J::value_t::string, "a string");
    optional_type(j, "", "profile", J::value_t::string, "a string");
    optional_type(j, "", "configuration", J::value_t::object, "an object");
    if (j.contains("shard_count") && !(j.at("shard_count").is_number_integer() && j.at("shard_count").get<long long>() >= 1 &&
                                       j.at("shard_count").get<long long>() <= 100000))
      fail("shard_count", "an integer from 1");
    // A shard of a run has an index below the run's shard count (issue 53: `shard_index 9` of
    // 1 was uploaded, a shard the run could never finish).
    if (j.value("shard_index", 0LL) >= j.value("shard_count", 1LL))
      fail("shard_index", "below shard_count (" + std::to_string(j.value("shard_count", 1LL)) + ")");
  } else if (type == "result") {
    str(j, "", "environment");
    const auto& tc = at(j, "", "testcase");
    for (const char* k : {"case_id", "kind", "family", "mechanism", "yaml_sha256"}) str(tc, "testcase.", k);
    const auto& refs = at(tc, "testcase.", "references");
    if (!refs.is_array() || !std::all_of(refs.begin(), refs.end(), [](const J& r) { return r.is_string(); }))
      fail("testcase.references", "a list of strings");
    const auto& r = at(j, "", "result");
    for (const char* k : {"id", "verdict"}) str(r, "result.", k);
    static const std::set<std::string> verdicts{"PASS", "INCONCLUSIVE", "WARN", "FAIL", "ERROR", "SKIP"};
    if (!verdicts.count(r.at("verdict").get<std::string>())) fail("result.verdict", "PASS, INCONCLUSIVE, WARN, FAIL, ERROR or SKIP");
    for (const char* side : {"reference", "production"}) {
      const std::string p = std::string("result.") + side + ".";
      str(at(r, "result.", side), p, "variant");
      str(r.at(side), p, "version");
    }
    const auto& gates = at(r, "result.", "gates");
    for (const char* g : {"algebra", "bias", "variance"}) {
      const std::string p = std::string("result.gates.") + g + ".";
      str(at(gates, "result.gates.", g), p, "verdict");
      optional_type(gates.at(g), p, "reason", J::value_t::string, "a string");
    }
    if (r.contains("replicates") && !r.at("replicates").is_number_unsigned() &&
        !(r.at("replicates").is_number_integer() && r.at("replicates").get<long long>() >= 0))
      fail("result.replicates", "a count");
    for (const char* k : {"error", "skipped", "calibration", "source", "case_text", "profile"})
      optional_type(r, "result.", k, J::value_t::string, "a string");
    for (const char* k : {"probe", "runtime", "settings"}) optional_type(r, "result.", k, J::value_t::object, "an object");
    if (j.contains("khat") && !j.at("khat").is_array()) fail("khat", "a list");
  } else if (type == "finish") {
    str(j, "", "finished_at");
    const auto& status = at(j, "", "status");
    if (status != "finished" && status != "aborted") fail("status", "finished or aborted");
  } else {
    fail("type", "run, result or finish");
  }
}

}  // namespace

SpoolContents read_spool(const std::string& path) {
  // A night's spool is tens of MB (K-hat samples included); 4 GiB is far beyond any.
  const std::string text = io::read_regular_file(path, std::uint64_t{4} << 30, io::Links::follow, "a spool");
  SpoolContents out;
  std::size_t n = 0;
  for (std::size_t at = 0; at < text.size();) {
    const auto nl = text.find('\n', at);
    const bool last_unterminated = nl == std::string::npos;
    const auto line = text.substr(at, last_unterminated ? std::string::npos : nl - at);
    at = last_unterminated ? text.size() : nl + 1;
    ++n;
    if (line.empty()) continue;
    const auto where = path + ":" + std::to_string(n) + ": ";
    if (json_nested_deeper_than(line, kMaxSpoolDepth))
      throw std::runtime_error(where + "nested deeper than " + std::to_string(kMaxSpoolDepth) + " levels: not a spool record");
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("type")) {
      // Each record is written whole and then fsynced; only the last one can be cut short.
      if (last_unterminated) {
        out.torn_tail = path + ":" + std::to_string(n) + ": torn last line (" + std::to_string(line.size()) +
                        " bytes, no newline: a run cut short mid-write) skipped";
        break;
      }
      throw std::runtime_error(path + ":" + std::to_string(n) + ": not a spool record (expected one JSON object per line)");
    }
    try {
      check_spool_record(j);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(where + e.what() + " (docs/schema/kcert-spool-1.schema.json)");
    }
    // One spool file holds one run's shard: its first record is that run, and a record of
    // another run in it is a crafted or mixed-up file, not something to store.
    if (out.records.empty() && j.at("type") != "run")
      throw std::runtime_error(where + "type: expected the run record first (a spool starts with its run)");
    if (!out.records.empty() && (j.at("run_id") != out.records.front().at("run_id") ||
                                 j.value("shard_index", 0) != out.records.front().value("shard_index", 0)))
      throw std::runtime_error(where + "run_id: '" + j.at("run_id").get<std::string>() + "' (shard " +
                               std::to_string(j.value("shard_index", 0)) + ") is not this file's run '" +
                               out.records.front().at("run_id").get<std::string>() + "' (line 1)");
    out.records.push_back(std::move(j));
  }
  return out;
}

}  // namespace kcert::store
