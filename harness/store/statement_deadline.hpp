#pragma once
// A client-side deadline for database round trips. libpq blocks in recv() for as long as the
// server keeps the TCP connection open, and a frozen server (SIGSTOP, a stuck disk, a
// paused VM) keeps it open: the kernel still acknowledges packets, so neither TCP
// keepalives nor a server-side statement_timeout ever fire. The nightly then stalls until
// the server resumes (issue 13). A watchdog thread that shuts the socket down when a round
// trip overruns turns the stall into a broken connection, which the nightly already treats
// like a dead database: it carries on with the spool.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

namespace kcert::store {

// Seconds one database call (one transaction) may take: KCERT_DB_STATEMENT_TIMEOUT when set
// (0 turns the deadline off), else 60. Throws std::invalid_argument naming the variable when
// it is not a non-negative number.
double statement_timeout_seconds();

class StatementWatchdog {
 public:
  StatementWatchdog() = default;
  StatementWatchdog(const StatementWatchdog&) = delete;
  StatementWatchdog& operator=(const StatementWatchdog&) = delete;
  ~StatementWatchdog();

  // Shuts `socket_fd` down (both directions) unless disarm() comes within `seconds`.
  // seconds <= 0: no deadline.
  void arm(int socket_fd, double seconds);
  // Returns whether the deadline fired since arm().
  bool disarm();

 private:
  void watch();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread thread_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  int fd_ = -1;
  bool fired_ = false;
  bool stopping_ = false;
};

}  // namespace kcert::store
