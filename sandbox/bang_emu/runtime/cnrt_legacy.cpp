// CNRT <= 4 (MLU100/270 era) launch API: kernel parameter buffers and cnrtInvokeKernel_V2/_V3, plus the host
// fp16 conversions of that generation. A kernel is named by its address; cncc-emu registers every non-template
// kernel of a .mlu with an unpacker that knows its parameter types (device.h `PackedCall`), so the buffer's bytes
// reach the kernel as the declared types and the launch goes through the ordinary emulated path.
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

// the API headers under default visibility, as runtime.h includes them: the runtime may be built with
// -fvisibility=hidden, and these functions are called from student programs
#pragma GCC visibility push(default)
#include "../include/bang_emu/device.h"
#include "../include/bang_emu/external.h"
#pragma GCC visibility pop

struct cnrtKernelParamsBuffer {
  std::vector<std::vector<unsigned char>> params;
};
struct cnrtKernelInitParam {
  int initialised = 0;
};
struct cnrtQuantizedParam {
  int pos;
  float scale, offset;
};

// host casts: read any supported type as double, write with the destination's rounding (fp16 via _Float16)
static bool read_value(const void *src, int type, size_t i, double *v) {
  switch (type) {
    case cnrtFloat: case CNRT_FLOAT32: *v = static_cast<const float *>(src)[i]; return true;
    case cnrtHalf: case CNRT_FLOAT16: *v = (double)static_cast<const _Float16 *>(src)[i]; return true;
    case cnrtDouble: case CNRT_FLOAT64: *v = static_cast<const double *>(src)[i]; return true;
    case cnrtInt: case CNRT_INT32: *v = static_cast<const int32_t *>(src)[i]; return true;
    case cnrtUint: case CNRT_UINT32: *v = static_cast<const uint32_t *>(src)[i]; return true;
    case cnrtShort: case CNRT_INT16: *v = static_cast<const int16_t *>(src)[i]; return true;
    case cnrtUshort: case CNRT_UINT16: *v = static_cast<const uint16_t *>(src)[i]; return true;
    case cnrtChar: case CNRT_INT8: case CNRT_FIX8: *v = static_cast<const int8_t *>(src)[i]; return true;
    case cnrtUchar: case CNRT_UINT8: *v = static_cast<const uint8_t *>(src)[i]; return true;
    case cnrtBoolean: case CNRT_BOOL: *v = static_cast<const uint8_t *>(src)[i] != 0; return true;
    case cnrtLonglong: case CNRT_INT64: *v = (double)static_cast<const int64_t *>(src)[i]; return true;
    case cnrtUlonglong: *v = (double)static_cast<const uint64_t *>(src)[i]; return true;
    default: return false;
  }
}
template <class T>
static T saturate(double v) {
  double lo = (double)std::numeric_limits<T>::lowest(), hi = (double)std::numeric_limits<T>::max();
  v = std::nearbyint(v);
  return (T)(v < lo ? lo : v > hi ? hi : v);
}
static bool write_value(void *dst, int type, size_t i, double v) {
  switch (type) {
    case cnrtFloat: case CNRT_FLOAT32: static_cast<float *>(dst)[i] = (float)v; return true;
    case cnrtHalf: case CNRT_FLOAT16: static_cast<_Float16 *>(dst)[i] = (_Float16)(float)v; return true;
    case cnrtDouble: case CNRT_FLOAT64: static_cast<double *>(dst)[i] = v; return true;
    case cnrtInt: case CNRT_INT32: static_cast<int32_t *>(dst)[i] = saturate<int32_t>(v); return true;
    case cnrtUint: case CNRT_UINT32: static_cast<uint32_t *>(dst)[i] = saturate<uint32_t>(v); return true;
    case cnrtShort: case CNRT_INT16: static_cast<int16_t *>(dst)[i] = saturate<int16_t>(v); return true;
    case cnrtUshort: case CNRT_UINT16: static_cast<uint16_t *>(dst)[i] = saturate<uint16_t>(v); return true;
    case cnrtChar: case CNRT_INT8: case CNRT_FIX8: static_cast<int8_t *>(dst)[i] = saturate<int8_t>(v); return true;
    case cnrtUchar: case CNRT_UINT8: static_cast<uint8_t *>(dst)[i] = saturate<uint8_t>(v); return true;
    case cnrtBoolean: case CNRT_BOOL: static_cast<uint8_t *>(dst)[i] = v != 0; return true;
    case cnrtLonglong: case CNRT_INT64: static_cast<int64_t *>(dst)[i] = saturate<int64_t>(v); return true;
    case cnrtUlonglong: static_cast<uint64_t *>(dst)[i] = saturate<uint64_t>(v); return true;
    default: return false;
  }
}
static cnrtRet_t cast(void *src, int src_type, void *dst, int dst_type, size_t count, cnrtQuantizedParam_t param) {
  if ((!src || !dst) && count) return cnrtErrorArgsInvalid;
  // quantized integer <-> float: real = int * 2^pos / scale ... CNRT's convention is not documented here; the
  // common use (scale 1, pos 0, offset 0) is an exact conversion
  double mul = param ? std::ldexp(1.0, param->pos) / (param->scale ? param->scale : 1.0f) : 1.0;
  double off = param ? param->offset : 0.0;
  bool from_int = src_type != cnrtFloat && src_type != cnrtHalf && src_type != cnrtDouble &&
                  src_type != CNRT_FLOAT32 && src_type != CNRT_FLOAT16 && src_type != CNRT_FLOAT64;
  for (size_t i = 0; i < count; ++i) {
    double v;
    if (!read_value(src, src_type, i, &v)) return cnrtErrorArgsInvalid;
    if (param) v = from_int ? v * mul + off : (v - off) / mul;
    if (!write_value(dst, dst_type, i, v)) return cnrtErrorArgsInvalid;
  }
  return cnrtSuccess;
}

