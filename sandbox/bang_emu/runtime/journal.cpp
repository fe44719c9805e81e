// The device journal: what a grading run did to the emulated device, for trusted replay (DESIGN.md "Threat
// model").
//
// A worker process that runs student code opens a journal (bang_emu_journal_open) before any student code is
// loaded. From then on every operation that changes device memory is appended: allocations and frees (at fixed
// addresses: gdram.cpp places device buffers in one region, so the replay can put them at the same place and
// pointers inside kernel arguments stay valid), bytes host code wrote (H2D copies, fills, host-side windows),
// device-to-device copies, memsets, and each launch with its site key and argument bytes. The harness adds
// marks: a call begins, input k of the call lives in [p, p + n), the call's output lives in [p, p + n).
//
// The journal is the student's claim, never trusted as such: a clean process replays it (replay.cpp) with the
// host's *fresh* inputs in place of each marked input, kernels confined, and the host grades the replay's
// output, work and time. A journal that lies can only make the replay compute something else.
//
// Format: "BEJ1", then records {u8 kind, u32 payload bytes, payload}, little-endian, sizes as u64.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "journal.h"
#include "runtime.h"

namespace bang_emu {

namespace {
std::mutex g_journal_mu;
int g_journal_fd = -1;
uint64_t g_journal_bytes = 0;
bool g_journal_full = false;
// Host writes held back until the next record of another kind: the ones the harness then marks as a call's
// inputs are dropped (the replay writes the twin's input there instead), so the journal does not carry every
// uploaded input. Held up to kPendingMaxBytes; older ones are written out beyond that.
struct PendingWrite {
  uint64_t dst, n;
  std::string record;
  bool write;  // else a mark, held to keep its place among the writes
};
std::vector<PendingWrite> g_pending;
uint64_t g_pending_bytes = 0;
constexpr uint64_t kPendingMaxBytes = 256ull << 20;

void raw_write(const std::string &bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = write(g_journal_fd, bytes.data() + off, bytes.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      g_journal_full = true;  // the disk budget ran out: the replay sees a truncated journal and says so
      return;
    }
    off += (size_t)w;
  }
  g_journal_bytes += bytes.size();
}

void flush_pending_locked() {
  for (PendingWrite &w : g_pending) raw_write(w.record);
  g_pending.clear();
  g_pending_bytes = 0;
}

std::string record(JournalKind kind, const std::string &payload) {
  std::string r;
  r.push_back((char)kind);
  put_u32(r, (uint32_t)payload.size());
  return r + payload;
}

void append_locked(JournalKind kind, const std::string &payload) {
  flush_pending_locked();
  if (g_journal_full) return;
  if (g_journal_bytes + payload.size() + 5 > kJournalMaxBytes) {
    g_journal_full = true;
    raw_write(record(JournalKind::kOverflow, ""));
    return;
  }
  raw_write(record(kind, payload));
}
}  // namespace

void put_u32(std::string &s, uint32_t v) { s.append(reinterpret_cast<const char *>(&v), 4); }
void put_u64(std::string &s, uint64_t v) { s.append(reinterpret_cast<const char *>(&v), 8); }
void put_str(std::string &s, const std::string &v) {
  put_u32(s, (uint32_t)v.size());
  s += v;
}

bool journal_active() { return g_journal_fd >= 0; }

// Depth of torch operators this thread is inside (bang_emu_journal_op_begin/end): their host-side writes into
// device memory (the CPU fallback's copy-back) are the operator's result, which the replay recomputes.
thread_local int t_op_depth = 0;
bool journal_in_op() { return t_op_depth > 0; }

void journal_alloc(const GdramBuf *b) {
  if (!journal_active()) return;
  std::string p;
  put_u64(p, b->map_base);
  put_u64(p, b->map_len);
  put_u64(p, b->lo);
  put_u64(p, b->hi - b->lo);
  p.push_back(b->storage ? 1 : 0);
  put_str(p, b->label);
  std::lock_guard<std::mutex> lk(g_journal_mu);
  append_locked(JournalKind::kAlloc, p);
}

