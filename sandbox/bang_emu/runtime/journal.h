// The device journal's records (journal.cpp writes them, replay.cpp reads them).
#pragma once
#include <cstdint>
#include <string>

#include "runtime.h"

namespace bang_emu {

enum class JournalKind : uint8_t {
  kAlloc = 1,       // u64 map_base, u64 map_len, u64 lo, u64 bytes, u8 storage, str label
  kFree = 2,        // u64 lo, u8 storage
  kWrite = 3,       // u64 dst, u64 n, n bytes: host code wrote them into device memory
  kCopy = 4,        // u64 dst, u64 src, u64 elem, u32 ndim, u64 sizes[ndim], dst strides, src strides
  kMemset = 5,      // u64 dst, u32 value, u64 n
  kRegister = 6,    // u64 p, u64 n, str label
  kUnregister = 7,  // u64 p, u64 n, str label
  kLaunch = 8,      // str key ("" = not replayable), str kernel, str file, u32 line, u32 dim x y z, u32 type,
                    // u64 n, n argument bytes
  kMark = 9,        // u8 mark, u32 index, u64 p, u64 n, str text
  kOverflow = 10,   // the journal reached its cap; nothing after it was kept
  kOpBegin = 11,    // str op ("aten::cat" or "aten::add.Tensor"), str where (the student's file:line, a claim),
                    // str args (JSON: the schema's arguments, tensors as [ptr, dtype, sizes, strides])
  kOpEnd = 12,      // str outs (JSON: {"outs": [{"arg"|"ret": i, "t": tensor}...]} or {"failed": true})
};
// kHostWhere: the student's line of the host-to-device upload that follows (the shim's; shown, never believed)
enum class JournalMark : uint8_t { kCall = 1, kInput = 2, kOutput = 3, kHostWhere = 4 };

// Beyond this a journal stops (a kOverflow record) and its replay fails with a message that says so.
constexpr uint64_t kJournalMaxBytes = 1ull << 30;

void put_u32(std::string &s, uint32_t v);
void put_u64(std::string &s, uint64_t v);
void put_str(std::string &s, const std::string &v);

void journal_alloc(const GdramBuf *b);
void journal_free(uintptr_t lo, bool storage);
void journal_host_write(const void *dst, size_t n);  // call after the bytes are in place
void journal_copy(const void *dst, const void *src, size_t elem, int ndim, const int64_t *sizes,
                  const int64_t *dstr, const int64_t *sstr);
void journal_memset(const void *dst, int value, size_t n);
void journal_register(const void *p, size_t n, const std::string &label, bool add);
// A torch operator on device tensors (the torch_mlu shim): its device writes are not journaled as bytes, the
// replay runs the operator itself on its own data (replay_ops.py). Nested operators are part of the outer one.
bool journal_in_op();
void journal_mark(JournalMark what, uint32_t index, uintptr_t ptr, uint64_t n, const std::string &text);

}  // namespace bang_emu
