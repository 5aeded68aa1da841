#include "harness/store/statement_deadline.hpp"

#include <sys/socket.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace kcert::store {

double statement_timeout_seconds() {
  const char* v = std::getenv("KCERT_DB_STATEMENT_TIMEOUT");
  if (!v || !*v) return 60.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(s) || s < 0)
    throw std::invalid_argument("KCERT_DB_STATEMENT_TIMEOUT must be a number of seconds >= 0 (0: no deadline), not '" +
                                std::string(v) + "'");
  return s;
}

StatementWatchdog::~StatementWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StatementWatchdog::arm(int socket_fd, double seconds) {
  if (!(seconds > 0) || socket_fd < 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fd_ = socket_fd;
    fired_ = false;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
    // Started on first use: a store that never talks to the server costs no thread.
    if (!thread_.joinable()) thread_ = std::thread([this] { watch(); });
  }
  changed_.notify_all();
}

bool StatementWatchdog::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  deadline_.reset();
  const bool fired = fired_;
  fired_ = false;
  return fired;
}

void StatementWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!deadline_) {
      changed_.wait(lock);
      continue;
    }
    const auto until = *deadline_;
    changed_.wait_until(lock, until);
    if (deadline_ && *deadline_ == until && std::chrono::steady_clock::now() >= until) {
      // shutdown(), not close(): the descriptor stays libpq's to close, and the blocked
      // recv()/send() returns at once with an error libpq reports as a lost connection.
      ::shutdown(fd_, SHUT_RDWR);
      fired_ = true;
      deadline_.reset();
    }
  }
}

}  // namespace kcert::store