namespace bang_emu {
namespace {
struct KernelEntry {
  PackedInvoker invoker;
  std::string name, file;
  int line;
};
std::mutex &registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const void *, KernelEntry> &registry() {
  static std::unordered_map<const void *, KernelEntry> r;
  return r;
}
}  // namespace

bool register_kernel(const void *fn, PackedInvoker invoker, const char *name, const char *file, int line) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[fn] = KernelEntry{invoker, name ? name : "?", file ? file : "?", line};
  return true;
}

cnrtRet_t packed_args_error(const char *name, int index, size_t given, size_t expected, int count, int expected_count) {
  if (index < 0)
    fprintf(stderr,
            "bang-emu: error: invalid-argument: cnrtInvokeKernel: kernel %s takes %d parameters but the "
            "parameter buffer holds %d (one cnrtKernelParamsBufferAddParam per kernel parameter, in order)\n",
            name, expected_count, count);
  else
    fprintf(stderr,
            "bang-emu: error: invalid-argument: cnrtInvokeKernel: parameter %d of kernel %s is %zu bytes but "
            "cnrtKernelParamsBufferAddParam gave %zu (pass sizeof of the kernel's parameter type)\n",
            index + 1, name, expected, given);
  return cnrtErrorArgsInvalid;
}
}  // namespace bang_emu

using namespace bang_emu;

static cnrtRet_t invoke(const char *api, const void *function, cnrtDim3_t dim, cnrtKernelParamsBuffer_t params,
                        cnrtFunctionType_t func_type, cnrtQueue_t queue) {
  KernelEntry entry;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(function);
    if (it == registry().end()) {
      fprintf(stderr,
              "bang-emu: error: invalid-launch: %s: %p is not a kernel of a .mlu file built by cncc-emu (pass the "
              "address of a non-template __mlu_entry__/__mlu_global__ function)\n",
              api, function);
      return cnrtErrorInvalidLaunch;
    }
    entry = it->second;
  }
  std::vector<const void *> data;
  std::vector<size_t> sizes;
  if (params) {
    for (auto &p : params->params) {
      data.push_back(p.data());
      sizes.push_back(p.size());
    }
  }
  PackedArgs args{(int)data.size(), data.data(), sizes.data()};
  if (!queue) queue = bang_emu_default_queue();
  return entry.invoker(function, entry.name.c_str(), entry.file.c_str(), entry.line, dim, (int)func_type, queue,
                       &args);
}

