#include "harness/runner/python_route.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "harness/io/process.hpp"
#include "harness/runner/isolated.hpp"
#include "harness/runner/errors.hpp"

namespace kcert::runner {

namespace {

namespace fs = std::filesystem;

// Importing torch and transformers takes seconds; a file that hangs at import is refused.
constexpr double kDescribeSeconds = 300.0;
constexpr std::size_t kMaxDescription = std::size_t{16} << 20;
constexpr std::size_t kMaxStderrShown = 4000;

struct Captured {
  int status = -1;  // the exit status, or -1 when it did not exit (signal, deadline)
  std::string out, err, ended;
};

// Runs argv with stdin from /dev/null, both outputs read (bounded) until EOF or the deadline;
// the process group is killed when it is done or at the deadline (io/process.hpp).
Captured run_captured(const std::vector<std::string>& command, double seconds) {
  io::ProcessSpec spec;
  spec.argv = command;
  spec.seconds = seconds;
  spec.max_read = kMaxDescription;
  io::ProcessOutcome o;
  try {
    o = io::run_process(spec);
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());
  }
  if (o.start_error != 0) throw InputError("cannot start " + command.front() + ": " + std::strerror(o.start_error));
  Captured c;
  c.out = std::move(o.out);
  c.err = std::move(o.err);
  c.status = o.exit_status;
  if (o.timed_out) c.ended = "did not finish within " + std::to_string(static_cast<int>(seconds)) + " s";
  else if (o.signal != 0) c.ended = std::string("was killed by signal ") + std::to_string(o.signal);
  return c;
}

std::string tail(const std::string& text) {
  auto t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t.size() <= kMaxStderrShown ? t : "..." + t.substr(t.size() - kMaxStderrShown);
}

// A variant parameter declared from its Python default (python/kcert/__init__.py: bool, int,
// float, str, a list of numbers; None: a required number).
kernels::ParamSpec param_of(const std::string& name, const nlohmann::json& d) {
  namespace param = kernels::param;
  if (d.is_null()) return param::number(name);
  if (d.is_boolean()) return param::flag(name, d.get<bool>());
  if (d.is_number_integer()) return param::integer(name, d.get<std::int64_t>());
  if (d.is_number()) return param::number(name, d.get<double>());
  if (d.is_string()) return param::text(name, d.get<std::string>());
  if (d.is_array()) return param::number_list(name, d.get<std::vector<double>>());
  throw InputError("parameter '" + name + "': an unsupported default (" + std::string(d.type_name()) + ")");
}

std::string canonical(const std::string& path) {
  std::error_code ec;
  const auto c = fs::weakly_canonical(path, ec);
  return ec ? fs::path(path).lexically_normal().string() : c.string();
}

// The interpreter of a route's command, for messages ({/usr/bin/env, PYTHONPATH=..., python, ...}).
std::string interpreter(const PythonRoute& route) {
  for (const auto& a : route.command) {
    if (a != "/usr/bin/env" && a.find('=') == std::string::npos) return a;
  }
  return route.command.empty() ? std::string("no Python") : route.command.front();
}

bool is_stand_in(const std::string& origin, const kernels::Registry& registry) {
  return origin.rfind("python:", 0) == 0 && registry.has_python_stand_ins(origin.substr(7));
}

// The variant names a case uses, with the field that names them (sweep settings included).
void variant_names(const contract::TestCase& tc, std::vector<std::pair<std::string, std::string>>& out) {
  out.emplace_back("reference.variant", tc.reference.variant);
  out.emplace_back("production.variant", tc.production.variant);
  for (const auto& s : tc.sweep) {
    if (s.testcase) variant_names(*s.testcase, out);
  }
}

std::vector<std::pair<std::string, std::string>> missing_variants(const contract::TestCase& tc, const kernels::Registry& registry) {
  std::vector<std::pair<std::string, std::string>> names, missing;
  variant_names(tc, names);
  const auto* family = registry.find_family(tc.family);
  for (const auto& n : names) {
    if (!family || !family->variants.count(n.second)) missing.push_back(n);
  }
  return missing;
}

}  // namespace

namespace {
// `name` as posix_spawn needs it: a path, searched on PATH when it has no slash.
std::string on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    const auto colon = std::min(dirs.find(':', start), dirs.size());
    const auto candidate = fs::path(dirs.substr(start, colon - start)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = colon + 1;
  }
  return name;
}

// {env, PYTHONSAFEPATH=1, [PYTHONPATH=dir:$PYTHONPATH], python, -m, kcert}: the worker must not
// import from the folder kcert was started in (python -m puts it first on sys.path; a
// torch.py planted in a shared folder would run), and finds the build tree's package first.
std::vector<std::string> python_command(const std::string& python, const std::string& package_dir) {
  std::vector<std::string> c = {"/usr/bin/env", "PYTHONSAFEPATH=1"};
  if (!package_dir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    c.push_back("PYTHONPATH=" + package_dir + (old && *old ? ":" + std::string(old) : std::string()));
  }
  for (const auto& a : {on_path(python), std::string("-m"), std::string("kcert")}) c.push_back(a);
  return c;
}
}  // namespace

