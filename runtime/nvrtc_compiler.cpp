#include "runtime/nvrtc_compiler.h"

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/runtime_counters.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {
namespace detail {

std::vector<std::string> nvrtc_search_list(const char *flashjit_nvrtc, const char *cuda_home,
                                           const char *python_sites,
                                           const std::string &library_dir) {
  if (flashjit_nvrtc && *flashjit_nvrtc) return {flashjit_nvrtc};
  std::vector<std::string> out;
  if (cuda_home && *cuda_home) {
    std::string lib64 = std::string(cuda_home) + "/lib64/";
    out.push_back(lib64 + "libnvrtc.so.13");
    out.push_back(lib64 + "libnvrtc.so");
  }
  out.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
  // Sonames last: the dynamic loader's own search (LD_LIBRARY_PATH, ldconfig).
  // NVRTC 12 still compiles every target flashjit emits up to sm_90a.
  out.push_back("libnvrtc.so.13");
  out.push_back("libnvrtc.so.12");
  out.push_back("libnvrtc.so");
  // pip's NVRTC beside PyTorch.
  std::vector<std::string> sites;
  if (python_sites && *python_sites) {
    llvm::SmallVector<llvm::StringRef, 4> parts;
    llvm::StringRef(python_sites).split(parts, ':', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef part : parts) sites.push_back(part.str());
  }
  if (!library_dir.empty()) sites.push_back(library_dir + "/..");
  for (const std::string &site : sites) {
    out.push_back(site + "/nvidia/cu13/lib/libnvrtc.so.13");
    out.push_back(site + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
  }
  return out;
}

std::string this_library_dir() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void *>(&this_library_dir), &info) || !info.dli_fname) return "";
  llvm::StringRef path(info.dli_fname);
  const size_t slash = path.rfind('/');
  return slash == llvm::StringRef::npos ? "" : path.substr(0, slash).str();
}

llvm::Expected<NvrtcApi> load_nvrtc(llvm::ArrayRef<std::string> candidates) {
  std::string tried;
  llvm::raw_string_ostream tried_os(tried);
  for (const std::string &candidate : candidates) {
    void *handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *err = dlerror();
      llvm::StringRef reason = err ? err : "dlopen failed";
      reason.consume_front(candidate + ": ");  // dlerror repeats the name
      tried_os << "\n  " << candidate << ": " << reason;
      continue;
    }
    NvrtcApi api;
    api.library = candidate;
    llvm::SmallVector<llvm::StringRef, 2> missing;
    auto resolve = [&](auto &slot, const char *symbol) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(handle, symbol));
      if (!slot) missing.push_back(symbol);
    };
    resolve(api.GetErrorString, "nvrtcGetErrorString");
    resolve(api.Version, "nvrtcVersion");
    resolve(api.CreateProgram, "nvrtcCreateProgram");
    resolve(api.DestroyProgram, "nvrtcDestroyProgram");
    resolve(api.CompileProgram, "nvrtcCompileProgram");
    resolve(api.GetProgramLogSize, "nvrtcGetProgramLogSize");
    resolve(api.GetProgramLog, "nvrtcGetProgramLog");
    resolve(api.GetCUBINSize, "nvrtcGetCUBINSize");
    resolve(api.GetCUBIN, "nvrtcGetCUBIN");
    resolve(api.GetPTXSize, "nvrtcGetPTXSize");
    resolve(api.GetPTX, "nvrtcGetPTX");
    if (missing.empty()) return api;
    // Too old for nvrtcGetCUBIN (NVRTC < 11.1): keep looking for a newer one.
    tried_os << "\n  " << candidate << ": lacks " << llvm::join(missing, ", ");
    dlclose(handle);
  }
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("cannot load NVRTC (libnvrtc.so), needed to compile kernels. Tried:{0}\n"
                    "Set FLASHJIT_NVRTC to the full path of libnvrtc.so.13, or CUDA_HOME to the "
                    "CUDA toolkit's root, or install the CUDA toolkit's NVRTC (Debian: "
                    "nvidia-cuda-toolkit / cuda-nvrtc-13-0), or, beside PyTorch, pip install "
                    "nvidia-cuda-nvrtc.",
                    tried_os.str())
          .str());
}

}  // namespace detail

