#include "harness/kernels/plugin.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

namespace kcert::kernels {

int plugin_abi_version() { return KCERT_PLUGIN_ABI_VERSION; }

namespace {

// A file opened once: the checks read its fd, and dlopen loads /proc/self/fd/N, the same
// inode. Checking the path and then dlopen-ing the path let a swap in between run another
// library's constructors (1 in 30 tries in issue 34's race).
struct OpenedPlugin {
  int dir = -1, file = -1;
  OpenedPlugin() = default;
  OpenedPlugin(const OpenedPlugin&) = delete;
  OpenedPlugin& operator=(const OpenedPlugin&) = delete;
  ~OpenedPlugin() {
    if (file >= 0) ::close(file);
    if (dir >= 0) ::close(dir);
  }
};

std::string owner_text(uid_t uid) { return "uid " + std::to_string(uid); }

// Throws PluginError unless the opened file and its folder are safe to load code from:
// whoever can write the file, or replace it in its folder, can run code as the user running
// kcert (often root), since dlopen runs the library's constructors before kcert sees it.
void check_opened(const OpenedPlugin& p, const std::string& canonical, const std::string& dir) {
  struct stat st{};
  if (::fstat(p.file, &st) != 0) throw PluginError("plugin " + canonical + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw PluginError("plugin " + canonical + ": not a regular file");
  const auto euid = ::geteuid();
  if (st.st_uid != euid && st.st_uid != 0) {
    throw PluginError("plugin " + canonical + ": owned by " + owner_text(st.st_uid) +
                      ", neither you nor root; kcert loads only plugins their runner owns (chown it or copy it)");
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    throw PluginError("plugin " + canonical + ": writable by " + ((st.st_mode & S_IWOTH) ? "everyone" : "its group") +
                      "; anyone who can write it can run code as you (chmod go-w it)");
  }
  struct stat ds{};
  if (::fstat(p.dir, &ds) != 0) throw PluginError("plugin " + canonical + ": cannot stat its folder: " + std::strerror(errno));
  if (ds.st_uid != euid && ds.st_uid != 0) {
    throw PluginError("plugin " + canonical + ": its folder " + dir + " is owned by " + owner_text(ds.st_uid) +
                      ", neither you nor root, who could replace the file; move the plugin");
  }
  // A sticky world-writable folder (/tmp) lets no one but the file's owner rename or remove it.
  if ((ds.st_mode & S_IWOTH) && !(ds.st_mode & S_ISVTX)) {
    throw PluginError("plugin " + canonical + ": its folder " + dir +
                      " is writable by everyone without the sticky bit, so the file can be replaced; move the plugin");
  }
  if ((ds.st_mode & S_IWGRP) && !(ds.st_mode & S_ISVTX)) {
    throw PluginError("plugin " + canonical + ": its folder " + dir +
                      " is writable by its group, so the file can be replaced; move the plugin (or chmod g-w the folder)");
  }
}

void open_plugin(OpenedPlugin& p, const std::string& canonical) {
  namespace fs = std::filesystem;
  const fs::path path(canonical);
  const auto dir = path.parent_path().string();
  p.dir = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (p.dir < 0) throw PluginError("plugin " + canonical + ": cannot open its folder: " + std::strerror(errno));
  // O_NOFOLLOW: the name was canonical a moment ago; a link there now is a swap.
  p.file = ::openat(p.dir, path.filename().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (p.file < 0) throw PluginError("plugin " + canonical + ": cannot open: " + std::strerror(errno));
  check_opened(p, canonical, dir);
}

}  // namespace

void check_plugin_file(const std::string& canonical) {
  OpenedPlugin p;
  open_plugin(p, canonical);
}

LoadedPlugin load_plugin(const std::string& path, Registry& registry) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw PluginError("plugin " + path + ": no such file");
  const std::string canonical = fs::canonical(path, ec).string();
  LoadedPlugin out;
  out.path = canonical;
  if (registry.has_plugin(canonical)) return out;
  OpenedPlugin opened;
  open_plugin(opened, canonical);

  // The checked file itself, through its fd: not whatever the path names by now.
  const std::string fd_path = "/proc/self/fd/" + std::to_string(opened.file);
  struct stat via_proc{}, checked{};
  if (::stat(fd_path.c_str(), &via_proc) != 0 || ::fstat(opened.file, &checked) != 0 || via_proc.st_ino != checked.st_ino ||
      via_proc.st_dev != checked.st_dev) {
    throw PluginError("plugin " + path + ": cannot load it from its checked file descriptor (" + fd_path +
                      " is not available: is /proc mounted?)");
  }
  // RTLD_LOCAL keeps two plugins' symbols apart; the handle is never closed because the
  // registered kernels' code lives in it.
  void* handle = ::dlopen(fd_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  // The loader knows the library by the name it was opened by, /proc/self/fd/N. Closed, N
  // would be the next plugin's fd, and dlopen of the same name returns the library already
  // loaded: the second of two plugins was the first one again (issue 53, item 4). The fd of a
  // loaded plugin therefore stays open, and the next plugin's name differs.
  if (handle) {
    static std::vector<int> loaded_plugin_fds;
    loaded_plugin_fds.push_back(opened.file);
    opened.file = -1;
  }
  if (!handle) {
    const char* err = ::dlerror();
    std::string why = err ? err : "unknown error";
    // dlerror names the fd path; the user knows the file by its own name.
    if (const auto at = why.find(fd_path); at != std::string::npos) why.replace(at, fd_path.size(), canonical);
    throw PluginError("plugin " + path + ": cannot load: " + why);
  }
  using InfoFn = const PluginInfo* (*)();
  using RegisterFn = void (*)(Registry&);
  auto info_fn = reinterpret_cast<InfoFn>(::dlsym(handle, "kcert_plugin_info"));
  auto register_fn = reinterpret_cast<RegisterFn>(::dlsym(handle, "kcert_plugin_register"));
  if (!info_fn || !register_fn) {
    throw PluginError("plugin " + path +
                      ": not a kcert plugin (it defines no kcert_plugin_info / kcert_plugin_register; "
                      "use KCERT_PLUGIN and KCERT_PLUGIN_REGISTER from <harness/kernels/plugin.hpp>)");
  }
  const PluginInfo* info = info_fn();
  if (!info || info->abi_version != KCERT_PLUGIN_ABI_VERSION) {
    throw PluginError("plugin " + path + ": built against kcert plugin ABI " +
                      std::to_string(info ? info->abi_version : -1) + ", but this kcert has ABI " +
                      std::to_string(KCERT_PLUGIN_ABI_VERSION) + "; rebuild it against this kcert");
  }
  out.name = info->name ? info->name : "";
  out.version = info->version ? info->version : "";
  if (out.name.empty() || out.version.empty()) throw PluginError("plugin " + path + ": declares an empty name or version");

  const auto before = registry.variant_keys();
  const auto families_before = registry.family_names().size();
  try {
    register_fn(registry);
  } catch (const std::exception& e) {
    throw PluginError("plugin " + out.name + " (" + path + "): " + e.what());
  }
  // Every variant the plugin added records the plugin as its kernel version.
  for (const auto& key : registry.variant_keys()) {
    if (before.count(key)) continue;
    registry.stamp_origin(key.first, key.second, out.name + "@" + out.version, out.name);
    ++out.variants_added;
  }
  out.families_added = static_cast<int>(registry.family_names().size() - families_before);
  registry.note_plugin(canonical);
  return out;
}

}  // namespace kcert::kernels