PythonRoute find_python_route() {
  PythonRoute route;
  if (const char* py = std::getenv("KCERT_WORKER_PYTHON"); py && *py) {
    route.command = python_command(py, "");
    return route;
  }
  std::error_code ec;
  const auto exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  const auto first_line = [](const fs::path& p) {
    std::ifstream in(p);
    std::string line;
    std::getline(in, line);
    return line;
  };
  // The build tree: the package beside the binary, and the interpreter it was built for.
  if (!ec && fs::exists(exe_dir / "python" / "kcert" / "__init__.py") && fs::exists(exe_dir / "python" / "interpreter")) {
    const auto py = first_line(exe_dir / "python" / "interpreter");
    if (!py.empty()) {
      route.command = python_command(py, (exe_dir / "python").string());
      return route;
    }
  }
  if (!ec) {
    const auto installed = exe_dir / ".." / "share" / "kcert" / "python-interpreter";
    if (fs::exists(installed)) {
      const auto py = first_line(installed);
      if (!py.empty()) {
        route.command = python_command(py, "");
        return route;
      }
    }
  }
  route.missing =
      "this kcert was built without its Python module (a Python whose torch is this LibTorch; `cmake` says why) "
      "and KCERT_WORKER_PYTHON is not set";
  return route;
}

bool python_file_known(const std::string& canonical_path, const kernels::Registry& registry) {
  if (registry.has_python_stand_ins(canonical_path)) return true;
  const auto origin = "python:" + canonical_path;
  for (const auto& [family, name] : registry.variant_keys()) {
    if (registry.variant(family, name).schema.origin == origin) return true;
  }
  return false;
}

