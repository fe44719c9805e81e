/* CNRT host API, emulated by bang_emu (no MLU needed).
 * Usable from a plain C++ translation unit compiled by g++ (torch bindings) as well as from .mlu files.
 * Both the CNRT >= 5 names (cnrtQueueCreate, cnrtNotifierElapsedTime, ...) and the CNRT <= 4 names
 * (cnrtCreateQueue, cnrtSyncQueue, ...) are declared, as Cambricon's own compatibility shims do. */
#ifndef BANG_EMU_CNRT_H_
#define BANG_EMU_CNRT_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CNRT_MAJOR_VERSION 6
#define CNRT_MINOR_VERSION 0
#define CNRT_PATCH_VERSION 2
#define CNRT_VERSION (CNRT_MAJOR_VERSION * 10000 + CNRT_MINOR_VERSION * 100 + CNRT_PATCH_VERSION)
#define BANG_EMU 1

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  cnrtSuccess = 0,
  cnrtErrorNotReady = 1,
  cnrtErrorInit = 100001,
  cnrtErrorNoDevice = 100002,
  cnrtErrorArgsInvalid = 100006,
  cnrtErrorNoMem = 100100,
  /* The two values below are the emulator's own: a kernel stopped by a check (out-of-bounds access,
   * hazard, deadlock, ...) or refused at launch (bad dim / function type / on-chip overflow). */
  cnrtErrorKernelFault = 100700,
  cnrtErrorInvalidLaunch = 100701,
  cnrtErrorNoKernel = 101312,
  cnrtErrorUnknown = 999991
} cnrtRet_t;
typedef cnrtRet_t cnrtError_t;

#define CNRT_RET_SUCCESS cnrtSuccess
#define CNRT_RET_ERR_INVALID 632007
#define CNRT_RET_ERR_NOMEM 632008
#define CNRT_RET_ERR_NODEV 632009
#define CNRT_RET_ERR_SYS 632011

typedef struct {
  unsigned int x;
  unsigned int y;
  unsigned int z;
} cnrtDim3_t;

typedef enum {
  cnrtFuncTypeBlock = 1,
  cnrtFuncTypeBlock0 = 1,
  cnrtFuncTypeUnion1 = 4,
  cnrtFuncTypeUnion2 = 8,
  cnrtFuncTypeUnion4 = 16,
  cnrtFuncTypeUnion8 = 32,
  cnrtFuncTypeUnion16 = 64,
  cnrtFuncTypeMutable = -1  /* named by mlu-ops' core/runtime/device.h; value assumed; refused at launch */
} cnrtFunctionType_t;

#define CNRT_FUNC_TYPE_BLOCK cnrtFuncTypeBlock
#define CNRT_FUNC_TYPE_BLOCK0 cnrtFuncTypeBlock0
#define CNRT_FUNC_TYPE_UNION1 cnrtFuncTypeUnion1
#define CNRT_FUNC_TYPE_UNION2 cnrtFuncTypeUnion2
#define CNRT_FUNC_TYPE_UNION4 cnrtFuncTypeUnion4
#define CNRT_FUNC_TYPE_UNION8 cnrtFuncTypeUnion8
#define CNRT_FUNC_TYPE_UNION16 cnrtFuncTypeUnion16
#define CNRT_FUNC_TYPE_MUTABLE cnrtFuncTypeMutable

typedef enum {
  cnrtMemcpyHostToDev = 0,
  cnrtMemcpyDevToDev = 1,
  cnrtMemcpyDevToHost = 2,
  cnrtMemcpyHostToHost = 3,
  cnrtMemcpyPeerToPeer = 4,
  cnrtMemcpyNoDirection = 5
} cnrtMemTransDir_t;

#define CNRT_MEM_TRANS_DIR_HOST2DEV cnrtMemcpyHostToDev
#define CNRT_MEM_TRANS_DIR_DEV2DEV cnrtMemcpyDevToDev
#define CNRT_MEM_TRANS_DIR_DEV2HOST cnrtMemcpyDevToHost
#define CNRT_MEM_TRANS_DIR_HOST2HOST cnrtMemcpyHostToHost
#define CNRT_MEM_TRANS_DIR_PEER2PEER cnrtMemcpyPeerToPeer
#define CNRT_MEM_TRANS_DIR_NODIR cnrtMemcpyNoDirection

typedef enum {
  cnrtAttrClusterCount = 0,
  cnrtAttrMcorePerCluster = 1,
  cnrtAttrNramSizePerMcore = 2,
  cnrtAttrWramSizePerMcore = 3,
  cnrtAttrSramSizePerMcore = 4,
  cnrtAttrIpuClockRate = 5,
  cnrtAttrMaxClusterPerUnionLimitTask = 6,
  cnrtAttrGlobalMemoryBusWidth = 7
} cnrtDeviceAttr_t;

typedef struct {
  char name[256];
  int major;
  int minor;
  int clusterCount;
  int McorePerCluster;
  size_t totalMem;
} cnrtDeviceProp_t;

