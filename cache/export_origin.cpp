#include "cache/export_origin.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

namespace flashjit {

namespace {

constexpr size_t kKeyBytes = 32;

llvm::Error origin_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

std::array<uint8_t, 32> sha256(llvm::StringRef a, llvm::StringRef b = {}) {
  llvm::SHA256 hash;
  hash.update(llvm::arrayRefFromStringRef(a));
  hash.update(llvm::arrayRefFromStringRef(b));
  llvm::StringRef digest = hash.final();
  std::array<uint8_t, 32> out;
  std::memcpy(out.data(), digest.data(), out.size());
  return out;
}

// RFC 2104 over SHA-256 (64-byte blocks).
std::string hmac_sha256_hex(llvm::StringRef key, llvm::StringRef message) {
  std::string block(64, '\0');
  if (key.size() > block.size()) {
    const auto digest = sha256(key);
    std::memcpy(block.data(), digest.data(), digest.size());
  } else {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::string inner_pad = block, outer_pad = block;
  for (size_t i = 0; i < block.size(); ++i) {
    inner_pad[i] = static_cast<char>(inner_pad[i] ^ 0x36);
    outer_pad[i] = static_cast<char>(outer_pad[i] ^ 0x5c);
  }
  const auto inner = sha256(inner_pad, message);
  const auto outer =
      sha256(outer_pad, llvm::StringRef(reinterpret_cast<const char *>(inner.data()), inner.size()));
  return llvm::toHex(outer, /*LowerCase=*/true);
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

llvm::Expected<std::string> read_key(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return origin_error(path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return origin_error(path + ": not a regular file");
  }
  // A key others can read (or write) proves nothing about who signed.
  if (st.st_uid != geteuid()) {
    ::close(fd);
    return origin_error(llvm::formatv("{0} belongs to uid {1}, not to you (uid {2})", path,
                                      st.st_uid, geteuid()));
  }
  if (st.st_mode & 077) {
    ::close(fd);
    return origin_error(llvm::formatv("{0} is open to others (mode {1}): it proves nothing "
                                      "(chmod 600 {0})",
                                      path, mode_text(st.st_mode)));
  }
  char text[2 * kKeyBytes + 2];
  const ssize_t n = ::read(fd, text, sizeof text);
  ::close(fd);
  llvm::StringRef hex = n > 0 ? llvm::StringRef(text, size_t(n)).rtrim("\n") : "";
  std::string key;
  if (hex.size() != 2 * kKeyBytes || !llvm::tryGetFromHex(hex, key))
    return origin_error(path + ": not a flashjit origin key (64 hex digits)");
  return key;
}

llvm::Error create_key(const std::string &path) {
  llvm::StringRef folder = llvm::sys::path::parent_path(path);
  if (!folder.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(folder, true,
                                                               llvm::sys::fs::owner_all))
      return origin_error(llvm::formatv("{0}: cannot create the folder: {1}", folder,
                                        ec.message()));
  uint8_t key[kKeyBytes];
  const int random = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  const bool read_all = random >= 0 && ::read(random, key, sizeof key) == ssize_t(sizeof key);
  if (random >= 0) ::close(random);
  if (!read_all) return origin_error("cannot read /dev/urandom for an origin key");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return llvm::Error::success();  // another process made it first
    return origin_error(path + ": " + std::strerror(errno));
  }
  const std::string text = llvm::toHex(key, /*LowerCase=*/true) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    return origin_error(path + ": cannot write the origin key");
  }
  return llvm::Error::success();
}

}  // namespace

std::string origin_key_path() {
  auto set = [](const char *name) -> const char * {
    const char *value = std::getenv(name);
    return value && *value ? value : nullptr;
  };
  if (const char *path = set("FLASHJIT_ORIGIN_KEY")) return path;
  llvm::SmallString<256> path;
  if (const char *xdg = set("XDG_CONFIG_HOME"); xdg && llvm::sys::path::is_absolute(xdg)) {
    llvm::sys::path::append(path, xdg, "flashjit", "origin.key");
    return std::string(path);
  }
  if (!llvm::sys::path::home_directory(path)) path = ".";
  llvm::sys::path::append(path, ".config", "flashjit", "origin.key");
  return std::string(path);
}

llvm::Expected<std::string> load_origin_key(bool create) {
  const std::string path = origin_key_path();
  if (!llvm::sys::fs::exists(path)) {
    if (!create) return origin_error("no origin key at " + path + " (an export creates one)");
    if (llvm::Error e = create_key(path)) return e;
  }
  return read_key(path);
}

ExportOrigin current_origin(llvm::StringRef database) {
  ExportOrigin origin;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) origin.host = host;
  struct passwd entry, *found = nullptr;
  char buffer[4096];
  origin.user = getpwuid_r(geteuid(), &entry, buffer, sizeof buffer, &found) == 0 && found
                    ? found->pw_name
                    : llvm::formatv("uid {0}", geteuid()).str();
  llvm::SmallString<256> absolute(database);
  if (database != ":memory:") llvm::sys::fs::make_absolute(absolute);
  origin.database = std::string(absolute);
  const std::time_t now = std::time(nullptr);
  std::tm utc;
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  origin.exported_at = text;
  return origin;
}

std::string origin_signature(llvm::StringRef key, const ExportOrigin &origin,
                             llvm::ArrayRef<CubinRecord> cubins) {
  // Each field with its length before it, so that no two different
  // exports sign the same text however their fields are cut.
  std::string message = "flashjit-export-origin-v1";
  auto add = [&](llvm::StringRef field) {
    message += llvm::formatv(" {0}:", field.size()).str();
    message += field;
  };
  for (const std::string *field :
       {&origin.host, &origin.user, &origin.database, &origin.exported_at})
    add(*field);
  add(std::to_string(cubins.size()));
  for (const CubinRecord &c : cubins) {
    add(c.key);
    add(c.kernel_id);
    add(c.arch);
    add(c.nvrtc_version);
    add(llvm::StringRef(c.blob_sha256).lower());
  }
  return "hmac-sha256:" + hmac_sha256_hex(key, message);
}

}  // namespace flashjit