extern "C" {

cnrtRet_t cnrtGetKernelParamsBuffer(cnrtKernelParamsBuffer_t *params) {
  if (!params) return cnrtErrorArgsInvalid;
  *params = new cnrtKernelParamsBuffer();
  return cnrtSuccess;
}
cnrtRet_t cnrtCopyKernelParamsBuffer(cnrtKernelParamsBuffer_t dst, cnrtKernelParamsBuffer_t src) {
  if (!dst || !src) return cnrtErrorArgsInvalid;
  dst->params = src->params;
  return cnrtSuccess;
}
cnrtRet_t cnrtKernelParamsBufferAddParam(cnrtKernelParamsBuffer_t params, void *data, size_t bytes) {
  if (!params || (!data && bytes)) return cnrtErrorArgsInvalid;
  const unsigned char *b = static_cast<const unsigned char *>(data);
  params->params.emplace_back(b, b + bytes);
  return cnrtSuccess;
}
cnrtRet_t cnrtKernelParamsBufferMarkInput(cnrtKernelParamsBuffer_t params) {
  return params ? cnrtSuccess : cnrtErrorArgsInvalid;
}
cnrtRet_t cnrtKernelParamsBufferMarkOutput(cnrtKernelParamsBuffer_t params) {
  return params ? cnrtSuccess : cnrtErrorArgsInvalid;
}
cnrtRet_t cnrtKernelParamsBufferMarkStatic(cnrtKernelParamsBuffer_t params) {
  return params ? cnrtSuccess : cnrtErrorArgsInvalid;
}
cnrtRet_t cnrtDestroyKernelParamsBuffer(cnrtKernelParamsBuffer_t params) {
  delete params;
  return cnrtSuccess;
}
cnrtRet_t cnrtInvokeKernel_V2(const void *function, cnrtDim3_t dim, cnrtKernelParamsBuffer_t params,
                              cnrtFunctionType_t func_type, cnrtQueue_t queue) {
  return invoke("cnrtInvokeKernel_V2", function, dim, params, func_type, queue);
}
cnrtRet_t cnrtCreateKernelInitParam(cnrtKernelInitParam_t *init_param) {
  if (!init_param) return cnrtErrorArgsInvalid;
  *init_param = new cnrtKernelInitParam();
  return cnrtSuccess;
}
cnrtRet_t cnrtInitKernelMemory(const void *, cnrtKernelInitParam_t init_param) {
  if (!init_param) return cnrtErrorArgsInvalid;
  init_param->initialised = 1;
  return cnrtSuccess;
}
cnrtRet_t cnrtInvokeKernel_V3(const void *function, cnrtKernelInitParam_t, cnrtDim3_t dim,
                              cnrtKernelParamsBuffer_t params, cnrtFunctionType_t func_type, cnrtQueue_t queue,
                              void *) {
  return invoke("cnrtInvokeKernel_V3", function, dim, params, func_type, queue);
}
cnrtRet_t cnrtDestroyKernelInitParamAndMemory(cnrtKernelInitParam_t param) {
  delete param;
  return cnrtSuccess;
}

cnrtRet_t cnrtConvertFloatToHalf(uint16_t *f16, float d) {
  if (!f16) return cnrtErrorArgsInvalid;
  _Float16 h = (_Float16)d;
  std::memcpy(f16, &h, 2);
  return cnrtSuccess;
}
cnrtRet_t cnrtConvertHalfToFloat(float *d, uint16_t f16) {
  if (!d) return cnrtErrorArgsInvalid;
  _Float16 h;
  std::memcpy(&h, &f16, 2);
  *d = (float)h;
  return cnrtSuccess;
}
cnrtRet_t cnrtMallocHost(void **ptr, size_t bytes, cnrtMemType_t) { return cnrtHostMalloc(ptr, bytes); }

cnrtRet_t cnrtMemcpyAsync_V2(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir) {
  return cnrtMemcpyAsync(dst, src, bytes, queue, dir);
}
cnrtRet_t cnrtMemsetD8(void *ptr, uint8_t value, size_t count) { return cnrtMemset(ptr, value, count); }
cnrtRet_t cnrtMemsetD32(void *ptr, uint32_t value, size_t count) {
  std::vector<uint32_t> pattern(count, value);  // through cnrtMemcpy, so the device buffer is checked as usual
  return count ? cnrtMemcpy(ptr, pattern.data(), count * 4, cnrtMemcpyHostToDev) : cnrtSuccess;
}

cnrtRet_t cnrtCreateQuantizedParam(cnrtQuantizedParam_t *param, int pos, float scale, float offset) {
  if (!param) return cnrtErrorArgsInvalid;
  *param = new cnrtQuantizedParam{pos, scale, offset};
  return cnrtSuccess;
}
cnrtRet_t cnrtDestroyQuantizedParam(cnrtQuantizedParam_t param) {
  delete param;
  return cnrtSuccess;
}
cnrtRet_t cnrtCastDataType_V2(void *src, cnrtDataType_V2_t src_type, void *dst, cnrtDataType_V2_t dst_type,
                              size_t count, cnrtQuantizedParam_t param, cnrtRoundingMode_t) {
  return cast(src, src_type, dst, dst_type, count, param);
}
cnrtRet_t cnrtCastDataType(void *src, cnrtDataType_t src_type, void *dst, cnrtDataType_t dst_type, int count,
                           cnrtQuantizedParam_t param) {
  return count < 0 ? cnrtErrorArgsInvalid : cast(src, src_type, dst, dst_type, (size_t)count, param);
}
}
