#include "harness/store/environment.hpp"

#include "harness/numerics/process_policy.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Utils.h>
#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <sys/utsname.h>
#include "harness/numerics/torch_api.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "harness/numerics/math_modes.hpp"
#include "harness/numerics/runtime.hpp"
#include "harness/store/sha256.hpp"

namespace kcert::store {

namespace {

std::string read_first_match(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find_first_of(":=");
      if (colon == std::string::npos) continue;
      auto value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t\""));
      while (!value.empty() && (value.back() == '"' || value.back() == ' ')) value.pop_back();
      return value;
    }
  }
  return "";
}

// The ISA extensions that change which kernels run (oneDNN bf16 paths, AMX, FMA).
nlohmann::json cpu_flags() {
  static const std::set<std::string> relevant = {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                                 "avx512dq", "avx512_bf16", "avx512_fp16", "avx512_vnni",
                                                 "amx_bf16", "amx_tile", "amx_int8", "asimd", "sve"};
  std::string flags = read_first_match("/proc/cpuinfo", "flags");
  if (flags.empty()) flags = read_first_match("/proc/cpuinfo", "Features");
  std::istringstream in(flags);
  std::set<std::string> found;
  for (std::string f; in >> f;) {
    if (relevant.count(f)) found.insert(f);
  }
  return nlohmann::json(std::vector<std::string>(found.begin(), found.end()));
}

