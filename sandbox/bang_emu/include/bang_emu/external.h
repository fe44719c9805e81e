/* Stable C entry points of the bang_emu runtime for the torch_mlu emulation and the grading harness (plain
 * g++ translation units). Keep these signatures stable: sandbox/bang_emu/torch_mlu_emu and
 * sandbox/bang_harness build on them (DESIGN.md "Threat model: what the host believes"). */
#ifndef BANG_EMU_EXTERNAL_H_
#define BANG_EMU_EXTERNAL_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "../cnrt.h"

/* Exit status of a process whose host code dereferenced device memory (after the
 * "bang-emu: error: host-access: ..." line on stderr). */
#define BANG_EMU_EXIT_HOST_ACCESS 86

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

/* ---- the signed trace (harness) ----
 * Starts call `call_id`: later trace records are appended to `trace_path` (never truncated), signed with
 * key_call = HMAC-SHA256(master key, "bang-emu-call:" + call_id), numbered from seq 0; the provenance marks
 * of every device buffer are cleared. Returns 0, or -1 if the file cannot be opened for appending. */
int bang_emu_begin_call(const char *call_id, const char *trace_path);
/* Appends the call's `output` record for [ptr, ptr + nbytes): its size, how many of its bytes kernel code
 * wrote during this call, and its SHA-256. Returns 0, or -1 if the range is not inside one device buffer. */
int bang_emu_seal_output(const void *ptr, size_t nbytes);

/* ---- device memory for the torch emulation ----
 * Device memory like cnrtMalloc's (64-byte aligned, guard zones, poisoned per BANG_EMU_POISON, inaccessible
 * to host code outside launches and documented copies), found by kernels even when never registered. */
void *bang_emu_device_alloc(size_t bytes, const char *label);
void bang_emu_device_free(void *p);
/* Elementwise copy dst[i] = src[i] over an n-d index space (strides in elements, ndim <= 16); either side may
 * be host or device memory. Device destinations inherit the provenance marks of device sources (D2D) and
 * lose them for host sources (H2D). Returns 0, or -1 on bad arguments. */
int bang_emu_copy_strided(void *dst, const void *src, size_t elem_size, int ndim, const int64_t *sizes,
                          const int64_t *dst_strides, const int64_t *src_strides);
/* A window for a documented host-side operation on device memory (a dtype-converting copy, a fill):
 * [p, p + bytes) becomes readable (and writable if `write`, which also clears its provenance marks: host code
 * wrote it) until the matching end call. Memory that is not device memory is left alone. */
void bang_emu_host_access_begin(const void *p, size_t bytes, int write);
void bang_emu_host_access_end(const void *p, size_t bytes, int write);
/* 1 when [p, p + bytes) lies inside one device buffer's bytes, else 0. */
int bang_emu_is_device_range(const void *p, size_t bytes);

/* ---- the device journal and its replay (trusted replay; DESIGN.md "Threat model") ----
 * A grading worker opens a journal before any student code loads (0 = ok): from then on every change to device
 * memory and every launch is appended; bang_emu_begin_call and bang_emu_seal_output mark calls and outputs.
 * The harness marks each input it uploads (what = 2, index = the input's position). */
int bang_emu_journal_open(const char *path);
int bang_emu_journal_mark(int what, unsigned index, const void *ptr, size_t n, const char *text);
void bang_emu_journal_close(void);
/* A torch operator on device tensors (the torch_mlu shim's CPU fallback, a converting copy): `op` is its schema
 * name ("aten::cat", "aten::add.Tensor"), `where` the student's line that called it (shown, never believed),
 * `args_json` its arguments (tensors as [address, dtype, sizes, strides]). Until the matching end, host writes of
 * this thread into device memory are not journaled: the replay runs the operator itself on its own data.
 * `outs_json` names the tensors it wrote ({"outs": [...]}, or {"failed": true}). Returns 0 when journaled, 1
 * when nested inside another operator (or no journal is open); call the end either way. */
int bang_emu_journal_op_begin(const char *op, const char *where, const char *args_json);
/* 1 when an operator begun now would be journaled (a journal is open, this thread is inside no operator): the shim
 * describes its operands and finds the student's line only then. */
int bang_emu_journal_op_wanted(void);
void bang_emu_journal_op_end(const char *outs_json);
/* In a clean process: replays a journal against a device module (device_module.py; its launch-site records at
 * `site_offsets`, device_module.site_records), the fresh input `<inputs_dir>/<call>.<k>.bin` in place of each
 * marked input, kernels confined; writes per call `<call>.trace.jsonl` (signed with this process's key),
 * `<call>.out.bin` and `<call>.replay.json`. 0 = the journal was read to its end; else -1 and `message` says
 * why. */
int bang_emu_replay(const char *journal, const char *device_module, const uint64_t *site_offsets,
                    size_t site_count, const char *inputs_dir, const char *outputs_dir, char *message,
                    size_t message_len);
/* The replay harness's runner of torch operators journaled by the shim (bang_harness/replay_ops.py); see
 * replay.cpp for its contract. */
void bang_emu_replay_set_op_handler(int (*handler)(int phase, const char *payload, size_t n, char *result,
                                                   size_t result_len));
/* Where the device module's stubs for calls outside the builtins land: a kernel error (device_module.py). */
void bang_emu_forbidden_call(const char *name);
/* A kernel's printf in the device module: the host's vprintf, refusing %n (it stores through an argument). */
int bang_emu_device_vprintf(const char *format, va_list args);

#ifdef __cplusplus
}
#endif

#endif /* BANG_EMU_EXTERNAL_H_ */
