#pragma once
// "Did you mean" for the command line: CLI11 reports a mistyped subcommand as "A subcommand is
// required" and a mistyped option as "argument was not expected"; this names the word and the
// closest real subcommands or options where it stands.
#include <CLI/CLI.hpp>

#include <string>

namespace kcert::cli {

// The first word of argv that names no subcommand or option where it stands, as a message
// with the closest candidates ("unknown command 'nightlyy'; did you mean nightly?"); "" when
// every word is known (the parse error is about something else: a value, a missing argument).
std::string unknown_word_hint(const CLI::App& app, int argc, char** argv);

}  // namespace kcert::cli
