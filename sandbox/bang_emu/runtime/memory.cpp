// Emulated memories and the scalar-access checks.
// GDRAM: cnrtMalloc'd mappings with large guard zones, plus registered external buffers (tensors).
// NRAM/WRAM: one arena per worker thread (= emulated core); SRAM: one arena per cluster slot.
// Kernel code is compiled with -fsanitize=kernel-address, so every scalar load/store of it calls the
// __asan_* callbacks below; outside a kernel they return at once (t_core == nullptr).
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <shared_mutex>

#include "runtime.h"

namespace bang_emu {

thread_local CoreCtx *t_core = nullptr;
thread_local TaskVars g_task_vars = {0, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 0};

const char *space_name(int s) {
  static const char *names[] = {"host/stack", "GDRAM", "NRAM", "WRAM", "SRAM", "LDRAM"};
  return (s >= 0 && s < kSpaces) ? names[s] : "?";
}

// ------------------------------------------------------------------------------------------ GDRAM
namespace {
std::shared_mutex g_buf_mu;
std::map<uintptr_t, std::unique_ptr<GdramBuf>> g_bufs;  // keyed by guard_lo
std::vector<GdramBuf *> g_snapshot;                     // sorted by guard_lo, rebuilt on change
std::atomic<uint64_t> g_next_id{1};

void rebuild_snapshot_locked() {
  g_snapshot.clear();
  for (auto &kv : g_bufs) g_snapshot.push_back(kv.second.get());
}
}  // namespace

const GdramBuf *find_gdram(uintptr_t a) {
  // launches never overlap with (un)registration in well-formed programs; the snapshot is stable then
  const auto &v = g_snapshot;
  auto it = std::upper_bound(v.begin(), v.end(), a, [](uintptr_t x, const GdramBuf *b) { return x < b->guard_lo; });
  if (it == v.begin()) return nullptr;
  --it;
  // guards of neighbouring external buffers may overlap: prefer a buffer that really contains a
  for (auto j = it;; --j) {
    if (a >= (*j)->lo && a < (*j)->hi) return *j;
    if (j == v.begin() || it - j > 4) break;
  }
  if (a < (*it)->guard_hi) return *it;
  return nullptr;
}

std::vector<GdramBuf *> gdram_live() {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  return g_snapshot;
}

void gdram_begin_launch() {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  for (GdramBuf *b : g_snapshot) {
    b->touched = false;
    if (b->written) std::fill(b->written.get(), b->written.get() + b->written_words, 0);
  }
}

void mark_written(const GdramBuf *cb, uintptr_t lo, uintptr_t hi) {
  GdramBuf *b = const_cast<GdramBuf *>(cb);
  lo = std::max(lo, b->lo);
  hi = std::min(hi, b->hi);
  if (lo >= hi) return;
  if (!b->written) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lk(mu);
    if (!b->written) {
      size_t words = (b->hi - b->lo + 63) / 64;
      auto *w = new std::atomic<uint64_t>[words];
      for (size_t i = 0; i < words; ++i) w[i].store(0, std::memory_order_relaxed);
      b->written_words = words;
      b->written.reset(w);
    }
  }
  b->touched = true;
  size_t s = lo - b->lo, e = hi - b->lo;  // bit range [s, e)
  std::atomic<uint64_t> *w = b->written.get();
  while (s < e) {
    size_t word = s / 64, bit = s % 64;
    size_t nbits = std::min<size_t>(64 - bit, e - s);
    uint64_t mask = (nbits == 64) ? ~0ull : (((1ull << nbits) - 1) << bit);
    if ((w[word].load(std::memory_order_relaxed) & mask) != mask) w[word].fetch_or(mask, std::memory_order_relaxed);
    s += nbits;
  }
}

static void poison_fill(void *p, size_t bytes) {
  const char *mode = getenv("BANG_EMU_POISON");
  if (!mode || !*mode || !strcmp(mode, "none")) return;
  if (!strcmp(mode, "nan")) memset(p, 0xFF, bytes);  // NaN for fp32 and fp16
  else if (!strcmp(mode, "sentinel")) memset(p, 0xC6, bytes);  // finite: -25443.39 (fp32), -6.77 (fp16)
}

