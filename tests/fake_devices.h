// Devices as the runtime would describe them, for tests that choose kernels
// without a GPU: an A100 (sm_80, 163 KB of shared memory per block) and an
// H200 (sm_90a, 227 KB).
#pragma once

#include "runtime/device.h"

namespace flashjit::testing {

inline DeviceInfo fake_device(const char *name, int cc_major, int sm_count, int smem_kb) {
  DeviceInfo d;
  d.name = name;
  d.cc_major = cc_major;
  d.cc_minor = 0;
  d.sm_count = sm_count;
  d.max_smem_per_block_optin = smem_kb * 1024;
  d.max_smem_per_sm = (smem_kb + 1) * 1024;
  d.driver_version = 13000;
  return d;
}

inline DeviceInfo fake_a100() { return fake_device("Fake A100", 8, 108, 163); }
inline DeviceInfo fake_h200() { return fake_device("Fake H200", 9, 132, 227); }

}  // namespace flashjit::testing
