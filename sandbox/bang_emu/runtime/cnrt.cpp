// Host CNRT API (new and legacy names) on top of the emulated device.
#include <cstring>
#include <mutex>

#include "runtime.h"

namespace bang_emu {

static std::atomic<int> g_last_error{cnrtSuccess};
void set_last_error(cnrtRet_t e) { g_last_error.store(e); }
cnrtRet_t last_error(bool clear) {
  cnrtRet_t e = static_cast<cnrtRet_t>(g_last_error.load());
  if (clear) g_last_error.store(cnrtSuccess);
  return e;
}

cnrtQueue_t default_queue_impl() {
  static cnrtQueue q;
  return &q;
}

static cnrtRet_t fail(cnrtRet_t e) {
  set_last_error(e);
  return e;
}

}  // namespace bang_emu

using namespace bang_emu;

extern "C" {

cnrtQueue_t bang_emu_default_queue(void) { return default_queue_impl(); }

cnrtRet_t cnrtInit(unsigned int) { return cnrtSuccess; }
void cnrtDestroy(void) {}
cnrtRet_t cnrtGetDeviceCount(unsigned int *count) {
  if (!count) return fail(cnrtErrorArgsInvalid);
  *count = 1;
  return cnrtSuccess;
}
cnrtRet_t cnrtSetDevice(int ordinal) { return ordinal == 0 ? cnrtSuccess : fail(cnrtErrorNoDevice); }
cnrtRet_t cnrtGetDevice(int *ordinal) {
  if (!ordinal) return fail(cnrtErrorArgsInvalid);
  *ordinal = 0;
  return cnrtSuccess;
}
cnrtRet_t cnrtGetDeviceHandle(cnrtDev_t *dev, int ordinal) {
  if (!dev || ordinal != 0) return fail(cnrtErrorArgsInvalid);
  *dev = 0;
  return cnrtSuccess;
}
cnrtRet_t cnrtSetCurrentDevice(cnrtDev_t) { return cnrtSuccess; }
cnrtRet_t cnrtGetDeviceProperties(cnrtDeviceProp_t *prop, int ordinal) {
  if (!prop || ordinal != 0) return fail(cnrtErrorArgsInvalid);
  const Profile &P = profile();
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "%s (bang_emu, modelled)", P.name.c_str());
  prop->major = P.arch / 100;
  prop->minor = (P.arch / 10) % 10;
  prop->clusterCount = P.clusters;
  prop->McorePerCluster = P.cores_per_cluster;
  prop->totalMem = 16ull << 30;
  return cnrtSuccess;
}
cnrtRet_t cnrtDeviceGetAttribute(int *value, cnrtDeviceAttr_t attr, int ordinal) {
  if (!value || ordinal != 0) return fail(cnrtErrorArgsInvalid);
  const Profile &P = profile();
  switch (attr) {
    case cnrtAttrClusterCount: *value = P.clusters; break;
    case cnrtAttrMcorePerCluster: *value = P.cores_per_cluster; break;
    case cnrtAttrNramSizePerMcore: *value = (int)P.nram; break;
    case cnrtAttrWramSizePerMcore: *value = (int)P.wram; break;
    case cnrtAttrSramSizePerMcore: *value = (int)P.sram; break;
    case cnrtAttrIpuClockRate: *value = (int)(P.clock_mhz * 1000); break;
    case cnrtAttrMaxClusterPerUnionLimitTask: *value = P.clusters; break;
    case cnrtAttrGlobalMemoryBusWidth: *value = 384; break;
    default: return fail(cnrtErrorArgsInvalid);
  }
  return cnrtSuccess;
}
cnrtRet_t cnrtSyncDevice(void) { return cnrtQueueSync(nullptr); }
cnrtRet_t cnrtDeviceReset(void) { return cnrtSuccess; }

