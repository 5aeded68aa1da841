#pragma once
// Reading a file a user named (a spool to upload, a report folder's results.json): links are
// followed, as for any file named on the command line, but only a regular file is read. A FIFO
// blocked `upload` and `report` until someone wrote to it, and a link to /dev/zero read until
// memory ran out (issue 53, item 9).
#include <cstdint>
#include <string>

namespace kcert::store {

// The file's bytes; throws std::runtime_error naming `path` when it is not a regular file
// (a FIFO, a device, a folder), cannot be read, or holds more than `max_bytes`.
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes);

}  // namespace kcert::store
