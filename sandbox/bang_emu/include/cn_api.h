/* cn_api.h: the CNDrv (driver API) header Neuware ships beside cnrt.h; Cambricon's own headers include it (mlu_op.h,
 * mlu-ops core/context.h). The emulator has no driver API: this gives the CNDrv types and status codes host code
 * names, and declarations (no definitions: a program that calls them does not link). */
#ifndef BANG_EMU_CN_API_H_
#define BANG_EMU_CN_API_H_
#include <stdint.h>

typedef enum { CN_SUCCESS = 0, CN_ERROR_INVALID_VALUE = 1, CN_ERROR_NOT_INITIALIZED = 3 } CNresult;
typedef int CNdev;
typedef struct CNcontext_st *CNcontext;
typedef struct CNqueue_st *CNqueue;
typedef struct CNnotifier_st *CNnotifier;
typedef uint64_t CNaddr;
typedef enum {
  CN_KERNEL_CLASS_BLOCK = 1,
  CN_KERNEL_CLASS_UNION = 4,
  CN_KERNEL_CLASS_UNION1 = 4,
  CN_KERNEL_CLASS_UNION2 = 8,
  CN_KERNEL_CLASS_UNION4 = 16,
  CN_KERNEL_CLASS_UNION8 = 32,
  CN_KERNEL_CLASS_UNION16 = 64,
} KernelClass;
typedef KernelClass CNkernelClass;

#ifdef __cplusplus
extern "C" {
#endif
CNresult cnCtxGetCurrent(CNcontext *ctx);
CNresult cnCtxGetDevice(CNdev *dev);
CNresult cnGetCtxMaxParallelUnionTasks(CNcontext ctx, KernelClass kernel_class, int *number);
#ifdef __cplusplus
}
#endif
#endif
