// The connection string kcert hands libpq: default timeouts, and no password in any message.
// The parse errors come from the real libpq (no server needed); the timeout test talks to a
// real TCP listener that accepts and never answers.
#include "kcert_catch.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "harness/store/conninfo.hpp"
#include "harness/store/postgres.hpp"

using kcert::store::redact_password;
using kcert::store::with_default_timeouts;

TEST_CASE("default timeouts are added where the connection string does not set them", "[store][conninfo]") {
  CHECK(with_default_timeouts("").find("connect_timeout=10") == 0);
  CHECK(with_default_timeouts("postgresql://u@h/db") ==
        "postgresql://u@h/db?connect_timeout=10&keepalives=1&keepalives_idle=30&keepalives_interval=10&keepalives_count=3");
  CHECK(with_default_timeouts("postgresql://u@h/db?sslmode=require").find("?sslmode=require&connect_timeout=10&") !=
        std::string::npos);
  CHECK(with_default_timeouts("host=h dbname=d").find("host=h dbname=d connect_timeout=10 keepalives=1") == 0);
  // The user's own settings win.
  CHECK(with_default_timeouts("host=h connect_timeout=3 keepalives=0") == "host=h connect_timeout=3 keepalives=0");
}

TEST_CASE("libpq's parse errors never carry the password out", "[store][conninfo]") {
  // The four forms that echoed it (issue 13), and two more.
  const std::vector<std::pair<std::string, std::string>> forms = {
      {"postgresql://kcert:Tr0ub4dor@[::1:55432/kcert", "Tr0ub4dor"},
      {"postgresql://kcert:Tr0ub4dor@[]:55432/kcert", "Tr0ub4dor"},
      {"postgresql://kcert:Tr0u%ZZb4dor@localhost:1/kcert", "Tr0u%ZZb4dor"},
      {"host=localhost password=Tr0ub4dor horse dbname=x", "horse"},
      {"host=localhost password='Tr0ub4dor dbname=x", "Tr0ub4dor"},
      {"postgresql://kcert:Tr0ub4dor@localhost:1/kcert?sslmode=bogus", "Tr0ub4dor"},
  };
  for (const auto& [conninfo, secret] : forms) {
    INFO(conninfo);
    std::string message;
    try {
      kcert::store::ResultStore db(conninfo);
    } catch (const std::exception& e) {
      message = e.what();
    }
    REQUIRE_FALSE(message.empty());
    CHECK(message.find(secret) == std::string::npos);
    CHECK(message.find("Tr0ub4dor") == std::string::npos);
    CHECK(message.find("cannot connect to the results database") != std::string::npos);
    // ... and says how to fix it.
    CHECK(message.find("To fix: set KCERT_DB") != std::string::npos);
    CHECK(message.find("scripts/pg-cluster.sh start DIR") != std::string::npos);
  }
  // What is not the password stays, so the message still says what is wrong.
  const auto m = redact_password("invalid sslmode value: \"bogus\"", "postgresql://k:Tr0ub4dor@h/d?sslmode=bogus");
  CHECK(m == "invalid sslmode value: \"bogus\"");
  CHECK(redact_password("missing \"=\" after \"horse\" in connection info string",
                        "host=h password=Tr0ub4dor horse dbname=x") ==
        "missing \"=\" after \"[password hidden]\" in connection info string");
}

TEST_CASE("a port is not taken for a password where the URI has no user", "[store][conninfo]") {
  CHECK(redact_password("connection to server at \"localhost\", port 5432 failed", "postgresql://localhost:5432/kcert") ==
        "connection to server at \"localhost\", port 5432 failed");
  CHECK(redact_password("invalid port number: \"Tr0ub4dor\"", "postgresql://kcert:Tr0ub4dor") ==
        "invalid port number: \"[password hidden]\"");
}

