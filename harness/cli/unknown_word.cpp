#include "harness/cli/unknown_word.hpp"

#include <vector>

#include "harness/cli/suggest.hpp"
#include "harness/text/escape.hpp"

namespace kcert::cli {

namespace {

// The visible subcommands of a command (the hidden `worker` is not offered).
std::vector<const CLI::App*> subcommands_of(const CLI::App& at) {
  return at.get_subcommands([](const CLI::App* a) { return !a->get_group().empty(); });
}

const CLI::App* subcommand_named(const CLI::App& at, const std::string& name) {
  for (const auto* sub : subcommands_of(at))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

// A long option of the command or of a command above it (kcert's options fall through).
const CLI::Option* long_option(const std::vector<const CLI::App*>& chain, const std::string& name) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (const auto* opt : (*it)->get_options()) {
      for (const auto& l : opt->get_lnames())
        if (l == name) return opt;
    }
  }
  return nullptr;
}

std::string path_of(const std::vector<const CLI::App*>& chain) {
  std::string p;
  for (const auto* a : chain) p += (p.empty() ? "" : " ") + a->get_name();
  return p;
}

std::string offer(const std::vector<std::string>& near, const std::string& prefix) {
  std::string s;
  for (std::size_t i = 0; i < near.size(); ++i) s += (i ? ", " : "") + prefix + near[i];
  return s;
}

}  // namespace

std::string unknown_word_hint(const CLI::App& app, int argc, char** argv) {
  std::vector<const CLI::App*> chain{&app};
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    const CLI::App& at = *chain.back();
    if (word.rfind("--", 0) == 0 && word.size() > 2) {
      const std::string name = word.substr(2, word.find('=') == std::string::npos ? std::string::npos : word.find('=') - 2);
      const auto* opt = long_option(chain, name);
      if (!opt) {
        std::vector<std::string> names;
        for (const auto* a : chain)
          for (const auto* o : a->get_options())
            for (const auto& l : o->get_lnames()) names.push_back(l);
        const auto near = closest(name, names);
        return "unknown option '--" + text::terminal_safe(name) + "' for '" + path_of(chain) + "'" +
               (near.empty() ? "; see '" + path_of(chain) + " --help'" : "; did you mean " + offer(near, "--") + "?");
      }
      // Its value is the next word unless given with '=' (flags take none).
      if (word.find('=') == std::string::npos && opt->get_items_expected_min() > 0) ++i;
      continue;
    }
    if (word[0] == '-') continue;  // a short option or a negative number: CLI11's to judge
    if (const auto* sub = subcommand_named(at, word)) {
      chain.push_back(sub);
      continue;
    }
    // A word where a subcommand must stand (the command has subcommands and takes no
    // positional argument of its own) names an unknown one.
    const bool takes_positionals = !at.get_options([](const CLI::Option* o) { return !o->nonpositional(); }).empty();
    if (!subcommands_of(at).empty() && !takes_positionals) {
      std::vector<std::string> names;
      for (const auto* sub : subcommands_of(at)) names.push_back(sub->get_name());
      const auto near = closest(word, names);
      return "unknown command '" + text::terminal_safe(word) + "' for '" + path_of(chain) + "'" +
             (near.empty() ? "; the commands are " + offer(names, "") : "; did you mean " + offer(near, "") + "?");
    }
  }
  return "";
}

}  // namespace kcert::cli