void *gdram_alloc(size_t bytes) {
  size_t page = 4096;
  size_t user = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  // guard zones as large as the buffer (1 MiB minimum, 256 MiB cap) so row-sized overruns land in them
  size_t guard = std::min<size_t>(std::max<size_t>(user, 1 << 20), 256ull << 20);
  size_t len = guard + user + guard;
  void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  auto b = std::make_unique<GdramBuf>();
  b->map_base = reinterpret_cast<uintptr_t>(m);
  b->map_len = len;
  // the buffer ends where the guard starts, so overruns past the end are caught from the first byte
  b->lo = b->map_base + guard + (user - bytes);
  b->lo &= ~uintptr_t(63);  // keep 64-byte alignment like the device allocator
  b->hi = b->lo + bytes;
  b->guard_lo = b->map_base;
  b->guard_hi = b->map_base + len;
  b->label = "cnrtMalloc#" + std::to_string(g_next_id++) + " (" + std::to_string(bytes) + " B)";
  void *p = reinterpret_cast<void *>(b->lo);
  poison_fill(p, bytes);
  std::unique_lock<std::shared_mutex> lk(g_buf_mu);
  g_bufs[b->guard_lo] = std::move(b);
  rebuild_snapshot_locked();
  return p;
}

bool gdram_free(void *p) {
  std::unique_lock<std::shared_mutex> lk(g_buf_mu);
  for (auto it = g_bufs.begin(); it != g_bufs.end(); ++it) {
    if (it->second->lo == reinterpret_cast<uintptr_t>(p) && !it->second->external) {
      munmap(reinterpret_cast<void *>(it->second->map_base), it->second->map_len);
      g_bufs.erase(it);
      rebuild_snapshot_locked();
      return true;
    }
  }
  return false;
}

bool is_device_ptr(const void *p, size_t bytes) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  const GdramBuf *b = find_gdram(reinterpret_cast<uintptr_t>(p));
  return b && reinterpret_cast<uintptr_t>(p) >= b->lo && reinterpret_cast<uintptr_t>(p) + bytes <= b->hi;
}

size_t gdram_bytes_in_use() {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  size_t s = 0;
  for (auto *b : g_snapshot) s += b->hi - b->lo;
  return s;
}

}  // namespace bang_emu

using namespace bang_emu;

extern "C" void bang_emu_register_gdram(void *p, size_t bytes, const char *label) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  std::unique_lock<std::shared_mutex> lk(g_buf_mu);
  for (auto &kv : g_bufs) {
    GdramBuf *b = kv.second.get();
    if (b->lo == lo && b->hi == lo + bytes) return;  // same range again: no-op
  }
  auto b = std::make_unique<GdramBuf>();
  b->lo = lo;
  b->hi = lo + bytes;
  b->external = true;
  // A tensor's neighbours are other host allocations; a kernel has no business touching them, so a
  // bounded zone around it counts as out of bounds.
  size_t guard = std::min<size_t>(std::max<size_t>(bytes, 4096), 1 << 20);
  b->guard_lo = lo > guard ? lo - guard : 0;
  b->guard_hi = b->hi + guard;
  b->label = label && *label ? label : ("tensor#" + std::to_string(g_next_id++));
  uintptr_t key = b->guard_lo;
  while (g_bufs.count(key)) ++key;  // distinct keys even with identical guard starts
  b->guard_lo = key;
  g_bufs[key] = std::move(b);
  rebuild_snapshot_locked();
}

extern "C" void bang_emu_unregister_gdram(void *p) {
  std::unique_lock<std::shared_mutex> lk(g_buf_mu);
  for (auto it = g_bufs.begin(); it != g_bufs.end(); ++it) {
    if (it->second->external && it->second->lo == reinterpret_cast<uintptr_t>(p)) {
      g_bufs.erase(it);
      rebuild_snapshot_locked();
      return;
    }
  }
}

namespace bang_emu {

// ------------------------------------------------------------------------------------------ on-chip
void Arena::init(int s, size_t reserve_bytes) {
  space = s;
  reserve = reserve_bytes;
  void *m = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    fprintf(stderr, "bang-emu: fatal: cannot reserve on-chip arena\n");
    abort();
  }
  base = reinterpret_cast<uintptr_t>(m);
  vars.reserve(4096);
}

uintptr_t Arena::alloc(size_t bytes, const std::string &tag) {
  std::lock_guard<std::mutex> lk(mu);
  auto it = by_tag.find(tag);
  if (it != by_tag.end()) return it->second;
  // 4 KiB gaps between arrays: overruns of one array land in a gap, not silently in its neighbour
  size_t start = (cursor + 4096 + 63) / 64 * 64;
  if (start + bytes + 4096 > reserve) {
    fprintf(stderr, "bang-emu: fatal: on-chip arena exhausted (%zu B requested for %s)\n", bytes, tag.c_str());
    abort();
  }
  cursor = start + bytes;
  used += bytes;
  uintptr_t a = base + start;
  poison_fill(reinterpret_cast<void *>(a), bytes);  // on-chip memory starts as garbage on the MLU
  vars.push_back(OnchipVar{a, a + bytes, tag});
  by_tag[tag] = a;
  return a;
}