TEST_CASE("no malformed connection string prints its password, whatever libpq makes of it", "[store][conninfo][hostile]") {
  // Table-driven over the real libpq (no server: port 1 refuses at once). The password is
  // "Tr0ub4dor" or contains it; each form was written to break one reading of the string.
  const std::vector<std::string> forms = {
      // Issue 34's six: a '?' inside the password, upper-case schemes, a leading space, a bad
      // escape in ?password=.
      "postgresql://kcert:Tr0u?b4dor@localhost:1/kcert",
      "postgresql://kcert:Tr0ub4dor?x@[::1:1/kcert",
      "POSTGRESQL://kcert:Tr0ub4dor@localhost:1/kcert",
      "Postgres://kcert:Tr0ub4dor@localhost:1/kcert",
      " postgresql://kcert:Tr0ub4dor@localhost:1/kcert",
      "postgresql://kcert@localhost:1/kcert?password=Tr0u%ZZb4dor",
      // Issue 53's: no host (no '@': libpq reads "kcert:PW" as host and port), one slash or
      // none after the scheme (not a URI to libpq: echoed whole as a key=value string), and a
      // percent-encoded `password` key (the value's bad escape echoed raw).
      "postgresql://kcert:Tr0ub4dor",
      "postgresql://kcert:Tr0ub4dor/kcert",
      "postgresql://kcert:Tr0ub4dor?sslmode=bogus",
      "postgresql:/kcert:Tr0ub4dor@localhost:1/kcert",
      "postgresql:kcert:Tr0ub4dor@localhost:1/kcert",
      "postgres:/kcert:Tr0ub4dor@localhost:1/kcert",
      "postgresql://kcert@localhost:1/kcert?%70assword=Tr0u%ZZb4dor",
      "postgresql://kcert@localhost:1/kcert?pass%77ord=Tr0ub4dor&sslmode=bogus",
      "postgresql://kcert@localhost:1/kcert?sslmode=bogus&%70%61ssword=Tr0ub4dor",
      // The earlier ones, and neighbours of each.
      "postgresql://kcert:Tr0ub4dor@[::1:55432/kcert",
      "postgresql://kcert:Tr0ub4dor@[]:55432/kcert",
      "postgresql://kcert:Tr0u%ZZb4dor@localhost:1/kcert",
      "postgresql://kcert:Tr0ub4dor@localhost:1/kcert?sslmode=bogus",
      "postgresql://kcert@localhost:1/kcert?sslmode=bogus&password=Tr0ub4dor",
      "postgresql://kcert@localhost:1/kcert?password=Tr0ub4dor&sslmode=bogus",
      "postgresql://kcert@localhost:1/kcert?password=Tr0ub4dor&bogus=1",
      "postgresql://kcert:Tr0u@b4dor@localhost:1/kcert",
      "postgresql://kcert:Tr0u/b4dor@localhost:1/kcert",
      "postgresql://kcert:Tr0ub4dor%@localhost:1/kcert",
      "postgres://kcert:Tr0ub4dor@localhost:1/kcert?connect_timeout=x",
      "\tpostgresql://kcert:Tr0ub4dor@localhost:1/kcert",
      "host=localhost password=Tr0ub4dor horse dbname=x",
      "host=localhost password='Tr0ub4dor dbname=x",
      "host=localhost password = Tr0ub4dor port=1 sslmode=bogus",
      "host=localhost password=Tr0ub4dor port=1 bogus=1",
      "host=localhost port=1 password=Tr0ub4dor'",
      "host=localhost port=1 password='Tr0ub4dor' sslmode=bogus",
  };
  for (const auto& conninfo : forms) {
    INFO(conninfo);
    std::string message;
    try {
      kcert::store::ResultStore db(conninfo);
    } catch (const std::exception& e) {
      message = e.what();
    }
    REQUIRE_FALSE(message.empty());
    CHECK(message.find("Tr0ub4dor") == std::string::npos);
    CHECK(message.find("b4dor") == std::string::npos);
    CHECK(message.find("cannot connect to the results database") != std::string::npos);
  }
}

