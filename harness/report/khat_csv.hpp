#pragma once
// Reads a stored K̂ sample: one value per line, `inf` allowed, blank lines and `#` comments
// ignored. Errors name the source and the line.
#include <istream>

#include "harness/runner/errors.hpp"
#include <stdexcept>
#include <string>
#include <vector>

namespace kcert::report {

// `source` names the stream in error messages ("khat.txt", "<stdin>").
// Throws InputError: "khat.txt:7: expected a number >= 0 or 'inf', got 'abc'".
std::vector<double> read_khat(std::istream& in, const std::string& source);

// Opens `path` ("-" reads standard input) and reads it. Throws InputError when it cannot.
// FollowLinks::no (a file found in a folder, not named by the user): a link, a FIFO or any
// other non-regular file is refused without being opened for reading.
enum class FollowLinks { yes, no };
std::vector<double> read_khat_file(const std::string& path, FollowLinks follow = FollowLinks::yes);

}  // namespace kcert::report