const OnchipVar *Arena::var_at(uintptr_t a) const {
  // SRAM arenas grow while the cluster's other threads look things up; vars never move (reserved)
  std::lock_guard<std::mutex> lk(mu);
  auto it = std::upper_bound(vars.begin(), vars.end(), a, [](uintptr_t x, const OnchipVar &v) { return x < v.lo; });
  if (it == vars.begin()) return nullptr;
  --it;
  return (a < it->hi) ? &*it : nullptr;
}

namespace {
thread_local CoreMem *t_mem = nullptr;
}

void bind_thread_core_mem(CoreMem *m) { t_mem = m; }

CoreMem *thread_core_mem() {
  if (!t_mem) {
    // a thread outside the worker pools touched on-chip storage (host code): give it private arenas
    auto *m = new CoreMem();
    m->nram.init(kNram, 64ull << 20);
    m->wram.init(kWram, 64ull << 20);
    m->sram = new Arena();
    m->sram->init(kSram, 64ull << 20);
    t_mem = m;
  }
  return t_mem;
}

void *onchip_alloc(int space, size_t bytes, const char *tag) {
  CoreMem *m = thread_core_mem();
  Arena *a = space == kWram ? &m->wram : space == kSram ? m->sram : &m->nram;
  // the size is part of the key: template kernels share a declaration's tag across instantiations
  void *p = reinterpret_cast<void *>(a->alloc(bytes, std::string(tag) + "#" + std::to_string(bytes)));
  return p;
}

// ------------------------------------------------------------------------------------------ checks
static std::string hex(uintptr_t a) {
  char b[32];
  snprintf(b, sizeof b, "0x%" PRIxPTR, a);
  return b;
}

static std::string var_name(const std::string &tag) { return tag.substr(0, tag.find('@')); }


void access_slow(CoreCtx *c, uintptr_t a, size_t n, bool store, const void *ret) {
  const char *verb = store ? "write" : "read";
  if (a >= c->stack_lo && a < c->stack_hi) {
    c->hit_lo = c->stack_lo;
    c->hit_hi = c->stack_hi;
    c->hit_space = kOther;
    c->hit_buf = nullptr;
    return;
  }
  CoreMem *m = c->mem;
  if (m->nram.contains(a) || m->wram.contains(a)) {
    Arena &ar = m->nram.contains(a) ? m->nram : m->wram;
    if (ar.space == kWram)
      kernel_error("wram-scalar-access",
                   std::string("scalar ") + verb + " of " + std::to_string(n) + " B at " + hex(a) +
                       " in WRAM: the MLU's scalar unit cannot load or store WRAM (real hardware returns garbage); "
                       "copy the data to NRAM (__memcpy ..., WRAM2NRAM) or use WRAM only as a __bang_matmul/conv "
                       "operand",
                   ret);
    const OnchipVar *v = ar.var_at(a);
    if (!v || a + n > v->hi) {
      const OnchipVar *near = nullptr;
      for (const OnchipVar &x : ar.vars)
        if (x.hi <= a && (!near || x.hi > near->hi)) near = &x;
      std::string where = near ? (" (" + std::to_string(a - near->hi) + " B past the end of __nram__ array '" +
                                  var_name(near->tag) + "' of " + std::to_string(near->hi - near->lo) + " B)")
                               : "";
      kernel_error("onchip-out-of-bounds",
                   std::string("scalar ") + verb + " of " + std::to_string(n) + " B at NRAM " + hex(a) +
                       " outside every __nram__ array" + where + "; check the index arithmetic",
                   ret);
    }
    __atomic_store_n(&v->epoch, g_launch_epoch.load(std::memory_order_relaxed), __ATOMIC_RELAXED);
    c->hit_lo = v->lo;
    c->hit_hi = v->hi;
    c->hit_space = kNram;
    c->hit_buf = nullptr;
    return;
  }
  if (m->sram && m->sram->contains(a)) {
    const OnchipVar *v = m->sram->var_at(a);
    if (!v || a + n > v->hi)
      kernel_error("onchip-out-of-bounds",
                   std::string("scalar ") + verb + " at SRAM " + hex(a) + " outside every __mlu_shared__ array", ret);
    __atomic_store_n(&v->epoch, g_launch_epoch.load(std::memory_order_relaxed), __ATOMIC_RELAXED);
    c->hit_lo = v->lo;
    c->hit_hi = v->hi;
    c->hit_space = kSram;
    c->hit_buf = nullptr;
    return;
  }
  const GdramBuf *b = find_gdram(a);
  if (b) {
    if (a < b->lo || a + n > b->hi) {
      std::string rel = a < b->lo ? (std::to_string(b->lo - a) + " B before the start")
                                  : (std::to_string(a + n - b->hi) + " B past the end");
      kernel_error("gdram-out-of-bounds",
                   std::string("scalar ") + verb + " of " + std::to_string(n) + " B at " + hex(a) + ", " + rel +
                       " of GDRAM buffer " + b->label + " [" + hex(b->lo) + ", " + hex(b->hi) +
                       "); check the index arithmetic and the tail (last task / last partial tile)",
                   ret);
    }
    c->hit_lo = b->lo;
    c->hit_hi = b->hi;
    c->hit_space = kGdram;
    c->hit_buf = b;
    if (store) mark_written(b, a, a + n);
    return;
  }
  // stack, task registers, read-only data: not cached (cheap, and keeps the fast path exact)
  c->hit_lo = 1;
  c->hit_hi = 0;
  c->hit_space = kOther;
  c->hit_buf = nullptr;
}

