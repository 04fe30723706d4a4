#include "tuner/worker_server.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "runtime/kernel_source.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/runtime_counters.h"
#include "tuner/candidate_runner.h"
#include "tuner/planted_faults.h"
#include "tuner/worker_protocol.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {
namespace {

namespace wp = worker_protocol;
using llvm::json::Object;

constexpr int kExitFatal = 3;

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

class Server {
 public:
  explicit Server(std::string db_path) : db_path_(std::move(db_path)) {}

  // The reply to one request line; sets `fatal_` when the process must end.
  Object serve(llvm::StringRef line);
  bool fatal() const { return fatal_; }

 private:
  llvm::Expected<Object> dispatch(const Object &request, llvm::StringRef op);
  llvm::Expected<Object> compile(const Object &request);
  llvm::Expected<Object> setup(const Object &request);
  llvm::Expected<Object> load(const Object &request);
  llvm::Expected<Object> warm_up(const Object &request);
  llvm::Expected<Object> time(const Object &request);
  llvm::Expected<Object> check(const Object &request);
  llvm::Expected<TuningDb *> db();
  llvm::Expected<InProcessRunner *> runner();
  llvm::Expected<int> candidate(const Object &request);

  std::string db_path_;
  std::unique_ptr<TuningDb> db_;
  std::unique_ptr<InProcessRunner> runner_;
  std::optional<PlantedFaults> plants_;
  bool fatal_ = false;
};

llvm::Expected<TuningDb *> Server::db() {
  if (!db_) {
    auto opened = TuningDb::open(db_path_);
    if (!opened) return opened.takeError();
    db_ = std::move(*opened);
  }
  return db_.get();
}

llvm::Expected<InProcessRunner *> Server::runner() {
  if (!runner_) return error("worker: 'setup' must come before loading or timing candidates");
  return runner_.get();
}

llvm::Expected<int> Server::candidate(const Object &request) {
  auto index = wp::integer_field(request, "candidate");
  if (!index) return index.takeError();
  return int(*index);
}

llvm::Expected<Object> Server::compile(const Object &request) {
  auto index = candidate(request);
  if (!index) return index.takeError();
  auto spec_json = wp::object_field(request, "spec");
  if (!spec_json) return spec_json.takeError();
  auto spec = wp::spec_from_json(*spec_json);
  if (!spec) return spec.takeError();
  if (*index == plants_->compile_crash) {
    // A genuine NVRTC crash (planted_faults.h). Should a later NVRTC compile
    // the program instead, the crash is raised here, in the same place, so
    // the tuner's side is tested all the same.
    auto crashed = compile_to_cubin(planted_compiler_crash_source(), TargetArch{9, 0, true});
    if (!crashed) llvm::consumeError(crashed.takeError());
    llvm::errs() << "flashjit worker: NVRTC did not crash on the planted program; raising "
                    "SIGSEGV instead\n";
    llvm::errs().flush();
    raise(SIGSEGV);
  }
  auto store = db();
  if (!store) return store.takeError();
  auto cubin = kernel_cubin(*spec, *store);
  if (!cubin) return cubin.takeError();
  return Object{{"cubin_key", cubin->key},
                {"entry", cubin->entry},
                {"from_store", !cubin->compiled},
                {"compile_ms", cubin->compile_ms}};
}

llvm::Expected<Object> Server::setup(const Object &request) {
  auto pass = wp::pass_field(request, "pass");
  if (!pass) return pass.takeError();
  auto problem_json = wp::object_field(request, "problem");
  if (!problem_json) return problem_json.takeError();
  auto problem = wp::problem_from_json(*problem_json);
  if (!problem) return problem.takeError();
  auto device = wp::integer_field(request, "device");
  if (!device) return device.takeError();
  std::optional<PackedBatch> packed;
  if (request.get("packed")) {
    auto packed_json = wp::object_field(request, "packed");
    if (!packed_json) return packed_json.takeError();
    auto batch = wp::packed_batch_from_json(*packed_json);
    if (!batch) return batch.takeError();
    packed = std::move(*batch);
  }
  TunedModifiers modifiers;
  if (request.get("modifiers")) {
    auto modifiers_json = wp::object_field(request, "modifiers");
    if (!modifiers_json) return modifiers_json.takeError();
    auto read = wp::modifiers_from_json(*modifiers_json);
    if (!read) return read.takeError();
    modifiers.modifiers = std::move(*read);
  }
  if (const llvm::json::Value *values = request.get("aux_values")) {
    const llvm::json::Array *list = values->getAsArray();
    if (!list) return error("worker request: 'aux_values': expected a list of \"NAME=VALUE\"");
    for (const llvm::json::Value &value : *list) {
      auto text = value.getAsString();
      if (!text) return error("worker request: 'aux_values': expected a list of \"NAME=VALUE\"");
      modifiers.aux_values.push_back(text->str());
    }
  }
  auto store = db();
  if (!store) return store.takeError();
  runner_.reset();  // its context scope ends before the next one starts
  auto made = InProcessRunner::make(*pass, *problem, packed, int(*device), *store, modifiers);
  if (!made) return made.takeError();
  runner_ = std::move(*made);
  return Object{{"input_sets", runner_->input_sets()}};
}

llvm::Expected<Object> Server::load(const Object &request) {
  auto run = runner();
  if (!run) return run.takeError();
  auto index = candidate(request);
  if (!index) return index.takeError();
  auto spec_json = wp::object_field(request, "spec");
  if (!spec_json) return spec_json.takeError();
  auto spec = wp::spec_from_json(*spec_json);
  if (!spec) return spec.takeError();

  auto loaded = [&]() -> llvm::Expected<LoadedCandidate> {
    // A planted fault's kernel stands in for the candidate's program.
    if (auto planted = planted_kernel_source(*plants_, *index)) {
      auto cubin = compile_to_cubin(*planted, spec->arch);
      if (!cubin) return cubin.takeError();
      return (*run)->load_stand_in(*index, *spec, cubin->bytes, planted->entry);
    }
    auto store = db();
    if (!store) return store.takeError();
    auto cubin = kernel_cubin(*spec, *store);
    if (!cubin) return cubin.takeError();
    return (*run)->load_cubin(*index, *spec, cubin->bytes, cubin->entry);
  }();
  if (!loaded) return loaded.takeError();
  return Object{{"registers", loaded->registers},
                {"spill_bytes", loaded->spill_bytes},
                {"static_smem_bytes", loaded->static_smem_bytes},
                {"dynamic_smem_bytes", loaded->dynamic_smem_bytes},
                {"occupancy", loaded->occupancy},
                {"rejected", loaded->rejected}};
}

llvm::Expected<Object> Server::warm_up(const Object &request) {
  auto run = runner();
  if (!run) return run.takeError();
  auto index = candidate(request);
  if (!index) return index.takeError();
  auto ms = wp::number_field(request, "ms");
  if (!ms) return ms.takeError();
  if (llvm::Error e = (*run)->warm_up(*index, *ms)) return e;
  return Object{};
}

llvm::Expected<Object> Server::time(const Object &request) {
  auto run = runner();
  if (!run) return run.takeError();
  auto index = candidate(request);
  if (!index) return index.takeError();
  auto repeats = wp::integer_field(request, "repeats");
  if (!repeats) return repeats.takeError();
  auto m = (*run)->time(*index, int(*repeats));
  if (!m) return m.takeError();
  return Object{{"median_ms", m->median_ms}, {"min_ms", m->min_ms}, {"max_ms", m->max_ms}};
}

llvm::Expected<Object> Server::check(const Object &request) {
  auto run = runner();
  if (!run) return run.takeError();
  auto index = candidate(request);
  if (!index) return index.takeError();
  auto why = (*run)->check(*index);
  if (!why) return why.takeError();
  return Object{{"passed", why->empty()}, {"why", *why}};
}

llvm::Expected<Object> Server::dispatch(const Object &request, llvm::StringRef op) {
  if (op == "ping") return Object{};
  if (op == "compile") return compile(request);
  if (op == "setup") return setup(request);
  if (op == "load") return load(request);
  if (op == "warm_up") return warm_up(request);
  if (op == "time") return time(request);
  if (op == "check") return check(request);
  return error("worker: unknown op '" + op + "'");
}

Object Server::serve(llvm::StringRef line) {
  if (!plants_) {
    auto plants = planted_faults_from_env();
    if (!plants) return wp::error_reply(llvm::toString(plants.takeError()), false);
    plants_ = *plants;
  }
  auto parsed = llvm::json::parse(line);
  if (!parsed) return wp::error_reply("worker: bad request: " + llvm::toString(parsed.takeError()), false);
  const Object *request = parsed->getAsObject();
  if (!request) return wp::error_reply("worker: bad request: not a JSON object", false);
  const std::string op = request->getString("op").getValueOr("").str();

  const uint64_t compiles_before = runtime_counters().compiles.load();
  const uint64_t compile_ns_before = runtime_counters().compile_ns.load();
  auto reply = dispatch(*request, op);
  const int64_t compiles = int64_t(runtime_counters().compiles.load() - compiles_before);
  const int64_t compile_ns = int64_t(runtime_counters().compile_ns.load() - compile_ns_before);
  if (reply) {
    (*reply)["ok"] = true;
    (*reply)["compiles"] = compiles;
    (*reply)["compile_ns"] = compile_ns;
    return std::move(*reply);
  }
  std::string message = llvm::toString(reply.takeError());
  // A fault in a kernel leaves this process's context unusable for good:
  // say so and end, so that a fresh worker (and context) takes over.
  if (runner_ && !runner_->broken().empty()) {
    fatal_ = true;
    message = llvm::formatv("GPU fault while {0} candidate {1}: {2}",
                            op == "time" ? "timing" : op, request->getInteger("candidate").getValueOr(-1),
                            runner_->broken())
                  .str();
  }
  Object out = wp::error_reply(message, fatal_);
  out["compiles"] = compiles;
  out["compile_ns"] = compile_ns;
  return out;
}

bool write_line(int fd, const Object &reply) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(Object(reply)) << "\n";
  os.flush();
  llvm::StringRef rest = text;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n <= 0) return false;
    rest = rest.drop_front(size_t(n));
  }
  return true;
}

}  // namespace

int serve_worker(int in_fd, int out_fd, const std::string &db_path) {
  Server server(db_path);
  std::string pending;
  char chunk[4096];
  for (;;) {
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (!write_line(out_fd, server.serve(line))) return 1;  // the tuner is gone
      // Skip every destructor: they would call into a broken context.
      if (server.fatal()) _exit(kExitFatal);
    }
    const ssize_t n = ::read(in_fd, chunk, sizeof(chunk));
    if (n == 0) return 0;
    if (n < 0) return 1;
    pending.append(chunk, size_t(n));
  }
}

}  // namespace flashjit