TEST_CASE("the default timeouts go into a URI's parameters, never into its password", "[store][conninfo][hostile]") {
  // A '?' in the password: the defaults were appended after it ("&connect_timeout=10" became
  // part of the dbname) and the connect timeout was lost.
  CHECK(with_default_timeouts("postgresql://kcert:Tr0u?b4dor@h/db") ==
        "postgresql://kcert:Tr0u?b4dor@h/db?connect_timeout=10&keepalives=1&keepalives_idle=30&keepalives_interval=10&keepalives_count=3");
  CHECK(with_default_timeouts("postgresql://kcert:Tr0u?b4dor@h/db?sslmode=disable").find("?sslmode=disable&connect_timeout=10&") !=
        std::string::npos);
  CHECK(with_default_timeouts("postgresql://h/db?user=a").find("/db?user=a&connect_timeout=10") != std::string::npos);
}

TEST_CASE("a server that accepts and never answers is an error within the connect timeout", "[store][conninfo]") {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const auto port = ntohs(addr.sin_port);
  const auto t0 = std::chrono::steady_clock::now();
  // The kernel completes the TCP handshake from the backlog; nothing ever reads or answers.
  CHECK_THROWS_AS(kcert::store::ResultStore("postgresql://kcert@127.0.0.1:" + std::to_string(port) + "/kcert"),
                  kcert::store::DatabaseError);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(waited >= kcert::store::kDefaultConnectTimeoutSeconds - 1);
  CHECK(waited < kcert::store::kDefaultConnectTimeoutSeconds + 10);
  // The same with a '?' in the password: the timeout used to land in the password part.
  const auto t1 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(kcert::store::ResultStore("postgresql://kcert:pw?x@127.0.0.1:" + std::to_string(port) + "/kcert"),
                  kcert::store::DatabaseError);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() <
        kcert::store::kDefaultConnectTimeoutSeconds + 10);
  ::close(listener);
}

#include "harness/store/statement_deadline.hpp"

// The statement deadline, on a real socket pair: an overrun round trip is cut off (the
// blocked recv returns), one that finishes in time is left alone.
TEST_CASE("the statement watchdog shuts a stalled socket down, and only a stalled one", "[store][deadline]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  kcert::store::StatementWatchdog watchdog;

  // In time: disarmed before the deadline, the socket still carries data.
  watchdog.arm(fds[0], 5.0);
  CHECK_FALSE(watchdog.disarm());
  REQUIRE(::send(fds[1], "x", 1, 0) == 1);
  char c = 0;
  CHECK(::recv(fds[0], &c, 1, 0) == 1);

  // Stalled: the peer never answers; the blocked recv returns once the deadline passes.
  const auto t0 = std::chrono::steady_clock::now();
  watchdog.arm(fds[0], 0.3);
  const auto got = ::recv(fds[0], &c, 1, 0);  // blocks until the watchdog acts
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(got == 0);
  CHECK(waited >= 0.25);
  CHECK(waited < 5.0);
  CHECK(watchdog.disarm());
  CHECK_FALSE(watchdog.disarm());  // reported once
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("KCERT_DB_STATEMENT_TIMEOUT is read and checked", "[store][deadline]") {
  ::unsetenv("KCERT_DB_STATEMENT_TIMEOUT");
  CHECK(kcert::store::statement_timeout_seconds() == 60.0);
  ::setenv("KCERT_DB_STATEMENT_TIMEOUT", "2.5", 1);
  CHECK(kcert::store::statement_timeout_seconds() == 2.5);
  ::setenv("KCERT_DB_STATEMENT_TIMEOUT", "0", 1);
  CHECK(kcert::store::statement_timeout_seconds() == 0.0);
  for (const char* bad : {"-1", "ten", "5s", "nan"}) {
    ::setenv("KCERT_DB_STATEMENT_TIMEOUT", bad, 1);
    CHECK_THROWS_WITH(kcert::store::statement_timeout_seconds(),
                      Catch::Contains("KCERT_DB_STATEMENT_TIMEOUT") && Catch::Contains(bad));
  }
  ::unsetenv("KCERT_DB_STATEMENT_TIMEOUT");
}
