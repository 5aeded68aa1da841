#pragma once
// A test case (YAML schema v1, docs/testcases.md): a (reference, production) kernel pair of
// one family, the probe contract, the bucket axis, gate settings and the expected outcome.
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/kernels/schema.hpp"
#include "harness/stats/bias.hpp"
#include "harness/stats/tail.hpp"
#include "harness/stats/verdict.hpp"

namespace kcert::testcase {

enum class Kind { negative, positive };
std::string_view to_string(Kind k);

struct KernelChoice {
  std::string variant;
  std::string version;  // the YAML's, or the registered variant's when the YAML gives none
  kernels::ParamMap params;
};

struct GateSettings {
  std::uint64_t replicates = 1024;      // R: pre-declared for the bias gate
  std::uint64_t max_replicates = 8192;  // R_max: the variance gate's cap
  int algebra_replicates = 16;          // N_alg
  double algebra_tolerance = 1e-9;      // tol_alg
  stats::BiasThresholds bias;
  // Statistics that decide the bias gate; the others are computed and reported beside it.
  std::vector<stats::BiasStatistic> bias_deciding{stats::BiasStatistic::signed_difference};
  stats::VarianceSettings variance;
};

// Acceptable verdicts per gate ("algebra", "bias", "variance"); a gate not named is not
// checked.
struct Expectation {
  std::map<std::string, std::vector<stats::Verdict>> gates;
  std::string note;  // why, especially when an expectation was changed
  bool empty() const { return gates.empty(); }
};

struct Attestation {
  std::string path, theorem, status;  // recorded with results, not checked
};

struct TestCase {
  std::string source;   // file path
  std::string id;
  Kind kind = Kind::positive;
  std::string family;
  std::string mechanism;
  std::vector<std::string> references;
  KernelChoice reference;
  KernelChoice production;
  kernels::ProbeContract probe;
  std::string bucket_axis;
  GateSettings gates;
  Expectation expected;
  std::optional<Attestation> attestation;
  std::string profile;  // the profile applied ("" = contract shapes)
  std::vector<std::string> profiles;  // profiles the file defines
  std::vector<std::string> plugins;   // plugin libraries the file asks for, as written
  // The stored calibration whose warn_K / fail_K the variance gate uses ("" = the case's
  // own settings, by default method.md's defaults). Set by `kcert nightly`, not by YAML.
  std::string calibration;
};

// Bad input at the edge: the message starts with "file:line:col: field: ".
class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using FamilySchemas = std::map<std::string, kernels::FamilySchema>;

// Loads and validates one file. `profile` selects `profiles.<name>` overrides when the
// file defines them (otherwise the contract applies unchanged). Every profile the file
// defines is validated too, so a typo in a CI profile fails at load time.
TestCase load_testcase(const std::string& path, const FamilySchemas& families, const std::string& profile = "");
TestCase parse_testcase(const std::string& yaml_text, const std::string& source, const FamilySchemas& families,
                        const std::string& profile = "");

// The plugin libraries a case file names under `plugins:`, resolved against the file's
// folder; read before validation so their variants exist when the file is checked.
std::vector<std::string> plugin_paths(const std::string& path);

// Expands directories (recursively, *.yaml and *.yml) and keeps files as given; sorted
// within each directory. Throws LoadError for a path that does not exist.
std::vector<std::string> collect_testcase_files(const std::vector<std::string>& paths);

}  // namespace kcert::testcase
