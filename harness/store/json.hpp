#pragma once
// JSON sink: results as documented in docs/results.md. +inf is written as the string "inf"
// and an undefined value as null, since JSON has neither.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "harness/engine/case_result.hpp"
#include "harness/stats/tail.hpp"

namespace kcert::store {

nlohmann::json json_number(double v);
nlohmann::json to_json(const stats::GpdFit& fit);
nlohmann::json to_json(const stats::TailAnalysis& a);
nlohmann::json to_json(const kernels::ParamMap& params);
nlohmann::json to_json(const engine::CaseResult& r);

// {"kcert_version": ..., "results": [...]}.
nlohmann::json results_document(const std::vector<engine::CaseResult>& results, const std::string& kcert_version);

// The same document without the fields that describe how a run went rather than what it
// found (runtime: threads, batch, seconds); two runs of the same cases and seeds give
// byte-identical output here.
nlohmann::json without_runtime(nlohmann::json document);

// Write atomically (temporary file, fsync, rename) so a crash never leaves half a file, and
// check every step: std::runtime_error "PATH: what: OS reason" (e.g. "No space left on device").
class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The temporary is created with O_EXCL | O_NOFOLLOW under a fresh name (PATH.tmp.XXXXXX), and
// the rename replaces a link at PATH rather than writing through it: run as root in a folder
// someone else prepared, PATH.tmp used to be opened through their link (O_CREAT | O_TRUNC)
// and a root-owned file was overwritten.
void write_text_file(const std::string& path, const std::string& content);  // throws WriteError
// Creates DIR (and its missing parents) for kcert's own files and refuses it (WriteError) when
// it is a symbolic link, not a folder, owned by another user, or writable by every user
// without the sticky bit (a sticky /tmp is fine: kcert's files there are created O_EXCL):
// whoever controls the folder could swap the files kcert writes there for links between the
// checks and the writes, so only the folder's owner (or root over its own) may hold them.
void make_private_directories(const std::string& dir);
// A file name for a case id: an id of [A-Za-z0-9._-] not starting with '.' as it is;
// otherwise unsafe characters replaced and a hash of the whole id appended (`a/x` and `a_x`
// shared one page and one tail file), and an id longer than 100 characters cut and suffixed
// with that hash (a 5000-character id made a report file silently absent: names are
// limited to 255 bytes).
std::string safe_file_name(const std::string& id);
void write_json_file(const std::string& path, const nlohmann::json& document);

}  // namespace kcert::store
