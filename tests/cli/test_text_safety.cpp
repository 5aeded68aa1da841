// Text that reaches a terminal or a JUnit file (issue 34): escaped or dropped where the
// destination cannot hold it. The JUnit output is checked by a real XML parser (xmllint).
#include "kcert_catch.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/cli/junit.hpp"
#include "harness/cli/terminal_text.hpp"

using kcert::cli::terminal_safe;

TEST_CASE("terminal text: control characters, bidi controls and invalid bytes are shown escaped", "[cli][hostile]") {
  CHECK(terminal_safe("plain text, caf\xc3\xa9\n\tnext") == "plain text, caf\xc3\xa9\n\tnext");
  // ESC ] 0 ; ... BEL retitles the window; ESC [ 2 J clears the screen.
  CHECK(terminal_safe("\x1b]0;pwned\x07id") == "\\x1B]0;pwned\\x07id");
  CHECK(terminal_safe("\x1b[2Jx\x7f") == "\\x1B[2Jx\\x7F");
  // U+202E RIGHT-TO-LEFT OVERRIDE, U+2066 LEFT-TO-RIGHT ISOLATE, a C1 CSI (U+009B).
  CHECK(terminal_safe("a\xe2\x80\xae" "txt.exe") == "a\\u{202E}txt.exe");
  CHECK(terminal_safe("\xe2\x81\xa6x\xc2\x9b") == "\\u{2066}x\\u{009B}");
  CHECK(terminal_safe("bad \xff\xc0\xae end") == "bad \\xFF\\xC0\\xAE end");
}

TEST_CASE("JUnit: characters XML 1.0 cannot hold are dropped and the file stays well-formed", "[cli][hostile]") {
  nlohmann::json r = {{"id", "c\x01x\xef\xbf\xbf" "y"}, {"family", "rmsnorm"}, {"kind", "negative"}, {"verdict", "ERROR"},
                      {"error", std::string("bad \xff byte, \x1b[31m, <tag> & \"q\" \xed\xa0\x80 surrogate")},
                      {"unexpected", nlohmann::json::array()},
                      {"gates", {{"algebra", {{"verdict", "ERROR"}}}, {"bias", {{"verdict", "ERROR"}}}, {"variance", {{"verdict", "ERROR"}}}}},
                      {"runtime", {{"seconds", 0.5}}}};
  const auto xml = kcert::cli::junit_xml({r}, "suite \x02 name", "2026-12-03T00:00:00");
  CHECK(xml.find('\x01') == std::string::npos);
  CHECK(xml.find('\x1b') == std::string::npos);
  CHECK(xml.find("\xef\xbf\xbf") == std::string::npos);
  CHECK(xml.find('\xff') == std::string::npos);
  CHECK(xml.find("&lt;tag&gt; &amp; &quot;q&quot;") != std::string::npos);
  const std::string path = "/tmp/kcert-test-junit-hostile-" + std::to_string(::getpid()) + ".xml";
  std::ofstream(path) << xml;
  CHECK(std::system(("xmllint --noout " + path).c_str()) == 0);
  std::remove(path.c_str());
}

TEST_CASE("JUnit: a variance PASS short of the horizon says so beside the verdict", "[cli]") {
  nlohmann::json r = {{"id", "p"}, {"family", "rmsnorm"}, {"kind", "positive"}, {"verdict", "PASS"},
                      {"unexpected", nlohmann::json::array()},
                      {"gates", {{"algebra", {{"verdict", "PASS"}}}, {"bias", {{"verdict", "PASS"}}},
                                 {"variance", {{"verdict", "PASS"}, {"evidence", {{"horizon", 85.3}, {"reaches_horizon", false}}}}}}},
                      {"runtime", {{"seconds", 0.5}}}};
  CHECK_THAT(kcert::cli::junit_xml({r}, "s", "2026-12-04T00:00:00"),
             Catch::Contains("verdict PASS (variance PASS short of the horizon: the evidence supports 85.3 replicates)"));
  r["gates"]["variance"]["evidence"]["reaches_horizon"] = true;
  CHECK_FALSE(kcert::cli::junit_xml({r}, "s", "2026-12-04T00:00:00").find("short of the horizon") != std::string::npos);
}