struct cnrtQueue;
typedef struct cnrtQueue *cnrtQueue_t;
struct cnrtNotifier;
typedef struct cnrtNotifier *cnrtNotifier_t;
typedef uint64_t cnrtDev_t;

#define CNRT_NOTIFIER_DEFAULT 0
#define CNRT_NOTIFIER_DISABLE_TIMING 2

/* init / device */
cnrtRet_t cnrtInit(unsigned int flags);
void cnrtDestroy(void);
cnrtRet_t cnrtGetDeviceCount(unsigned int *count);
cnrtRet_t cnrtSetDevice(int ordinal);
cnrtRet_t cnrtGetDevice(int *ordinal);
cnrtRet_t cnrtGetDeviceHandle(cnrtDev_t *dev, int ordinal);
cnrtRet_t cnrtSetCurrentDevice(cnrtDev_t dev);
cnrtRet_t cnrtGetDeviceProperties(cnrtDeviceProp_t *prop, int ordinal);
cnrtRet_t cnrtDeviceGetAttribute(int *value, cnrtDeviceAttr_t attr, int ordinal);
cnrtRet_t cnrtSyncDevice(void);
cnrtRet_t cnrtDeviceReset(void);

/* memory */
cnrtRet_t cnrtMalloc(void **ptr, size_t bytes);
cnrtRet_t cnrtFree(void *ptr);
cnrtRet_t cnrtMemcpy(void *dst, void *src, size_t bytes, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemcpyAsync(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemset(void *ptr, int value, size_t bytes);
cnrtRet_t cnrtMemsetAsync(void *ptr, int value, size_t bytes, cnrtQueue_t queue);
cnrtRet_t cnrtMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cnrtRet_t cnrtHostMalloc(void **ptr, size_t bytes);
cnrtRet_t cnrtFreeHost(void *ptr);

/* queues */
cnrtRet_t cnrtQueueCreate(cnrtQueue_t *queue);
cnrtRet_t cnrtQueueDestroy(cnrtQueue_t queue);
cnrtRet_t cnrtQueueSync(cnrtQueue_t queue);
cnrtRet_t cnrtQueueQuery(cnrtQueue_t queue);
cnrtRet_t cnrtCreateQueue(cnrtQueue_t *queue);
cnrtRet_t cnrtDestroyQueue(cnrtQueue_t queue);
cnrtRet_t cnrtSyncQueue(cnrtQueue_t queue);

/* notifiers: ElapsedTime in ms, Duration in us; both report the modelled device time */
cnrtRet_t cnrtNotifierCreate(cnrtNotifier_t *notifier);
cnrtRet_t cnrtNotifierCreateWithFlags(cnrtNotifier_t *notifier, unsigned int flags);
cnrtRet_t cnrtNotifierDestroy(cnrtNotifier_t notifier);
cnrtRet_t cnrtCreateNotifier(cnrtNotifier_t *notifier);
cnrtRet_t cnrtDestroyNotifier(cnrtNotifier_t *notifier);
cnrtRet_t cnrtPlaceNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue);
cnrtRet_t cnrtWaitNotifier(cnrtNotifier_t notifier);
cnrtRet_t cnrtQueryNotifier(cnrtNotifier_t notifier);
cnrtRet_t cnrtQueueWaitNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue, unsigned int flag);
cnrtRet_t cnrtNotifierElapsedTime(cnrtNotifier_t start, cnrtNotifier_t end, float *ms);
cnrtRet_t cnrtNotifierDuration(cnrtNotifier_t start, cnrtNotifier_t end, float *us);

/* ---- CNRT <= 4 (MLU100/270 era) names, still found in lab code ---- */
typedef enum cnrtDataType {
  CNRT_INVALID = 0x0,
  CNRT_FLOAT16 = 0x12,
  CNRT_FLOAT32 = 0x13,
  CNRT_FLOAT64 = 0x14,
  CNRT_INT8 = 0x21,
  CNRT_INT16 = 0x22,
  CNRT_INT32 = 0x23,
  CNRT_INT64 = 0x24,
  CNRT_UINT8 = 0x31,
  CNRT_UINT16 = 0x32,
  CNRT_UINT32 = 0x33,
  CNRT_FIX8 = 0x41,
  CNRT_BOOL = 0x61
} cnrtDataType_t;
typedef enum { CNRT_MEMTYPE_DEFAULT = 0, CNRT_MEMTYPE_LOCKED, CNRT_MEMTYPE_DEV } cnrtMemType_t;

/* kernel parameter buffer + cnrtInvokeKernel_V2/_V3: only kernels of .mlu files built by cncc-emu can be invoked
 * (cncc-emu registers each non-template kernel with the types of its parameters) */
