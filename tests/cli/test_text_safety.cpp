// Text that reaches a terminal or a JUnit file (issue 34): escaped or dropped where the
// destination cannot hold it. The JUnit output is checked by a real XML parser (xmllint).
#include "kcert_catch.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <algorithm>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/report/junit.hpp"
#include "harness/report/tables.hpp"
#include "harness/text/escape.hpp"

using kcert::text::terminal_safe;

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

TEST_CASE("one UTF-8 decoder: lengths and code points of valid text, one byte for each invalid one", "[cli][hostile]") {
  using kcert::text::decode_utf8;
  const auto at = [](std::string_view s, std::size_t i = 0) { return decode_utf8(s, i); };
  CHECK(at("A").valid);
  CHECK(at("A").code_point == 0x41);
  CHECK(at("\xc3\xa9").code_point == 0xE9);
  CHECK(at("\xc3\xa9").length == 2);
  CHECK(at("\xe2\x80\xae").code_point == 0x202E);
  CHECK(at("\xf0\x9f\x98\x80").code_point == 0x1F600);
  CHECK(at("\xf0\x9f\x98\x80").length == 4);
  CHECK(at("\xf4\x8f\xbf\xbf").code_point == 0x10FFFF);
  CHECK(at("x\xc3\xa9", 1).code_point == 0xE9);
  // Invalid, each one byte long: a stray continuation byte, lead bytes of no sequence, a cut
  // sequence, a bad continuation, overlong forms, a surrogate, past U+10FFFF.
  for (std::string_view bad : {"\x80", "\xbf", "\xf8\x80\x80\x80\x80", "\xff", "\xc3", "\xe2\x80", "\xc3\x41",
                               "\xc0\xae", "\xe0\x80\xaf", "\xf0\x80\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    INFO(kcert::text::terminal_safe(bad));
    CHECK_FALSE(at(bad).valid);
    CHECK(at(bad).length == 1);
  }
}

TEST_CASE("HTML, XML and Markdown escaping: each destination's own mechanisms are off", "[cli][hostile]") {
  using namespace kcert::text;
  CHECK(html_escape("<script>a & \"b\"</script> 'c'") == "&lt;script&gt;a &amp; &quot;b&quot;&lt;/script&gt; 'c'");
  CHECK(xml_escape("a'b\"<>&") == "a&apos;b&quot;&lt;&gt;&amp;");
  // C0 controls become a space (tab, LF and CR stay); U+FFFE, U+FFFF and invalid bytes go.
  CHECK(xml_escape("x\x01\x1b\ty\r\n") == "x  \ty\r\n");
  CHECK(xml_escape("a\xef\xbf\xbe" "b\xef\xbf\xbf" "c\xff" "d\xc3\xa9") == "abcd\xc3\xa9");
  CHECK(markdown_cell("a | b\n<img src=x onerror=alert(1)> & c") == "a \\| b &lt;img src=x onerror=alert(1)&gt; &amp; c");
}

TEST_CASE("JUnit: characters XML 1.0 cannot hold are dropped and the file stays well-formed", "[cli][hostile]") {
  nlohmann::json r = {{"id", "c\x01x\xef\xbf\xbf" "y"}, {"family", "rmsnorm"}, {"kind", "negative"}, {"verdict", "ERROR"},
                      {"error", std::string("bad \xff byte, \x1b[31m, <tag> & \"q\" \xed\xa0\x80 surrogate")},
                      {"unexpected", nlohmann::json::array()},
                      {"gates", {{"algebra", {{"verdict", "ERROR"}}}, {"bias", {{"verdict", "ERROR"}}}, {"variance", {{"verdict", "ERROR"}}}}},
                      {"runtime", {{"seconds", 0.5}}}};
  const auto xml = kcert::report::junit_xml(std::vector<nlohmann::json>{r}, "suite \x02 name", "2026-12-03T00:00:00");
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
  CHECK_THAT(kcert::report::junit_xml(std::vector<nlohmann::json>{r}, "s", "2026-12-04T00:00:00"),
             Catch::Contains("verdict PASS (variance PASS short of the horizon: the evidence supports 85.3 replicates)"));
  r["gates"]["variance"]["evidence"]["reaches_horizon"] = true;
  CHECK_FALSE(kcert::report::junit_xml(std::vector<nlohmann::json>{r}, "s", "2026-12-04T00:00:00").find("short of the horizon") != std::string::npos);
}

TEST_CASE("summary.md: a result's texts stay inside their cells", "[cli][hostile]") {
  kcert::eval::ControlOutcome r;
  r.id = "cases/a|b.yaml";
  r.kind = "negative";
  r.family = "rmsnorm";
  r.error = "line one\n| injected | row |\r| another | row |\n<script>alert(1)</script>";
  std::ostringstream md;
  kcert::report::markdown_controls(md, {r});
  const auto text = md.str();
  // Header, rule and one row: the newline and the pipes of the texts did not make rows or cells.
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
  CHECK(text.find('\r') == std::string::npos);  // CommonMark ends a line at a bare CR too
  CHECK_THAT(text, Catch::Contains("| cases/a\\|b.yaml | negative | rmsnorm | ERROR: line one \\| injected \\| row \\| "
                                   "\\| another \\| row \\| &lt;script&gt;alert(1)&lt;/script&gt; |"));
}
