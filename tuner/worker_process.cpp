#include "tuner/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

extern char **environ;

namespace flashjit {
namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

std::string signal_name(int signal) {
  if (const char *abbrev = sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return llvm::formatv("signal {0}", signal).str();
}

std::string seconds_text(double s) {
  return s == std::floor(s) ? llvm::formatv("{0}", int64_t(s)).str()
                            : llvm::formatv("{0:f1}", s).str();
}

// Writes all of `text` to a pipe whose reader may be dead: the write then
// fails with EPIPE instead of raising SIGPIPE, which would kill the tuner.
// SIGPIPE is blocked in this thread only and a pending one consumed, so the
// process's own disposition is left alone.
bool write_all(int fd, llvm::StringRef text) {
  sigset_t pipe_set, previous;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &previous);
  bool ok = true;
  bool broken_pipe = false;
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      broken_pipe = errno == EPIPE;
      break;
    }
    text = text.drop_front(size_t(n));
  }
  if (broken_pipe) {
    const timespec zero{};
    while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return ok;
}

void close_fd(int &fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

std::string resolve_worker_binary(llvm::StringRef explicit_path) {
  if (!explicit_path.empty()) return explicit_path.str();
  const char *env = std::getenv("FLASHJIT_WORKER");
  return env ? env : "";
}

std::string current_executable() {
  llvm::SmallString<256> path;
  path.resize(4096);
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) return "";
  path.resize(size_t(n));
  return path.str().str();
}

WorkerProcess::WorkerProcess(std::string binary, std::vector<std::string> args,
                             std::optional<llvm::json::Object> setup, double setup_timeout_s)
    : binary_(std::move(binary)),
      args_(std::move(args)),
      setup_(std::move(setup)),
      setup_timeout_s_(setup_timeout_s) {}

WorkerProcess::~WorkerProcess() { stop(); }

void WorkerProcess::stop() {
  if (pid_ > 0) reap(/*kill_first=*/true);
}

llvm::Error WorkerProcess::start() {
  int to_child[2], from_child[2];
  // Close-on-exec, so that workers started at the same time from other
  // threads never inherit each other's pipes (a worker would then not see
  // EOF when its parent closes its end).
  if (pipe2(to_child, O_CLOEXEC) != 0) return error("pipe2: " + llvm::Twine(strerror(errno)));
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    ::close(to_child[0]);
    ::close(to_child[1]);
    return error("pipe2: " + llvm::Twine(strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
  // The worker starts with default signal handling whatever this process
  // ignores or blocks (a dead parent must give it SIGPIPE, not EPIPE loops).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> argv_text = {binary_};
  argv_text.insert(argv_text.end(), args_.begin(), args_.end());
  argv_text.push_back("--parent-pid=" + std::to_string(getpid()));
  std::vector<char *> argv;
  for (std::string &a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  const int rc = posix_spawn(&pid, binary_.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(to_child[0]);
  ::close(from_child[1]);
  if (rc != 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    return error(llvm::formatv("cannot start the worker {0}: {1}", binary_, strerror(rc)));
  }
  pid_ = pid;
  to_worker_ = to_child[1];
  from_worker_ = from_child[0];
  buffered_.clear();
  ++generation_;
  if (setup_) {
    auto reply = exchange(*setup_, setup_timeout_s_, "setting up");
    if (!reply) return reply.takeError();
    setup_reply_ = std::move(*reply);
  }
  return llvm::Error::success();
}

std::string WorkerProcess::reap(bool kill_first) {
  close_fd(to_worker_);
  close_fd(from_worker_);
  if (pid_ <= 0) return "worker not running";
  if (kill_first) ::kill(pid_, SIGKILL);
  int status = 0;
  pid_t done;
  do {
    done = ::waitpid(pid_, &status, 0);
  } while (done < 0 && errno == EINTR);
  pid_ = -1;
  if (done < 0) return "worker lost (waitpid: " + std::string(strerror(errno)) + ")";
  if (WIFSIGNALED(status)) return "worker killed by " + signal_name(WTERMSIG(status));
  if (WIFEXITED(status)) return llvm::formatv("worker exited with status {0}", WEXITSTATUS(status));
  return "worker ended";
}

llvm::Expected<llvm::json::Object> WorkerProcess::request(const llvm::json::Object &request,
                                                          double timeout_s,
                                                          llvm::StringRef doing) {
  if (pid_ <= 0)
    if (llvm::Error e = start()) return e;
  return exchange(request, timeout_s, doing);
}

llvm::Expected<llvm::json::Object> WorkerProcess::exchange(const llvm::json::Object &request,
                                                           double timeout_s,
                                                           llvm::StringRef doing) {
  std::string line;
  llvm::raw_string_ostream os(line);
  os << llvm::json::Value(llvm::json::Object(request)) << "\n";
  os.flush();
  if (!write_all(to_worker_, line)) return error(reap(/*kill_first=*/true) + " while " + doing);

  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  size_t newline;
  while ((newline = buffered_.find('\n')) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      reap(/*kill_first=*/true);
      return error(llvm::formatv("timed out after {0} s while {1}; the worker was killed",
                                 seconds_text(timeout_s), doing));
    }
    pollfd fd{from_worker_, POLLIN, 0};
    const int ready = ::poll(&fd, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char chunk[4096];
    const ssize_t n = ::read(from_worker_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    // End of file: it is dying or dead. A SIGKILL now cannot change how it
    // ended (the status is fixed once it closes its pipes on the way out).
    if (n <= 0) return error(reap(/*kill_first=*/true) + " while " + doing);
    buffered_.append(chunk, size_t(n));
  }
  const std::string reply_text = buffered_.substr(0, newline);
  buffered_.erase(0, newline + 1);

  auto parsed = llvm::json::parse(reply_text);
  if (!parsed || !parsed->getAsObject()) {
    if (!parsed) llvm::consumeError(parsed.takeError());
    reap(/*kill_first=*/true);
    return error("the worker's reply while " + doing + " is not a JSON object: " +
                 llvm::StringRef(reply_text).take_front(200));
  }
  llvm::json::Object reply = std::move(*parsed->getAsObject());
  if (reply.getBoolean("ok").getValueOr(false)) return reply;
  std::string message = reply.getString("error").getValueOr("the worker failed").str();
  if (reply.getBoolean("fatal").getValueOr(false)) {
    // Its CUDA context is gone and it has said why: end it (it is on its
    // way out anyway) so that the next request starts a fresh one.
    reap(/*kill_first=*/true);
  }
  return error(message);
}

}  // namespace flashjit