namespace {

struct LoadedNvrtc {
  detail::NvrtcApi api;
  std::string error;  // empty when loaded
};

// Where this process looks for NVRTC, from its environment: read by the
// caller's thread (a preload's too), never by a thread of ours that another
// thread's setenv could race with.
std::vector<std::string> environment_search_list() {
  return detail::nvrtc_search_list(std::getenv("FLASHJIT_NVRTC"), std::getenv("CUDA_HOME"),
                                   std::getenv("FLASHJIT_PYTHON_SITES"),
                                   detail::this_library_dir());
}

std::once_flag nvrtc_once;
std::atomic<const LoadedNvrtc *> nvrtc_loaded{nullptr};

// Loads once even when the tuner's threads race here, from the candidates of
// whichever caller comes first. Never dlclose'd: compiled cubins outlive
// nothing of NVRTC, but a concurrent compile might.
const LoadedNvrtc &load_nvrtc_once(const std::vector<std::string> *candidates) {
  if (const LoadedNvrtc *loaded = nvrtc_loaded.load(std::memory_order_acquire)) return *loaded;
  std::call_once(nvrtc_once, [&] {
    auto *out = new LoadedNvrtc;
    llvm::Expected<detail::NvrtcApi> api =
        detail::load_nvrtc(candidates ? *candidates : environment_search_list());
    if (api)
      out->api = std::move(*api);
    else
      out->error = llvm::toString(api.takeError());
    nvrtc_loaded.store(out, std::memory_order_release);
  });
  return *nvrtc_loaded.load(std::memory_order_acquire);
}

const LoadedNvrtc &process_nvrtc() { return load_nvrtc_once(nullptr); }

std::atomic<bool> preload_started{false};

// pthread_atfork's prepare handler: the load's end (call_once makes any
// other caller wait for it).
void finish_preload_before_fork() {
  if (preload_started.load()) (void)process_nvrtc();
}

llvm::Expected<const detail::NvrtcApi &> nvrtc() {
  const LoadedNvrtc &loaded = []() -> const LoadedNvrtc & {
    PhaseTimer waiting(runtime_counters().compiler_wait_ns);
    return process_nvrtc();
  }();
  if (!loaded.error.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), loaded.error);
  return loaded.api;
}

// The architecture an option names, or "" when it names none. Handles both
// "--gpu-architecture=sm_90a" and "-arch sm_90a" (value in the next option).
llvm::StringRef arch_option_value(llvm::ArrayRef<std::string> options, size_t &i) {
  llvm::StringRef o = options[i];
  for (llvm::StringRef flag : {"--gpu-architecture", "-arch"}) {
    if (!o.startswith(flag)) continue;
    llvm::StringRef rest = o.drop_front(flag.size());
    if (rest.consume_front("=")) return rest;
    if (rest.empty() && i + 1 < options.size()) return options[++i];
  }
  return "";
}

}  // namespace

llvm::Expected<std::string> nvrtc_version() {
  auto api = nvrtc();
  if (!api) return api.takeError();
  int major = 0, minor = 0;
  if (nvrtcResult r = api->Version(&major, &minor); r != NVRTC_SUCCESS)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   llvm::formatv("nvrtcVersion failed: {0}",
                                                 api->GetErrorString(r))
                                       .str());
  return llvm::formatv("{0}.{1}", major, minor).str();
}

void preload_nvrtc() {
  bool expected = false;
  if (!preload_started.compare_exchange_strong(expected, true)) return;
  pthread_atfork(finish_preload_before_fork, nullptr, nullptr);
  std::thread([candidates = environment_search_list()] {
    (void)load_nvrtc_once(&candidates);
  }).detach();
}

llvm::Expected<std::string> nvrtc_library() {
  auto api = nvrtc();
  if (!api) return api.takeError();
  return api->library;
}

namespace {

// One NVRTC compile of `source` for `arch_name` (sm_XX: a cubin; compute_XX:
// PTX), its output in `out.bytes` (PTX without its terminating NUL).
llvm::Expected<Cubin> compile_program(const GeneratedSource &source, const TargetArch &arch,
                                      const std::string &arch_name, bool ptx) {
  auto loaded = nvrtc();
  if (!loaded) return loaded.takeError();
  const detail::NvrtcApi &api = *loaded;

  std::vector<std::string> options = source.options;
  bool has_arch = false;
  for (size_t i = 0; i < options.size(); ++i) {
    llvm::StringRef named = arch_option_value(options, i);
    if (named.empty()) continue;
    if (named != arch_name)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("{0}: its options target {1} but the compile was asked for {2}",
                        source.program_name, named, arch_name)
              .str());
    has_arch = true;
  }
  if (!has_arch) options.push_back("--gpu-architecture=" + arch_name);
  const std::string options_text = llvm::join(options, " ");

