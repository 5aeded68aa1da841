#pragma once
// Loads the fixtures in tests/stats/fixtures: values computed independently with SciPy/NumPy
// by the scripts beside them.
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace kcert::test {

inline nlohmann::json load_fixture(const std::string& name) {
  const std::string path = std::string(KCERT_FIXTURE_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  return nlohmann::json::parse(in);
}

inline const nlohmann::json& stats_reference() {
  static const nlohmann::json doc = load_fixture("stats_reference.json");
  return doc;
}

// generate_random_stream.py: the input stream computed by a NumPy implementation, and SciPy's
// tests of its distribution.
inline const nlohmann::json& random_stream_reference() {
  static const nlohmann::json doc = load_fixture("random_stream_reference.json");
  return doc;
}

}  // namespace kcert::test