void describe_python_file(const std::string& path, const PythonRoute& route, kernels::Registry& registry,
                          const std::function<void(const std::string&)>& note) {
  const auto file = canonical(path);
  if (python_file_known(file, registry)) return;
  if (route.command.empty()) throw InputError("--python " + path + ": " + route.missing);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw InputError("--python " + path + ": no such file");
  auto command = route.command;
  for (const char* a : {"--python", file.c_str(), "describe-python"}) command.emplace_back(a);
  const auto c = run_captured(command, kDescribeSeconds);
  if (c.status != 0) {
    throw InputError("--python " + path + ": " + interpreter(route) + " could not import it (" +
                     (c.ended.empty() ? "exit status " + std::to_string(c.status) : c.ended) + ")" +
                     (c.err.empty() ? std::string() : ":\n" + tail(c.err)));
  }
  // Every variant is checked before any is registered: a file refused half-way must not
  // leave stand-ins that look described.
  std::vector<std::pair<std::string, kernels::Variant>> stand_ins;
  std::vector<kernels::Family> stand_in_families;
  try {
    const auto d = nlohmann::json::parse(c.out);
    // Families the file defines (kcert.family; absent from older descriptions): their schema
    // here, for the cases to load and validate; inputs and buckets only in the worker.
    std::set<std::string> family_names;
    for (const auto& fd : d.value("families", nlohmann::json::array())) {
      kernels::Family f;
      f.name = fd.at("name").get<std::string>();
      f.description = fd.at("description").get<std::string>();
      f.bucket_axes = fd.at("bucket_axes").get<std::vector<std::string>>();
      for (const auto& [k, def] : fd.at("probe_params").items()) f.probe_params.push_back(param_of(k, def));
      if (registry.find_family(f.name) || !family_names.insert(f.name).second) {
        throw InputError("--python " + path + ": family '" + f.name + "' is already registered");
      }
      const std::string what = "the Python family " + f.name + " runs only in a `python -m kcert` worker (runner/python_route.hpp)";
      f.make_fixed = [what](const kernels::ProbeContract&, std::uint64_t) -> kernels::KernelInputs { throw std::logic_error(what); };
      f.make_replicate = [what](const kernels::ProbeContract&, const kernels::KernelInputs&, std::uint64_t) -> kernels::KernelInputs {
        throw std::logic_error(what);
      };
      f.bucket_ids = [what](const std::string&, const kernels::ProbeContract&, at::IntArrayRef) -> torch::Tensor {
        throw std::logic_error(what);
      };
      for (const auto& gd : fd.value("gradients", nlohmann::json::array())) {
        kernels::Family::Gradient g;
        g.schema = {gd.at("name").get<std::string>(), gd.at("input").get<std::string>(),
                    gd.at("bucket_axes").get<std::vector<std::string>>(), gd.at("reduces").get<std::string>(),
                    gd.at("description").get<std::string>()};
        g.bucket_ids = f.bucket_ids;
        g.reduction_size = [reduction = gd.at("reduction").get<std::string>()](const kernels::ProbeContract& probe) -> std::int64_t {
          return reduction.empty() ? 0 : probe.params.integer(reduction);
        };
        f.gradients.push_back(std::move(g));
      }
      stand_in_families.push_back(std::move(f));
    }
    std::set<std::pair<std::string, std::string>> names;
    for (const auto& v : d.at("variants")) {
      const auto family = v.at("family").get<std::string>();
      const auto name = v.at("name").get<std::string>();
      const auto* f = registry.find_family(family);
      if (!f && family_names.count(family)) {
        if (!names.insert({family, name}).second) {
          throw InputError("--python " + path + ": variant " + name + " of family '" + family + "' is already registered");
        }
      } else if (!f) {
        std::string list;
        for (const auto& n : registry.family_names()) list += (list.empty() ? "" : ", ") + n;
        throw InputError("--python " + path + ": variant " + name + " names family '" + family +
                         "', which is not registered (registered: " + list + ")");
      } else if (f->variants.count(name) || !names.insert({family, name}).second) {
        throw InputError("--python " + path + ": variant " + name + " of family '" + family + "' is already registered");
      }
      kernels::VariantSchema schema{name, v.at("version").get<std::string>(), v.at("description").get<std::string>(), {}};
      for (const auto& [k, def] : v.at("params").items()) schema.params.push_back(param_of(k, def));
      // kcert.variant(exact=False): an opaque kernel (absent from older descriptions: exact).
      schema.exact = v.contains("exact") ? v.at("exact").get<bool>() : true;
      const std::string what = family + "/" + name;
      stand_ins.emplace_back(
          family, kernels::Variant{std::move(schema),
                                   [what](const kernels::KernelInputs&, const numerics::Precision&,
                                          const kernels::ParamMap&) -> torch::Tensor {
                                     throw std::logic_error("the Python variant " + what +
                                                            " runs only in a `python -m kcert` worker (runner/python_route.hpp)");
                                   },
                                   {},
                                   v.at("unavailable").get<std::string>()});
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError("--python " + path + ": the description from " + interpreter(route) + " is not what kcert reads (" +
                     e.what() + ")");
  }
  // The binary's environment identity stays its own (calibrations and comparisons are keyed by
  // it, and a run of C++ controls beside Python ones is the same environment): a Python
  // variant's version records its file's sha256, and what it imports is its file's business.
  const auto family_count = stand_in_families.size();
  for (auto& f : stand_in_families) registry.add_family(std::move(f));
  for (auto& [family, variant] : stand_ins) {
    const auto name = variant.schema.name, version = variant.schema.version;
    registry.add_variant(family, std::move(variant));
    registry.stamp_origin(family, name, version, "python:" + file);
  }
  registry.note_python_stand_ins(file);
  if (note) {
    note("Python kernels " + file + " described by " + interpreter(route) + " (" + std::to_string(stand_ins.size()) +
         " variant(s)" + (family_count ? ", " + std::to_string(family_count) + " family(ies)" : std::string()) + ")");
  }
}

std::vector<std::string> python_files_of(const contract::TestCase& tc) {
  std::vector<std::string> out;
  for (const auto& p : tc.python) out.push_back(canonical(p));  // the loader resolved them
  return out;
}

std::vector<std::string> python_worker_for(const contract::TestCase& tc, const kernels::Registry& registry,
                                           const PythonRoute& route) {
  if (route.command.empty() || !any_kernel_from(tc, registry, [&](const std::string& o) { return is_stand_in(o, registry); })) {
    return {};
  }
  auto command = route.command;
  // Every file, as the parent knows them: the worker validates the case as it was loaded here.
  for (const auto& f : route.imported) {
    command.emplace_back("--python");
    command.push_back(f);
  }
  for (const auto& f : registry.python_stand_in_files()) {
    command.emplace_back("--python");
    command.push_back(f);
  }
  return command;
}

std::string python_skip_reason(const contract::TestCase& tc, const kernels::Registry& registry, const PythonRoute& route) {
  if (tc.python.empty() || missing_variants(tc, registry).empty()) return {};
  std::string files;
  for (const auto& f : python_files_of(tc)) {
    if (!python_file_known(f, registry)) files += (files.empty() ? "" : ", ") + f;
  }
  if (route.command.empty()) return "its kernels are Python (" + files + ") and " + route.missing;
  return "its kernels are Python (" + files + "), and a case file does not run code on its own: name the file with "
         "--python FILE, or pass --allow-case-plugins (docs/python.md)";
}

std::string python_unknown_variant(const contract::TestCase& tc, const kernels::Registry& registry) {
  if (tc.python.empty()) return {};
  for (const auto& f : python_files_of(tc)) {
    if (!python_file_known(f, registry)) return {};  // not described here: the case is skipped, not refused
  }
  const auto missing = missing_variants(tc, registry);
  if (missing.empty()) return {};
  std::string list;
  for (const auto& [family, name] : registry.variant_keys()) {
    if (family == tc.family) list += (list.empty() ? "" : ", ") + name;
  }
  return missing.front().first + ": family '" + tc.family + "' has no variant '" + missing.front().second +
         "', in kcert or in the case's python: files (available: " + list + ")";
}

}  // namespace kcert::runner