cnrtRet_t cnrtMalloc(void **ptr, size_t bytes) {
  if (!ptr) return fail(cnrtErrorArgsInvalid);
  *ptr = gdram_alloc(bytes, __builtin_return_address(0));
  return *ptr ? cnrtSuccess : fail(cnrtErrorNoMem);
}
cnrtRet_t cnrtFree(void *ptr) {
  if (!ptr) return cnrtSuccess;
  return gdram_free(ptr) ? cnrtSuccess : fail(cnrtErrorArgsInvalid);
}
cnrtRet_t cnrtMemcpy(void *dst, void *src, size_t bytes, cnrtMemTransDir_t dir) {
  if (bytes == 0) return cnrtSuccess;
  if (!dst || !src) return fail(cnrtErrorArgsInvalid);
  bool ok = true;
  switch (dir) {
    case cnrtMemcpyHostToDev: ok = is_device_ptr(dst, bytes); break;
    case cnrtMemcpyDevToHost: ok = is_device_ptr(src, bytes); break;
    case cnrtMemcpyDevToDev:
    case cnrtMemcpyPeerToPeer: ok = is_device_ptr(dst, bytes) && is_device_ptr(src, bytes); break;
    default: break;
  }
  if (!ok) {
    fprintf(stderr,
            "bang-emu: error: invalid-memcpy: cnrtMemcpy of %zu B with direction %d: the device side is not "
            "(entirely) inside a cnrtMalloc'd buffer\n",
            bytes, (int)dir);
    return fail(cnrtErrorArgsInvalid);
  }
  // device memory is closed to host code: the runtime copies (and keeps the provenance marks right)
  const int64_t n = (int64_t)bytes, one = 1;
  copy_strided(dst, src, 1, 1, &n, &one, &one);
  return cnrtSuccess;
}
cnrtRet_t cnrtMemcpyAsync(void *dst, void *src, size_t bytes, cnrtQueue_t, cnrtMemTransDir_t dir) {
  return cnrtMemcpy(dst, src, bytes, dir);
}
cnrtRet_t cnrtMemset(void *ptr, int value, size_t bytes) {
  if (!is_device_ptr(ptr, bytes)) return fail(cnrtErrorArgsInvalid);
  memset_device(ptr, value, bytes);
  return cnrtSuccess;
}
cnrtRet_t cnrtMemsetAsync(void *ptr, int value, size_t bytes, cnrtQueue_t) { return cnrtMemset(ptr, value, bytes); }
cnrtRet_t cnrtMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  size_t total = 16ull << 30, used = gdram_bytes_in_use();
  if (free_bytes) *free_bytes = used < total ? total - used : 0;
  if (total_bytes) *total_bytes = total;
  return cnrtSuccess;
}
cnrtRet_t cnrtHostMalloc(void **ptr, size_t bytes) {
  if (!ptr) return fail(cnrtErrorArgsInvalid);
  *ptr = malloc(bytes);
  return *ptr ? cnrtSuccess : fail(cnrtErrorNoMem);
}
cnrtRet_t cnrtFreeHost(void *ptr) {
  free(ptr);
  return cnrtSuccess;
}

cnrtRet_t cnrtQueueCreate(cnrtQueue_t *queue) {
  if (!queue) return fail(cnrtErrorArgsInvalid);
  *queue = new cnrtQueue();
  return cnrtSuccess;
}
cnrtRet_t cnrtQueueDestroy(cnrtQueue_t queue) {
  if (queue && queue != default_queue_impl()) delete queue;
  return cnrtSuccess;
}
// Launches run to completion when issued, so a sync only reports (and clears) the queue's error.
cnrtRet_t cnrtQueueSync(cnrtQueue_t queue) {
  if (!queue) queue = default_queue_impl();
  cnrtRet_t e = queue->error;
  queue->error = cnrtSuccess;
  return e == cnrtSuccess ? cnrtSuccess : fail(e);
}
cnrtRet_t cnrtQueueQuery(cnrtQueue_t queue) {
  if (!queue) queue = default_queue_impl();
  return queue->error;
}
cnrtRet_t cnrtCreateQueue(cnrtQueue_t *queue) { return cnrtQueueCreate(queue); }
cnrtRet_t cnrtDestroyQueue(cnrtQueue_t queue) { return cnrtQueueDestroy(queue); }
cnrtRet_t cnrtSyncQueue(cnrtQueue_t queue) { return cnrtQueueSync(queue); }

