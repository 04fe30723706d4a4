// A stand-in libcuda.so.1 for measuring flashjit's host code on a machine
// with no GPU (bench/host_overhead.cpp): every entry point flashjit resolves
// (runtime/cuda_driver_functions.def) succeeds at once, describing one
// H200-like device (sm_90, 132 SMs, 227 KB of shared memory a block), and
// counts its calls, which the harness reads through stub_call_counts(). It
// launches nothing. Built only with the tests; never installed.
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

enum Counter { kLaunch, kPointerQuery, kTensorMap, kContextQuery, kPoolAlloc, kCounters };
std::atomic<uint64_t> g_calls[kCounters];
std::atomic<uintptr_t> g_next_handle{0x1000};

template <class T>
T fresh_handle() {
  return reinterpret_cast<T>(g_next_handle.fetch_add(0x100));
}

CUcontext g_context = reinterpret_cast<CUcontext>(0x77000);
thread_local CUcontext t_current = nullptr;

}  // namespace

extern "C" {

// [launches, pointer queries, tensor-map encodes, context queries, pool allocations]
__attribute__((visibility("default"))) void stub_call_counts(uint64_t out[5]) {
  for (int i = 0; i < kCounters; ++i) out[i] = g_calls[i].load();
}

CUresult cuGetErrorName(CUresult, const char **s) { *s = "STUB_ERROR"; return CUDA_SUCCESS; }
CUresult cuGetErrorString(CUresult, const char **s) { *s = "stub driver"; return CUDA_SUCCESS; }
CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
// NVRTC looks the driver up too (it dlopens libcuda.so.1, which is then this
// stub) and asks for its private tables; it carries on without them.
CUresult cuGetExportTable(const void **table, const CUuuid *) {
  *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGetName(char *name, int len, CUdevice) {
  std::strncpy(name, "stub H200 (no GPU)", static_cast<size_t>(len));
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    default: *v = 1; break;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t *bytes, CUdevice) { *bytes = size_t(141) << 30; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice) { *c = g_context; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *c) {
  g_calls[kContextQuery]++;
  *c = t_current;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext c) { t_current = c; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule *m, const void *) { *m = fresh_handle<CUmodule>(); return CUDA_SUCCESS; }
CUresult cuModuleUnload(CUmodule) { return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule, const char *) {
  *f = fresh_handle<CUfunction>();
  return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction) {
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 128; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void **, void **) {
  g_calls[kLaunch]++;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **) {
  g_calls[kLaunch]++;
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction, int, size_t) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  *p = reinterpret_cast<CUdeviceptr>(std::aligned_alloc(256, (bytes + 255) / 256 * 256));
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFree(CUdeviceptr p) { std::free(reinterpret_cast<void *>(p)); return CUDA_SUCCESS; }
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *) {
  *pool = fresh_handle<CUmemoryPool>();
  return CUDA_SUCCESS;
}
CUresult cuMemPoolSetAttribute(CUmemoryPool, CUmemPool_attribute, void *) { return CUDA_SUCCESS; }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t, CUmemoryPool, CUstream) {
  g_calls[kPoolAlloc]++;
  *p = 0x40000000;
  return CUDA_SUCCESS;
}
CUresult cuMemFreeAsync(CUdeviceptr, CUstream) { return CUDA_SUCCESS; }
CUresult cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream) { return CUDA_SUCCESS; }
CUresult cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream) { return CUDA_SUCCESS; }
CUresult cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) {
  std::memcpy(reinterpret_cast<void *>(d), s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) {
  std::memcpy(d, reinterpret_cast<const void *>(s), n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  std::memset(reinterpret_cast<void *>(d), v, n);
  return CUDA_SUCCESS;
}
CUresult cuMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = size_t(140) << 30;
  *total = size_t(141) << 30;
  return CUDA_SUCCESS;
}
CUresult cuPointerGetAttribute(void *out, CUpointer_attribute, CUdeviceptr p) {
  g_calls[kPointerQuery]++;
  *static_cast<CUdeviceptr *>(out) = p;
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream *s, unsigned) { *s = fresh_handle<CUstream>(); return CUDA_SUCCESS; }
CUresult cuStreamDestroy(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus *status) {
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent *e, unsigned) { *e = fresh_handle<CUevent>(); return CUDA_SUCCESS; }
CUresult cuEventDestroy(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime(float *ms, CUevent, CUevent) { *ms = 0.f; return CUDA_SUCCESS; }
CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType, cuuint32_t, void *,
                                const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  g_calls[kTensorMap]++;
  std::memset(map, 0, sizeof(*map));
  return CUDA_SUCCESS;
}

}  // extern "C"