struct cnrtKernelParamsBuffer;
typedef struct cnrtKernelParamsBuffer *cnrtKernelParamsBuffer_t;
struct cnrtKernelInitParam;
typedef struct cnrtKernelInitParam *cnrtKernelInitParam_t;
cnrtRet_t cnrtGetKernelParamsBuffer(cnrtKernelParamsBuffer_t *params);
cnrtRet_t cnrtCopyKernelParamsBuffer(cnrtKernelParamsBuffer_t dst, cnrtKernelParamsBuffer_t src);
cnrtRet_t cnrtKernelParamsBufferAddParam(cnrtKernelParamsBuffer_t params, void *data, size_t bytes);
cnrtRet_t cnrtKernelParamsBufferMarkInput(cnrtKernelParamsBuffer_t params);
cnrtRet_t cnrtKernelParamsBufferMarkOutput(cnrtKernelParamsBuffer_t params);
cnrtRet_t cnrtKernelParamsBufferMarkStatic(cnrtKernelParamsBuffer_t params);
cnrtRet_t cnrtDestroyKernelParamsBuffer(cnrtKernelParamsBuffer_t params);
cnrtRet_t cnrtInvokeKernel_V2(const void *function, cnrtDim3_t dim, cnrtKernelParamsBuffer_t params,
                              cnrtFunctionType_t func_type, cnrtQueue_t queue);
cnrtRet_t cnrtCreateKernelInitParam(cnrtKernelInitParam_t *init_param);
cnrtRet_t cnrtInitKernelMemory(const void *function, cnrtKernelInitParam_t init_param);
cnrtRet_t cnrtInvokeKernel_V3(const void *function, cnrtKernelInitParam_t init_param, cnrtDim3_t dim,
                              cnrtKernelParamsBuffer_t params, cnrtFunctionType_t func_type, cnrtQueue_t queue,
                              void *extra_param);
cnrtRet_t cnrtDestroyKernelInitParamAndMemory(cnrtKernelInitParam_t param);

/* host-side fp16 conversion (IEEE binary16 in a uint16_t, round to nearest even) */
cnrtRet_t cnrtConvertFloatToHalf(uint16_t *f16, float d);
cnrtRet_t cnrtConvertHalfToFloat(float *d, uint16_t f16);
cnrtRet_t cnrtMallocHost(void **ptr, size_t bytes, cnrtMemType_t type);
/* CNRT 6 spellings */
cnrtRet_t cnrtMemcpyAsync_V2(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemsetD8(void *ptr, uint8_t value, size_t count);
cnrtRet_t cnrtMemsetD32(void *ptr, uint32_t value, size_t count);

/* ---- CNRT >= 5 data types and host-side casts ---- */
typedef enum {
  cnrtInvalid = 0,
  cnrtFloat = 1,
  cnrtHalf = 2,
  cnrtInt = 3,
  cnrtChar = 4,
  cnrtUchar = 5,
  cnrtShort = 6,
  cnrtUshort = 7,
  cnrtUint = 8,
  cnrtBoolean = 9,
  cnrtDouble = 10,
  cnrtLonglong = 11,
  cnrtUlonglong = 12,
  cnrtBfloat = 13
} cnrtDataType_V2_t;
typedef enum {
  cnrtRounding_rn = 0, /* nearest, ties to even */
  cnrtRounding_rz = 1, /* toward zero */
  cnrtRounding_rd = 2, /* down */
  cnrtRounding_ru = 3, /* up */
  cnrtRounding_rm = 4, /* the CNRT default ("math" rounding); emulated as nearest-even */
  cnrtRounding_ro = 5
} cnrtRoundingMode_t;
struct cnrtQuantizedParam;
typedef struct cnrtQuantizedParam *cnrtQuantizedParam_t;
cnrtRet_t cnrtCreateQuantizedParam(cnrtQuantizedParam_t *param, int pos, float scale, float offset);
cnrtRet_t cnrtDestroyQuantizedParam(cnrtQuantizedParam_t param);
/* element-wise conversion of `count` values (float/half/int types; quantized params: scale * 2^pos + offset) */
cnrtRet_t cnrtCastDataType_V2(void *src, cnrtDataType_V2_t src_type, void *dst, cnrtDataType_V2_t dst_type,
                              size_t count, cnrtQuantizedParam_t param, cnrtRoundingMode_t mode);
cnrtRet_t cnrtCastDataType(void *src, cnrtDataType_t src_type, void *dst, cnrtDataType_t dst_type, int count,
                           cnrtQuantizedParam_t param);

/* errors */
const char *cnrtGetErrorStr(cnrtRet_t err);
const char *cnrtGetErrorName(cnrtRet_t err);
cnrtRet_t cnrtGetLastError(void);
cnrtRet_t cnrtPeekAtLastError(void);
cnrtRet_t cnrtGetLastErr(void);

#ifdef __cplusplus
}
#endif

#define CNRT_CHECK(val)                                                                        \
  do {                                                                                         \
    cnrtRet_t __bang_emu_ret = (cnrtRet_t)(val);                                               \
    if (__bang_emu_ret != cnrtSuccess) {                                                       \
      fprintf(stderr, "[%s:%d] CNRT error, code=%d(%s) \"%s\"\n", __FILE__, __LINE__,          \
              (int)__bang_emu_ret, cnrtGetErrorStr(__bang_emu_ret), #val);                     \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

#endif /* BANG_EMU_CNRT_H_ */
