// bang_emu: torch_mlu's error-check macros. A check that fires in the emulator makes cnrtGetLastError /
// cnrtQueueSync return an error, so these turn an emulated kernel fault into a Python RuntimeError.
#pragma once

#include <c10/util/Exception.h>

#include "cnrt.h"

#define TORCH_CNRT_CHECK(EXPR)                                                                        \
  do {                                                                                                \
    const cnrtRet_t __bang_emu_status = (EXPR);                                                       \
    TORCH_CHECK(__bang_emu_status == cnrtSuccess, "CNRT error: ", cnrtGetErrorStr(__bang_emu_status), \
                " (", #EXPR, "); bang_emu: see the 'bang-emu: error:' lines on stderr");              \
  } while (0)

#define TORCH_BANGC_KERNEL_LAUNCH_CHECK() TORCH_CNRT_CHECK(cnrtGetLastError())

#ifndef TORCH_MLU_CHECK
#define TORCH_MLU_CHECK(...) TORCH_CHECK(__VA_ARGS__)
#endif
