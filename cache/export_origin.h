// Where a database export came from, proven. An export carries an `origin`
// (host, user, database, time) and a signature: HMAC-SHA256, under this
// user's origin key, of the origin and of every cubin's key, kernel id,
// arch, NVRTC version and blob_sha256 (which import checks against the blob
// itself). The key is 32 random bytes in a file only its owner can read;
// an export whose signature checks under it was written by this user's
// flashjit and not changed since, so its cubins need no recompiling to be
// trusted. Any other export (unsigned, another user's or machine's key, an
// edited cubin) is foreign, and `db import` verifies its cubins by
// recompiling them. Tunings are not signed: they are data, validated on
// import and before use.
#pragma once

#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct ExportOrigin {
  std::string host;
  std::string user;
  std::string database;
  std::string exported_at;  // ISO 8601 UTC
  std::string signature;    // "hmac-sha256:<64 hex digits>", or "" when unsigned
};

// $FLASHJIT_ORIGIN_KEY, else $XDG_CONFIG_HOME/flashjit/origin.key, else
// ~/.config/flashjit/origin.key.
std::string origin_key_path();

// The key's bytes. `create`: make it (mode 0600, in a folder made 0700) when
// there is none. An error says why there is no usable key: absent, or
// readable or writable by others than its owner (then it proves nothing),
// or not this user's.
llvm::Expected<std::string> load_origin_key(bool create);

// This process's origin (host, user, `database`, now), unsigned.
ExportOrigin current_origin(llvm::StringRef database);

// The signature of `origin` (its signature field left out) and `cubins`
// under `key`.
std::string origin_signature(llvm::StringRef key, const ExportOrigin &origin,
                             llvm::ArrayRef<CubinRecord> cubins);

}  // namespace flashjit
