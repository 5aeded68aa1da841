#pragma once
// YAML schema v1 (docs/testcases.md): reads and validates case files into contract::TestCase.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/contract/test_case.hpp"
#include "harness/kernels/schema.hpp"

namespace kcert::testcase {

using contract::TestCase;

// Bad input at the edge: the message starts with "file:line:col: field: ".
class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using FamilySchemas = std::map<std::string, kernels::FamilySchema>;

// The most a case file may hold: the largest shipped control is a few KB; a stray large file
// (a 4 GiB dump in a controls folder) is one file's load error, not an out-of-memory end of
// the nightly (issue 53).
inline constexpr std::uint64_t kMaxCaseFileBytes = std::uint64_t{1} << 20;

// A case file's text: a regular file only, a link as its last component refused, a FIFO
// refused without blocking, at most kMaxCaseFileBytes. Throws LoadError naming the path.
std::string read_case_file(const std::string& path);

// Loads and validates one file. `profile` selects `profiles.<name>` overrides when the
// file defines them (otherwise the contract applies unchanged). Every profile the file
// defines is validated too, so a typo in a CI profile fails at load time.
// The cases of one file: one, or two for `direction: both` (the forward case first, then
// the backward one, id `<id>@backward`).
std::vector<TestCase> load_testcases(const std::string& path, const FamilySchemas& families, const std::string& profile = "");
std::vector<TestCase> parse_testcases(const std::string& yaml_text, const std::string& source, const FamilySchemas& families,
                                      const std::string& profile = "");
// The first of them (a single-direction file's only case).
TestCase load_testcase(const std::string& path, const FamilySchemas& families, const std::string& profile = "");
TestCase parse_testcase(const std::string& yaml_text, const std::string& source, const FamilySchemas& families,
                        const std::string& profile = "");

// The plugin libraries a case file names under `plugins:`, resolved against the file's
// folder; read before validation so their variants exist when the file is checked.
std::vector<std::string> plugin_paths(const std::string& path);
// The Python kernel files a case file names under `python:` (run in `python -m kcert`
// workers: runner/python_route.hpp), resolved the same way.
std::vector<std::string> python_paths(const std::string& path);
// `named` (a file a case names) resolved against the folder of the case file `case_path`.
std::string resolved_against(const std::string& case_path, const std::string& named);

// Expands directories (recursively, *.yaml and *.yml) and keeps files as given; sorted
// within each directory. A link inside a directory is listed, not followed (its load then
// fails with a reason); a link named as an argument is resolved to its target. Throws
// LoadError for a path that does not exist.
std::vector<std::string> collect_testcase_files(const std::vector<std::string>& paths);


}  // namespace kcert::testcase
