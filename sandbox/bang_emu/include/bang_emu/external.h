/* Stable C entry points of the bang_emu runtime for the torch_mlu emulation (plain g++ translation units).
 * Keep these signatures stable: sandbox/bang_emu/torch_mlu_emu builds on them. */
#ifndef BANG_EMU_EXTERNAL_H_
#define BANG_EMU_EXTERNAL_H_

#include <stddef.h>

#include "../cnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Make external memory (e.g. a tensor's storage) a checked GDRAM buffer: kernels may then read/write it,
 * out-of-bounds accesses next to it are reported, and the trace accounts its written bytes under `label`.
 * Re-registering the same range is a no-op. */
void bang_emu_register_gdram(void *p, size_t bytes, const char *label);
void bang_emu_unregister_gdram(void *p);
/* The queue used when none is given (torch_mlu's current stream). */
cnrtQueue_t bang_emu_default_queue(void);

#ifdef __cplusplus
}
#endif

#endif /* BANG_EMU_EXTERNAL_H_ */