cnrtRet_t cnrtNotifierCreate(cnrtNotifier_t *n) {
  if (!n) return fail(cnrtErrorArgsInvalid);
  *n = new cnrtNotifier();
  return cnrtSuccess;
}
cnrtRet_t cnrtNotifierCreateWithFlags(cnrtNotifier_t *n, unsigned int) { return cnrtNotifierCreate(n); }
cnrtRet_t cnrtNotifierDestroy(cnrtNotifier_t n) {
  delete n;
  return cnrtSuccess;
}
cnrtRet_t cnrtCreateNotifier(cnrtNotifier_t *n) { return cnrtNotifierCreate(n); }
cnrtRet_t cnrtDestroyNotifier(cnrtNotifier_t *n) {
  if (!n) return fail(cnrtErrorArgsInvalid);
  delete *n;
  *n = nullptr;
  return cnrtSuccess;
}
cnrtRet_t cnrtPlaceNotifier(cnrtNotifier_t n, cnrtQueue_t queue) {
  if (!n) return fail(cnrtErrorArgsInvalid);
  if (!queue) queue = default_queue_impl();
  n->time_us = queue->clock_us;
  return cnrtSuccess;
}
cnrtRet_t cnrtWaitNotifier(cnrtNotifier_t n) { return n ? cnrtSuccess : fail(cnrtErrorArgsInvalid); }
cnrtRet_t cnrtQueryNotifier(cnrtNotifier_t n) { return n ? cnrtSuccess : fail(cnrtErrorArgsInvalid); }
cnrtRet_t cnrtQueueWaitNotifier(cnrtNotifier_t n, cnrtQueue_t, unsigned int) {
  return n ? cnrtSuccess : fail(cnrtErrorArgsInvalid);
}
// Both report the modelled device time between the notifiers (see the trace for the device profile).
cnrtRet_t cnrtNotifierElapsedTime(cnrtNotifier_t start, cnrtNotifier_t end, float *ms) {
  if (!start || !end || !ms || start->time_us < 0 || end->time_us < 0) return fail(cnrtErrorArgsInvalid);
  *ms = (float)((end->time_us - start->time_us) / 1000.0);
  return cnrtSuccess;
}
cnrtRet_t cnrtNotifierDuration(cnrtNotifier_t start, cnrtNotifier_t end, float *us) {
  if (!start || !end || !us || start->time_us < 0 || end->time_us < 0) return fail(cnrtErrorArgsInvalid);
  *us = (float)(end->time_us - start->time_us);
  return cnrtSuccess;
}

const char *cnrtGetErrorStr(cnrtRet_t err) {
  switch (err) {
    case cnrtSuccess: return "success";
    case cnrtErrorNotReady: return "not ready";
    case cnrtErrorArgsInvalid: return "invalid argument";
    case cnrtErrorNoMem: return "out of memory";
    case cnrtErrorNoDevice: return "no such device";
    case cnrtErrorKernelFault: return "kernel stopped by a bang-emu check (see the bang-emu: error line above)";
    case cnrtErrorInvalidLaunch: return "invalid kernel launch configuration";
    case cnrtErrorNoKernel: return "no kernel";
    default: return "unknown error";
  }
}
const char *cnrtGetErrorName(cnrtRet_t err) {
  switch (err) {
    case cnrtSuccess: return "cnrtSuccess";
    case cnrtErrorNotReady: return "cnrtErrorNotReady";
    case cnrtErrorArgsInvalid: return "cnrtErrorArgsInvalid";
    case cnrtErrorNoMem: return "cnrtErrorNoMem";
    case cnrtErrorNoDevice: return "cnrtErrorNoDevice";
    case cnrtErrorKernelFault: return "cnrtErrorKernelFault";
    case cnrtErrorInvalidLaunch: return "cnrtErrorInvalidLaunch";
    case cnrtErrorNoKernel: return "cnrtErrorNoKernel";
    default: return "cnrtErrorUnknown";
  }
}
cnrtRet_t cnrtGetLastError(void) { return last_error(true); }
cnrtRet_t cnrtPeekAtLastError(void) { return last_error(false); }
cnrtRet_t cnrtGetLastErr(void) { return last_error(true); }

}  // extern "C"
