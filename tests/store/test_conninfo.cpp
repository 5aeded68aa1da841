// The connection string kcert hands libpq: default timeouts, and no password in any message.
// The parse errors come from the real libpq (no server needed); the timeout test talks to a
// real TCP listener that accepts and never answers.
#include <catch2/catch.hpp>

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
  }
  // What is not the password stays, so the message still says what is wrong.
  const auto m = redact_password("invalid sslmode value: \"bogus\"", "postgresql://k:Tr0ub4dor@h/d?sslmode=bogus");
  CHECK(m == "invalid sslmode value: \"bogus\"");
  CHECK(redact_password("missing \"=\" after \"horse\" in connection info string",
                        "host=h password=Tr0ub4dor horse dbname=x") ==
        "missing \"=\" after \"[password hidden]\" in connection info string");
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
  ::close(listener);
}
