#include "harness/store/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace kcert::store {

namespace {
std::string size_words(std::uint64_t bytes) {
  return bytes >= (std::uint64_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}
}  // namespace

std::string read_regular_file(const std::string& path, std::uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can refuse it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + ": not a regular file (a FIFO, device or folder), not read");
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    throw std::runtime_error(path + ": " + std::to_string(st.st_size) + " bytes, more than the " + size_words(max_bytes) +
                             " kcert reads from such a file; not read");
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > max_bytes)  // a file that grows while read is held to the same bound
      throw std::runtime_error(path + ": more than the " + size_words(max_bytes) + " kcert reads from such a file; not read");
  }
  return text;
}

}  // namespace kcert::store
