#include "harness/store/spool.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "harness/store/json.hpp"
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
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
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
}

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

SpoolContents read_spool(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open spool file");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(path + ": cannot read spool file");
  SpoolContents out;
  std::size_t n = 0;
  for (std::size_t at = 0; at < text.size();) {
    const auto nl = text.find('\n', at);
    const bool last_unterminated = nl == std::string::npos;
    const auto line = text.substr(at, last_unterminated ? std::string::npos : nl - at);
    at = last_unterminated ? text.size() : nl + 1;
    ++n;
    if (line.empty()) continue;
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
    out.records.push_back(std::move(j));
  }
  return out;
}

}  // namespace kcert::store
