#include "runtime/runtime_counters.h"

namespace flashjit {

RuntimeCounters &runtime_counters() {
  // Leaked: launches from other statics' destructors may still count.
  static RuntimeCounters *counters = new RuntimeCounters;
  return *counters;
}

}  // namespace flashjit
