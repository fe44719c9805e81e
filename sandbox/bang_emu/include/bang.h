/* bang.h as cncc provides it: the BANG C device API plus CNRT (emulated by bang_emu).
 * Like cncc (whose forced __clang_bang_runtime_wrapper.h includes <math.h>, <stdlib.h> and <stdio.h> before
 * bang.h), host and device code see the C math library, malloc/rand and printf without including them. */
#ifndef BANG_EMU_BANG_H_
#define BANG_EMU_BANG_H_
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __cplusplus
#include <cmath>
#endif
#include "cnrt.h"
#include "bang_emu/device.h"
#endif