void journal_free(uintptr_t lo, bool storage) {
  if (!journal_active()) return;
  std::string p;
  put_u64(p, lo);
  p.push_back(storage ? 1 : 0);
  std::lock_guard<std::mutex> lk(g_journal_mu);
  append_locked(JournalKind::kFree, p);
}

void journal_host_write(const void *dst, size_t n) {
  if (!journal_active() || n == 0 || journal_in_op()) return;
  const unsigned char *bytes = static_cast<const unsigned char *>(dst);
  if (n >= 64 && std::all_of(bytes + 1, bytes + n, [&](unsigned char b) { return b == bytes[0]; })) {
    journal_memset(dst, bytes[0], n);  // a fill (torch's NaN poison of every new tensor): a few bytes, not n
    return;
  }
  std::lock_guard<std::mutex> lk(g_journal_mu);
  if (g_journal_full || g_journal_bytes + g_pending_bytes + n + 32 > kJournalMaxBytes) {
    append_locked(JournalKind::kWrite, std::string(17, '\0'));  // trips the cap: kOverflow
    return;
  }
  while (!g_pending.empty() && g_pending_bytes + n > kPendingMaxBytes) {
    raw_write(g_pending.front().record);
    g_pending_bytes -= g_pending.front().n;
    g_pending.erase(g_pending.begin());
  }
  // record(kWrite, dst n bytes) made in place: one copy of the bytes, not two (they are megabytes per input)
  std::string r;
  r.reserve(5 + 16 + n);
  r.push_back((char)JournalKind::kWrite);
  put_u32(r, (uint32_t)(16 + n));
  put_u64(r, reinterpret_cast<uintptr_t>(dst));
  put_u64(r, n);
  r.append(static_cast<const char *>(dst), n);
  g_pending.push_back({reinterpret_cast<uintptr_t>(dst), n, std::move(r), true});
  g_pending_bytes += n;
}

void journal_copy(const void *dst, const void *src, size_t elem, int ndim, const int64_t *sizes,
                  const int64_t *dstr, const int64_t *sstr) {
  if (!journal_active()) return;
  std::string p;
  put_u64(p, reinterpret_cast<uintptr_t>(dst));
  put_u64(p, reinterpret_cast<uintptr_t>(src));
  put_u64(p, elem);
  put_u32(p, (uint32_t)ndim);
  for (int k = 0; k < ndim; ++k) put_u64(p, (uint64_t)sizes[k]);
  for (int k = 0; k < ndim; ++k) put_u64(p, (uint64_t)dstr[k]);
  for (int k = 0; k < ndim; ++k) put_u64(p, (uint64_t)sstr[k]);
  std::lock_guard<std::mutex> lk(g_journal_mu);
  append_locked(JournalKind::kCopy, p);
}

void journal_memset(const void *dst, int value, size_t n) {
  if (!journal_active() || journal_in_op()) return;
  std::string p;
  put_u64(p, reinterpret_cast<uintptr_t>(dst));
  put_u32(p, (uint32_t)value);
  put_u64(p, n);
  std::lock_guard<std::mutex> lk(g_journal_mu);
  append_locked(JournalKind::kMemset, p);
}

void journal_register(const void *p, size_t n, const std::string &label, bool add) {
  if (!journal_active()) return;
  std::string s;
  put_u64(s, reinterpret_cast<uintptr_t>(p));
  put_u64(s, n);
  put_str(s, label);
  std::lock_guard<std::mutex> lk(g_journal_mu);
  append_locked(add ? JournalKind::kRegister : JournalKind::kUnregister, s);
}

void journal_launch(const char *key, const char *kernel, const char *file, int line, cnrtDim3_t dim,
                    int func_type, const void *args, size_t nbytes) {
  if (!journal_active()) return;
  std::string p;
  put_str(p, key ? key : "");
  put_str(p, kernel ? kernel : "");
  put_str(p, file ? file : "");
  put_u32(p, (uint32_t)line);
  put_u32(p, dim.x);
  put_u32(p, dim.y);
  put_u32(p, dim.z);
  put_u32(p, (uint32_t)func_type);
  put_u64(p, nbytes);
  if (nbytes) p.append(static_cast<const char *>(args), nbytes);
  std::lock_guard<std::mutex> lk(g_journal_mu);
  append_locked(JournalKind::kLaunch, p);
}

