#pragma once
// Reads a stored K̂ sample: one value per line, `inf` allowed, blank lines and `#` comments
// ignored. Errors name the source and the line.
#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kcert::cli {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `source` names the stream in error messages ("khat.txt", "<stdin>").
// Throws InputError: "khat.txt:7: expected a number >= 0 or 'inf', got 'abc'".
std::vector<double> read_khat(std::istream& in, const std::string& source);

// Opens `path` ("-" reads standard input) and reads it. Throws InputError when it cannot.
std::vector<double> read_khat_file(const std::string& path);

}  // namespace kcert::cli