std::string run_and_read(const char* command) {
  std::string out;
  if (FILE* p = ::popen(command, "r")) {
    std::array<char, 512> buf{};
    while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string blas_library() {
  // Debian's alternatives decide which BLAS LibTorch links at run time.
  std::error_code ec;
  for (const char* link : {"/etc/alternatives/libblas.so.3-x86_64-linux-gnu", "/etc/alternatives/libblas.so.3-aarch64-linux-gnu"}) {
    const auto target = std::filesystem::read_symlink(link, ec);
    if (!ec) return target.string();
  }
  return "unknown";
}

std::string config_line(const std::string& config, const std::string& key) {
  std::istringstream in(config);
  for (std::string line; std::getline(in, line);) {
    const auto pos = line.find(key);
    if (pos != std::string::npos) {
      auto v = line.substr(pos + key.size());
      v.erase(0, v.find_first_not_of(" :="));
      const auto end = v.find_first_of(",\n");
      return v.substr(0, end);
    }
  }
  return "";
}

// Version numbers as the libraries encode them: the CUDA runtime major·1000 + minor·10
// (13020 = 13.2); cuDNN 8 major·1000 + minor·100 + patch (8906 = 8.9.6); cuDNN 9 and cuBLAS
// major·10000 + minor·100 + patch (91000 = 9.10.0).
std::string cudart_version_text(long v) {
  if (v <= 0) return "";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}
std::string library_version_text(long v) {
  if (v <= 0) return "";
  if (v < 10000) return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

// The GPU stack where a CUDA device is usable: what changes a GPU kernel's bits. The versions
// are asked of the libraries LibTorch itself loaded (libtorch_cuda needs libcudart, libcudnn
// and libcublasLt), so they are those that run, not those anything was compiled against
// (ATen's CUDA hooks report libtorch_cuda's build-time CUDART_VERSION / CUDNN_VERSION: a
// swapped nvidia-cudnn wheel would not show there), and the CPU build needs no CUDA headers.
void add_gpu_identity(nlohmann::json& id, const std::string& smi_line) {
  // nvidia-smi: "NVIDIA H200, 9.0, 570.124.06"
  std::vector<std::string> parts;
  std::istringstream in(smi_line);
  for (std::string p; std::getline(in, p, ',');) {
    p.erase(0, p.find_first_not_of(' '));
    parts.push_back(p);
  }
  id["gpu_name"] = parts.size() > 0 ? parts[0] : "unknown";
  id["gpu_compute_capability"] = parts.size() > 1 ? parts[1] : "unknown";
  id["gpu_driver"] = parts.size() > 2 ? parts[2] : "unknown";
  using RuntimeVersion = int (*)(int*);
  int runtime = 0;
  if (const auto f = reinterpret_cast<RuntimeVersion>(::dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion")); f && f(&runtime) == 0)
    id["cuda_runtime"] = cudart_version_text(runtime);
  else
    id["cuda_runtime"] = "unknown";
  using SizeVersion = std::size_t (*)();  // cudnnGetVersion and cublasLtGetVersion take nothing
  const auto cudnn = reinterpret_cast<SizeVersion>(::dlsym(RTLD_DEFAULT, "cudnnGetVersion"));
  id["cudnn"] = cudnn ? library_version_text(static_cast<long>(cudnn())) : "none";
  const auto lt = reinterpret_cast<SizeVersion>(::dlsym(RTLD_DEFAULT, "cublasLtGetVersion"));
  id["cublas"] = lt ? library_version_text(static_cast<long>(lt())) : "unknown";
  // What libtorch_cuda was compiled against, beside what runs.
  const auto& hooks = at::detail::getCUDAHooks();
  id["cuda_runtime_built"] = cudart_version_text(hooks.versionCUDART());
  nlohmann::json modes = nlohmann::json::object();
  for (const auto& [name, value] : numerics::math_mode_fields(numerics::process_math_modes()))
    if (value) modes[name] = *value;
  id["math_modes"] = modes;
}

}  // namespace

std::string describe_environment(const Environment& env) {
  const auto& id = env.identity;
  const auto get = [&](const char* k) { return id.contains(k) && id.at(k).is_string() ? id.at(k).get<std::string>() : std::string(); };
  std::string flags;
  if (id.contains("cpu_flags") && id.at("cpu_flags").is_array())
    for (const auto& f : id.at("cpu_flags")) flags += (flags.empty() ? "" : ", ") + f.get<std::string>();
  // ".../x86_64-linux-gnu/openblas-pthread/libblas.so.3" -> "openblas-pthread"
  std::string blas = get("blas");
  if (const auto dir = std::filesystem::path(blas).parent_path().filename().string(); !dir.empty()) blas = dir;
  const std::string gpu = get("gpu");
  // Said only when it matters: a bf16 GEMM that accumulates in bf16 changes what the real-GEMM
  // controls (#1, #3, #12) measure.
  std::string bf16_gemm;
  if (env.details.contains("cpu_bf16_gemm_in_bf16") && env.details.at("cpu_bf16_gemm_in_bf16").is_array()) {
    for (const auto& l : env.details.at("cpu_bf16_gemm_in_bf16")) bf16_gemm += (bf16_gemm.empty() ? "" : ", ") + l.get<std::string>();
    if (!bf16_gemm.empty()) bf16_gemm = ", CPU bf16 GEMM accumulating in bf16 (" + bf16_gemm + ")";
  }
  // "Python 3.11.2 (torch 2.15.0; transformers 5.25.0)": what the Python module recorded.
  std::string python;
  if (id.contains("front_end") && id.at("front_end").is_object()) {
    const auto& fe = id.at("front_end");
    const auto text = [&](const char* k) { return fe.contains(k) && fe.at(k).is_string() ? fe.at(k).get<std::string>() : std::string(); };
    std::string modules;
    if (fe.contains("modules") && fe.at("modules").is_object())
      for (const auto& [name, version] : fe.at("modules").items())
        modules += "; " + name + " " + (version.is_string() ? version.get<std::string>() : version.dump());
    python = ", Python " + text("python") + " (torch " + text("torch") + modules + ")";
  }
  return get("cpu_model") + " (" + get("arch") + (flags.empty() ? "" : "; " + flags) + "), " +
         (gpu.empty() || gpu == "none" ? std::string("no GPU") : "GPU " + gpu) + ", LibTorch " + get("torch_version") +
         (get("torch_cpu_capability").empty() ? "" : " (CPU capability " + get("torch_cpu_capability") + ")") +
         (get("torch_cuda").empty() ? "" : ", CUDA " + get("torch_cuda")) +
         (get("cuda_runtime").empty() ? "" : " (runtime " + get("cuda_runtime") + ", cuBLAS " + get("cublas") +
                                                 ", cuDNN " + get("cudnn") + ", driver " + get("gpu_driver") + ")") +
         ", BLAS " + blas +
         (get("blas_core").empty() ? "" : " (core " + get("blas_core") + ", threads " + get("blas_threads") + ")") +
         bf16_gemm + python + ", " +
         get("os") + ", kcert built with " + get("kcert_compiler") + " [" + env.fingerprint + "]";
}

std::string fingerprint_of(const nlohmann::json& identity) { return sha256_hex(identity.dump()).substr(0, 16); }

namespace {
nlohmann::json& front_end_description() {
  static nlohmann::json description;
  return description;
}
}  // namespace

void set_front_end(nlohmann::json description) { front_end_description() = std::move(description); }

Environment detect_environment() {
  Environment env;
  const std::string config = at::show_config();
  nlohmann::json id;
  id["cpu_model"] = read_first_match("/proc/cpuinfo", "model name");
  id["cpu_flags"] = cpu_flags();
  utsname u{};
  ::uname(&u);
  id["arch"] = u.machine;
  id["os"] = read_first_match("/etc/os-release", "PRETTY_NAME");
  id["kcert_compiler"] = std::string("GCC ") + __VERSION__;
  id["torch_version"] = numerics::torch_version();
  id["torch_compiler"] = config_line(config, "GCC version");
  id["torch_cuda"] = config_line(config, "CUDA Runtime");
  // The CUDA a wheel was built for, where show_config has no runtime section (no usable GPU):
  // a CUDA build of LibTorch is another environment than a CPU build even on a CPU.
  if (id["torch_cuda"].get<std::string>().empty()) id["torch_cuda"] = config_line(config, "CUDA_VERSION");
  id["torch_blas_info"] = config_line(config, "BLAS_INFO");
  // PyPI's wheels link MKL statically: Debian's BLAS alternative is then not what runs.
  id["blas"] = id["torch_blas_info"] == "mkl" ? std::string("mkl (linked into LibTorch)") : blas_library();
  // OpenBLAS results differ per core and per thread count at the ULP level (measured: the
  // attention control a1's U is 52.35977 with 2 OpenBLAS threads, 52.35988 with 1), so both
  // are part of the environment (numerics/process_policy.hpp).
  id["blas_core"] = numerics::process_policy().openblas_core;
  id["blas_threads"] = numerics::process_policy().openblas_threads;
  id["torch_cpu_capability"] = config_line(config, "CPU capability usage");  // ATen's kernel dispatch level
  id["onednn"] = at::hasMKLDNN() ? (at::globalContext().userEnabledMkldnn() ? "enabled" : "disabled") : "absent";
  // GPU identity from the driver, whatever LibTorch was built with.
  const auto gpu = run_and_read("nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null | head -1");
  id["gpu"] = gpu.empty() ? "none" : gpu;
  // Only where a GPU can run kernels, so a CPU machine's fingerprint is what it always was.
  if (numerics::cuda_available()) add_gpu_identity(id, gpu);
  if (!front_end_description().is_null()) id["front_end"] = front_end_description();
  if (const char* path = std::getenv("KCERT_ENVIRONMENT_FILE")) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error(std::string("KCERT_ENVIRONMENT_FILE: cannot open ") + path);
    const auto overrides = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!overrides.is_object()) throw std::runtime_error(std::string("KCERT_ENVIRONMENT_FILE: ") + path + " must hold a JSON object");
    for (const auto& [k, v] : overrides.items()) id[k] = v;
  }
  env.identity = id;  // nlohmann::json objects keep keys sorted: a canonical dump
  env.details["torch_build_config"] = config;
  // Determined by fields of the identity (LibTorch, ISA flags, oneDNN state), so recorded
  // beside it: which CPU bf16 matrix products accumulate in bf16 (numerics/runtime.hpp).
  env.details["cpu_bf16_gemm_in_bf16"] = numerics::cpu_bf16_gemm_accumulating_in_bf16();
  env.details["threads"] = at::get_num_threads();
  const auto& policy = numerics::process_policy();
  env.details["thread_policy"] = {{"threads_source", policy.threads_source}, {"omp_wait_policy", policy.omp_wait_policy},
                                  {"openblas_threads", policy.openblas_threads}, {"openblas_core", policy.openblas_core},
                                  {"openblas_core_note", policy.openblas_core_note}};
  env.fingerprint = fingerprint_of(id);
  return env;
}

}  // namespace kcert::store