  auto fail = [&](llvm::StringRef stage, nvrtcResult r, llvm::StringRef log) {
    std::string message;
    llvm::raw_string_ostream os(message);
    os << llvm::formatv("NVRTC {0} of {1} for {2} failed: {3}\n  options: {4}", stage,
                        source.program_name, arch_name, api.GetErrorString(r), options_text);
    if (!log.empty()) os << "\n  log:\n" << log;
    return llvm::createStringError(llvm::inconvertibleErrorCode(), os.str());
  };

  // NVRTC takes C strings; TemplateFile's StringRefs need not be terminated.
  std::vector<std::string> header_names, header_texts;
  for (const TemplateFile &h : source.headers) {
    header_names.push_back(h.name.str());
    header_texts.push_back(h.text.str());
  }
  std::vector<const char *> header_name_ptrs, header_text_ptrs, option_ptrs;
  for (size_t i = 0; i < header_names.size(); ++i) {
    header_name_ptrs.push_back(header_names[i].c_str());
    header_text_ptrs.push_back(header_texts[i].c_str());
  }
  for (const std::string &o : options) option_ptrs.push_back(o.c_str());

  auto start = std::chrono::steady_clock::now();
  // Every return from here counts its time (runtime_stats), a failure's too.
  auto count_time = llvm::make_scope_exit([start] {
    runtime_counters().compile_ns.fetch_add(
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count()),
        std::memory_order_relaxed);
  });
  nvrtcProgram program = nullptr;
  if (nvrtcResult r = api.CreateProgram(&program, source.source.c_str(),
                                        source.program_name.c_str(), int(header_texts.size()),
                                        header_text_ptrs.data(), header_name_ptrs.data());
      r != NVRTC_SUCCESS)
    return fail("program creation", r, "");
  auto destroy = llvm::make_scope_exit([&] { api.DestroyProgram(&program); });

  nvrtcResult compiled = api.CompileProgram(program, int(option_ptrs.size()), option_ptrs.data());
  runtime_counters().compiles.fetch_add(1, std::memory_order_relaxed);

  Cubin out;
  out.arch = arch;
  size_t log_size = 0;
  if (api.GetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    if (api.GetProgramLog(program, out.log.data()) == NVRTC_SUCCESS)
      out.log.resize(log_size - 1);  // drop the terminating NUL
    else
      out.log.clear();
  }
  if (compiled != NVRTC_SUCCESS) return fail("compilation", compiled, out.log);

  if (ptx) {
    size_t ptx_size = 0;
    if (nvrtcResult r = api.GetPTXSize(program, &ptx_size); r != NVRTC_SUCCESS)
      return fail("nvrtcGetPTXSize", r, out.log);
    out.bytes.resize(ptx_size);
    if (nvrtcResult r = api.GetPTX(program, out.bytes.data()); r != NVRTC_SUCCESS)
      return fail("nvrtcGetPTX", r, out.log);
    while (!out.bytes.empty() && out.bytes.back() == '\0') out.bytes.pop_back();
  } else {
    size_t cubin_size = 0;
    if (nvrtcResult r = api.GetCUBINSize(program, &cubin_size); r != NVRTC_SUCCESS)
      return fail("nvrtcGetCUBINSize", r, out.log);
    if (cubin_size == 0)
      return fail("nvrtcGetCUBIN (empty: a virtual compute_XX architecture yields only PTX)",
                  NVRTC_ERROR_INVALID_OPTION, out.log);
    out.bytes.resize(cubin_size);
    if (nvrtcResult r = api.GetCUBIN(program, out.bytes.data()); r != NVRTC_SUCCESS)
      return fail("nvrtcGetCUBIN", r, out.log);
  }
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace

llvm::Expected<Cubin> compile_to_cubin(const GeneratedSource &source, const TargetArch &arch) {
  return compile_program(source, arch, arch.name(), /*ptx=*/false);
}

llvm::Expected<Cubin> compile_to_ptx(const GeneratedSource &source, const TargetArch &arch) {
  // sm_90a's virtual architecture is compute_90a: the same features.
  return compile_program(source, arch, "compute_" + arch.name().substr(3), /*ptx=*/true);
}

}  // namespace flashjit
