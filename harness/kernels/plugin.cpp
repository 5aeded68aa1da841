#include "harness/kernels/plugin.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>

namespace kcert::kernels {

int plugin_abi_version() { return KCERT_PLUGIN_ABI_VERSION; }

void check_plugin_file(const std::string& canonical) {
  // dlopen runs the library's constructors before kcert can refuse it, so whoever can write
  // the file (or swap it in its folder) can run code as the user running kcert.
  struct stat st{};
  if (::stat(canonical.c_str(), &st) != 0) throw PluginError("plugin " + canonical + ": cannot stat");
  if (!S_ISREG(st.st_mode)) throw PluginError("plugin " + canonical + ": not a regular file");
  const auto euid = ::geteuid();
  if (st.st_uid != euid && st.st_uid != 0) {
    throw PluginError("plugin " + canonical + ": owned by uid " + std::to_string(st.st_uid) +
                      ", neither you nor root; kcert loads only plugins their runner owns (chown it or copy it)");
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    throw PluginError("plugin " + canonical + ": writable by " + ((st.st_mode & S_IWOTH) ? "everyone" : "its group") +
                      "; anyone who can write it can run code as you (chmod go-w it)");
  }
  const auto dir = std::filesystem::path(canonical).parent_path();
  struct stat ds{};
  if (::stat(dir.c_str(), &ds) == 0 && (ds.st_mode & S_IWOTH) && !(ds.st_mode & S_ISVTX)) {
    throw PluginError("plugin " + canonical + ": its folder " + dir.string() +
                      " is writable by everyone without the sticky bit, so the file can be replaced; move the plugin");
  }
}

LoadedPlugin load_plugin(const std::string& path, Registry& registry) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw PluginError("plugin " + path + ": no such file");
  const std::string canonical = fs::canonical(path, ec).string();
  LoadedPlugin out;
  out.path = canonical;
  if (registry.has_plugin(canonical)) return out;
  check_plugin_file(canonical);

  // RTLD_LOCAL keeps two plugins' symbols apart; the handle is never closed because the
  // registered kernels' code lives in it.
  void* handle = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = ::dlerror();
    throw PluginError("plugin " + path + ": cannot load: " + (err ? err : "unknown error"));
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
