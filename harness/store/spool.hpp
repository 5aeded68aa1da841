#pragma once
// The spool: every record of a stored run is appended to a JSON-lines file (and synced)
// before the database sees it, so a database outage loses nothing; `kcert upload SPOOL`
// replays the file later, idempotently.
//
// Records: {"type": "run", ...} once per shard, {"type": "result", ...} per case,
// {"type": "finish", ...} at the end (docs/database.md).
#include <nlohmann/json.hpp>

#include <optional>

#include <cstdio>
#include <string>
#include <vector>

#include "harness/engine/case_result.hpp"
#include "harness/store/environment.hpp"

namespace kcert::store {

struct RunInfo {
  std::string run_id;
  std::string started_at;  // ISO 8601 UTC
  std::string kcert_version;
  std::string git_revision;
  std::string profile;
  int shard_index = 0;  // k of N, 0-based
  int shard_count = 1;
  nlohmann::json configuration = nlohmann::json::object();
  Environment environment;
};

std::string utc_now_iso();
// "20261129T120301Z-1a2b3c4d": sortable by time, unique across machines.
std::string new_run_id();

nlohmann::json run_record(const RunInfo& run);
// Carries the whole result document, the K-hat sample and the YAML's hash.
nlohmann::json result_record(const RunInfo& run, const engine::CaseResult& result);
nlohmann::json finish_record(const RunInfo& run, const std::string& status);

class SpoolWriter {
 public:
  explicit SpoolWriter(const std::string& path);  // appends; creates parent folders
  ~SpoolWriter();
  SpoolWriter(const SpoolWriter&) = delete;
  SpoolWriter& operator=(const SpoolWriter&) = delete;
  // One line, flushed and fsync'ed before returning.
  void append(const nlohmann::json& record);
  const std::string& path() const { return path_; }
  int fd() const;  // its descriptor (for a forked child to close: it is the parent's)

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

struct SpoolContents {
  std::vector<nlohmann::json> records;
  // A last line cut short by a crash or a full disk (no final newline, not a whole JSON
  // object): skipped, and said here ("FILE:N: torn last line ... skipped"), so the complete
  // records before it still upload.
  std::optional<std::string> torn_tail;
};

// Throws std::runtime_error naming the file and line of a malformed record anywhere but a
// torn last line (a file that is not a spool must not be half uploaded).
SpoolContents read_spool(const std::string& path);

}  // namespace kcert::store