void check_pending_access(CoreCtx *c, uintptr_t lo, uintptr_t hi, bool store, const void *ret, const char *what) {
  for (const PendingCopy &p : c->pending) {
    bool hits_dst = lo < p.dst_hi && p.dst_lo < hi;
    bool hits_src = store && lo < p.src_hi && p.src_lo < hi;
    if (hits_dst || hits_src) {
      const char *sync = p.queue == 0 ? "__sync_io()" : "__sync_move()";
      std::string msg = std::string(what) + (store ? " writes " : " reads ") + "[" + hex(lo) + ", " + hex(hi) +
                        ") while an asynchronous copy " + (hits_dst ? "into" : "from") +
                        " that memory is still in flight; on the MLU this races with the DMA. Call " + sync +
                        " or __sync() before touching the " + (hits_dst ? "destination" : "source") +
                        " of a __memcpy_async";
      kernel_error("async-hazard", msg, ret);
    }
  }
}

}  // namespace bang_emu

// ------------------------------------------------------------------------------------------ ASAN hooks
namespace {
inline __attribute__((always_inline)) void on_access(uintptr_t a, size_t n, bool store, const void *ret) {
  CoreCtx *c = t_core;
  if (__builtin_expect(c == nullptr, 1)) return;
  if (!(a >= c->hit_lo && a + n <= c->hit_hi)) {
    if (c->launch) check_abort();
    access_slow(c, a, n, store, ret);
  } else if (store && c->hit_buf) {
    mark_written(c->hit_buf, a, a + n);
  }
  if (store) c->stores[c->hit_space]++;
  else c->loads[c->hit_space]++;
  if (__builtin_expect(!c->pending.empty(), 0)) check_pending_access(c, a, a + n, store, ret, "scalar code");
}
}  // namespace

#define BANG_EMU_ASAN_HOOK(N)                                                                                  \
  extern "C" void __asan_load##N##_noabort(uintptr_t a) { on_access(a, N, false, __builtin_return_address(0)); } \
  extern "C" void __asan_store##N##_noabort(uintptr_t a) { on_access(a, N, true, __builtin_return_address(0)); } \
  extern "C" void __asan_load##N(uintptr_t a) { on_access(a, N, false, __builtin_return_address(0)); }           \
  extern "C" void __asan_store##N(uintptr_t a) { on_access(a, N, true, __builtin_return_address(0)); }
BANG_EMU_ASAN_HOOK(1)
BANG_EMU_ASAN_HOOK(2)
BANG_EMU_ASAN_HOOK(4)
BANG_EMU_ASAN_HOOK(8)
BANG_EMU_ASAN_HOOK(16)
extern "C" void __asan_loadN_noabort(uintptr_t a, size_t n) { on_access(a, n, false, __builtin_return_address(0)); }
extern "C" void __asan_storeN_noabort(uintptr_t a, size_t n) { on_access(a, n, true, __builtin_return_address(0)); }
extern "C" void __asan_loadN(uintptr_t a, size_t n) { on_access(a, n, false, __builtin_return_address(0)); }
extern "C" void __asan_storeN(uintptr_t a, size_t n) { on_access(a, n, true, __builtin_return_address(0)); }
extern "C" void __asan_handle_no_return() {}
extern "C" void __asan_before_dynamic_init(const char *) {}
extern "C" void __asan_after_dynamic_init() {}