void journal_mark(JournalMark what, uint32_t index, uintptr_t ptr, uint64_t n, const std::string &text) {
  if (!journal_active()) return;
  std::string p;
  p.push_back((char)what);
  put_u32(p, index);
  put_u64(p, ptr);
  put_u64(p, n);
  put_str(p, text);
  std::lock_guard<std::mutex> lk(g_journal_mu);
  if (what == JournalMark::kHostWhere) {
    if (journal_in_op()) return;  // an operator's own copy-back: replayed as the operator
    g_pending.push_back({0, 0, record(JournalKind::kMark, p), false});  // in order with the writes held back
    return;
  }
  if (what != JournalMark::kInput) {
    append_locked(JournalKind::kMark, p);
    return;
  }
  for (size_t i = 0; i < g_pending.size(); ++i) {
    if (g_pending[i].write && g_pending[i].dst == ptr && g_pending[i].n == n) {
      g_pending_bytes -= n;  // the upload this marks: the replay writes the twin's input there instead
      g_pending.erase(g_pending.begin() + (ptrdiff_t)i);
      break;
    }
  }
  g_pending.push_back({0, 0, record(JournalKind::kMark, p), false});  // in order with the writes held back
}

}  // namespace bang_emu

using namespace bang_emu;

extern "C" int bang_emu_journal_open(const char *path) {
  if (!path || !*path) return -1;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  std::vector<GdramBuf *> live = gdram_live();
  {
    std::lock_guard<std::mutex> lk(g_journal_mu);
    if (g_journal_fd >= 0) close(g_journal_fd);
    g_journal_fd = fd;
    g_journal_bytes = 0;
    g_journal_full = false;
    raw_write("BEJ1");
  }
  // what was allocated before the journal opened (the fork server's state): allocated and filled as it is
  for (GdramBuf *b : live) {
    if (!b->device) continue;
    journal_alloc(b);
    bang_emu_host_access_begin(reinterpret_cast<void *>(b->lo), b->hi - b->lo, 0);
    journal_host_write(reinterpret_cast<void *>(b->lo), b->hi - b->lo);
    bang_emu_host_access_end(reinterpret_cast<void *>(b->lo), b->hi - b->lo, 0);
  }
  return 0;
}

extern "C" int bang_emu_journal_mark(int what, unsigned index, const void *ptr, size_t n, const char *text) {
  if (!journal_active() || what < 1 || what > 4) return -1;
  journal_mark((JournalMark)what, index, reinterpret_cast<uintptr_t>(ptr), n, text ? text : "");
  return 0;
}

extern "C" int bang_emu_journal_op_wanted(void) { return journal_active() && !journal_in_op(); }

extern "C" int bang_emu_journal_op_begin(const char *op, const char *where, const char *args_json) {
  if (t_op_depth++ > 0 || !journal_active()) return 1;  // nested: the outer operator stands for it
  std::string p;
  put_str(p, op ? op : "");
  put_str(p, where ? where : "");
  put_str(p, args_json ? args_json : "");
  std::lock_guard<std::mutex> lk(g_journal_mu);
  append_locked(JournalKind::kOpBegin, p);
  return 0;
}

extern "C" void bang_emu_journal_op_end(const char *outs_json) {
  if (t_op_depth <= 0) return;
  if (--t_op_depth > 0 || !journal_active()) return;
  std::string p;
  put_str(p, outs_json ? outs_json : "");
  std::lock_guard<std::mutex> lk(g_journal_mu);
  append_locked(JournalKind::kOpEnd, p);
}

extern "C" void bang_emu_journal_close(void) {
  std::lock_guard<std::mutex> lk(g_journal_mu);
  if (g_journal_fd < 0) return;
  flush_pending_locked();
  close(g_journal_fd);
  g_journal_fd = -1;
}
