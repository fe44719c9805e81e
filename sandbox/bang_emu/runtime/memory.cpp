// Emulated on-chip memories and the scalar-access checks (GDRAM buffers: gdram.cpp).
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
  return (s >= 0 && s < kSpaces) ? kSpaceNames[s] : "?";
}

}  // namespace bang_emu

namespace bang_emu {

// ------------------------------------------------------------------------------------------ on-chip
// The wasm replay (wasm_host.cpp) places the arenas inside the kernels' linear memory: per space a region of
// `slots` arenas of `arena_bytes` each, handed out in order.
namespace {
struct OnchipRegion {
  uintptr_t base = 0;
  size_t arena_bytes = 0;
  int slots = 0, used = 0;
};
OnchipRegion g_regions[kSpaces];
std::mutex g_regions_mu;
}  // namespace

void set_onchip_regions(uintptr_t nram, uintptr_t wram, uintptr_t sram, size_t arena_bytes, int slots) {
  std::lock_guard<std::mutex> lk(g_regions_mu);
  g_regions[kNram] = OnchipRegion{nram, arena_bytes, slots, 0};
  g_regions[kWram] = OnchipRegion{wram, arena_bytes, slots, 0};
  g_regions[kSram] = OnchipRegion{sram, arena_bytes, slots, 0};
}

void Arena::init(int s, size_t reserve_bytes) {
  space = s;
  reserve = reserve_bytes;
  {
    std::lock_guard<std::mutex> lk(g_regions_mu);
    OnchipRegion &r = g_regions[s];
    if (r.base) {
      if (r.used == r.slots) {
        fprintf(stderr, "bang-emu: fatal: more on-chip arenas than the wasm memory holds\n");
        abort();
      }
      base = r.base + (uintptr_t)r.used++ * r.arena_bytes;
      reserve = r.arena_bytes;
      vars.reserve(4096);
      return;
    }
  }
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


// ------------------------------------------------------------------------------------------ strict mode
namespace {
struct StrictMode {
  bool on = false;
  std::vector<std::pair<uintptr_t, uintptr_t>> writable;  // the device module's data (RELRO excluded)
  std::vector<std::pair<uintptr_t, uintptr_t>> image;     // every segment of the device module (loads)
  size_t tls_modid = 0, tls_size = 0;
  // The launching thread's frames of device-module code during a launch (the site's invoker and the launch
  // template hold the kernel's bound arguments): [launch_erased's caller frame, the replay's stack pointer).
  std::atomic<uintptr_t> launcher_lo{0}, launcher_hi{0};
};
StrictMode g_strict;
struct TlsIndex {
  unsigned long module, offset;
};
extern "C" void *__tls_get_addr(TlsIndex *);

bool in_module_data(uintptr_t lo, uintptr_t hi) {
  for (auto &r : g_strict.writable)
    if (lo >= r.first && hi <= r.second) return true;
  if (g_strict.tls_modid && g_strict.tls_size) {
    static thread_local uintptr_t tls_lo = 0;
    if (!tls_lo) {
      TlsIndex ti{g_strict.tls_modid, 0};
      tls_lo = reinterpret_cast<uintptr_t>(__tls_get_addr(&ti));
    }
    if (lo >= tls_lo && hi <= tls_lo + g_strict.tls_size) return true;
  }
  return false;
}

// Does [lo, hi) overlap a saved frame pointer or return address of a live frame between `fp` (the storing
// function's frame) and the boundary? Device code keeps frame pointers (-fno-omit-frame-pointer), so the chain
// is exact; callee-saved registers spilled below are restored by the runtime itself (exec.cpp, guarded body).
bool hits_frame_links(uintptr_t lo, uintptr_t hi, uintptr_t fp, uintptr_t boundary) {
  for (int i = 0; fp && fp < boundary && i < 100000; ++i) {
    if (lo < fp + 16 && fp < hi) return true;
    uintptr_t next = *reinterpret_cast<const uintptr_t *>(fp);
    if (next <= fp) break;
    fp = next;
  }
  return false;
}

std::string hex_addr(uintptr_t a) {
  char b[32];
  snprintf(b, sizeof b, "0x%" PRIxPTR, a);
  return b;
}
}  // namespace

bool strict_confinement() { return g_strict.on; }

// Loads in strict mode (issue 37): kernel code may read device memory, on-chip arrays, its own frames below the
// point where the runtime entered it, the launching frames of device-module code that hold its arguments, the
// device module's own segments and TLS, and the task variables. Nothing of the runtime: its clock, counters,
// per-core context (on the worker's stack above the boundary), key and trace state. g++'s sanitizer checks a
// read-modify-write (`*p -= x`) once, as a load, so refusing loads is also what stops that store.
bool strict_readable(CoreCtx *c, uintptr_t lo, size_t n) {
  uintptr_t hi = lo + n;
  if (hi < lo) return false;
  uintptr_t top = c->stack_boundary ? c->stack_boundary : c->stack_hi;
  if (lo >= c->stack_lo && hi <= top) return true;
  uintptr_t llo = g_strict.launcher_lo.load(std::memory_order_relaxed);
  uintptr_t lhi = g_strict.launcher_hi.load(std::memory_order_relaxed);
  if (llo && lo >= llo && hi <= lhi) return true;
  for (auto &r : g_strict.image)
    if (lo >= r.first && hi <= r.second) return true;
  if (in_module_data(lo, hi)) return true;
  auto vars = reinterpret_cast<uintptr_t>(&g_task_vars);
  return lo >= vars && hi <= vars + sizeof(g_task_vars);
}

void set_launcher_frames(uintptr_t lo, uintptr_t hi) {
  g_strict.launcher_hi.store(hi, std::memory_order_relaxed);
  g_strict.launcher_lo.store(lo < hi ? lo : 0, std::memory_order_relaxed);
}

uintptr_t launcher_frames_top() { return g_strict.launcher_hi.load(std::memory_order_relaxed); }

void set_strict_image(const std::vector<std::pair<uintptr_t, uintptr_t>> &image) { g_strict.image = image; }

void set_strict_confinement(const std::vector<std::pair<uintptr_t, uintptr_t>> &writable, size_t tls_modid,
                            size_t tls_size) {
  g_strict.writable = writable;
  g_strict.tls_modid = tls_modid;
  g_strict.tls_size = tls_size;
  g_strict.on = true;
}

void strict_check_local_range(CoreCtx *c, uintptr_t lo, size_t n, const char *what, const void *ret,
                              uintptr_t frame) {
  uintptr_t hi = lo + n;
  bool on_stack = lo >= c->stack_lo && hi <= c->stack_boundary;
  if (on_stack && !hits_frame_links(lo, hi, frame, c->stack_boundary)) return;
  if (!on_stack && in_module_data(lo, hi)) return;
  kernel_error("kernel-store-outside-device",
               std::string(what) + " of " + std::to_string(n) + " B at " + hex_addr(lo) +
                   (on_stack ? " would overwrite a stack frame's return address"
                             : " is outside every device buffer, on-chip array and the kernel's own stack") +
                   ": kernel code can only write device memory (replay of the grading run, strict mode)",
               ret);
}

void access_slow(CoreCtx *c, uintptr_t a, size_t n, bool store, const void *ret, uintptr_t frame) {
  const char *verb = store ? "write" : "read";
  bool device = find_gdram(a) || c->mem->nram.contains(a) || c->mem->wram.contains(a) ||
                (c->mem->sram && c->mem->sram->contains(a));
  if (g_strict.on && !store && !device && !strict_readable(c, a, n))
    kernel_error("kernel-load-outside-device",
                 "scalar read of " + std::to_string(n) + " B at " + hex_addr(a) +
                     " is outside every device buffer, on-chip array, the kernel's own stack and its module: "
                     "kernel code can only read device memory and its own data (replay of the grading run, strict "
                     "mode)",
                 ret);
  if (g_strict.on && store && !device) {
    // the stack and everything that is not device memory: checked every time (never cached)
    strict_check_local_range(c, a, n, "scalar store", ret, frame);
    c->hit_lo = 1;
    c->hit_hi = 0;
    c->hit_space = kOther;
    c->hit_buf = nullptr;
    return;
  }
  if (a >= c->stack_lo && a < c->stack_hi) {
    if (g_strict.on) {  // loads only here: a cached stack range would let later stores through unchecked
      c->hit_lo = 1;
      c->hit_hi = 0;
      c->hit_space = kOther;
      c->hit_buf = nullptr;
      return;
    }
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
    sram_publish_own(c);  // scalar code reads and writes the arena itself: the core's held writes land first
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
                       " of GDRAM buffer " + buffer_desc(b) + " [" + hex(b->lo) + ", " + hex(b->hi) + ")" +
                       task_position(b, a) + "; check the index arithmetic and the tail (last task / last partial tile)",
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

void check_pending_access(CoreCtx *c, uintptr_t lo, uintptr_t hi, bool store, const void *ret, const char *what,
                          int same_queue) {
  for (const PendingCopy &p : c->pending) {
    bool hits_dst = lo < p.dst_hi && p.dst_lo < hi;
    bool hits_src = store && lo < p.src_hi && p.src_lo < hi;
    // a copy that overwrites the source of an earlier copy on its own queue runs after it (the DMA queue is in
    // order): mlu-ops' 5-stage pipelines store an SRAM tile with SRAM2GDRAM and refill it with GDRAM2SRAM right
    // behind, unsynchronised (kernels/binary_op/binary_op_5pipeline.h). Only that order is exempt: two copies
    // into the same memory, or one reading another's destination, stay hazards (no Cambricon code relies on them)
    if (p.queue == same_queue && hits_src && !hits_dst) continue;
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
using namespace bang_emu;

namespace {
// One of the recently classified ranges holds [a, a + n): it becomes the current one (the current one takes its
// place), with the space and buffer access_slow found for it.
inline bool recall_hit(CoreCtx *c, uintptr_t a, size_t n) {
  for (CoreCtx::HitRange &r : c->recent) {
    if (a >= r.lo && a + n <= r.hi) {
      CoreCtx::HitRange last{c->hit_lo, c->hit_hi, c->hit_space, c->hit_buf};
      c->hit_lo = r.lo, c->hit_hi = r.hi, c->hit_space = r.space, c->hit_buf = r.buf;
      r = last;
      return true;
    }
  }
  return false;
}

inline __attribute__((always_inline)) void on_access(uintptr_t a, size_t n, bool store, const void *ret,
                                                     const void *hook_frame) {
  CoreCtx *c = t_core;
  if (__builtin_expect(c == nullptr, 1)) return;
  if (!(a >= c->hit_lo && a + n <= c->hit_hi)) {
    if (c->launch) check_abort();
    if (!recall_hit(c, a, n)) {
      CoreCtx::HitRange last{c->hit_lo, c->hit_hi, c->hit_space, c->hit_buf};
      // the hook keeps a frame pointer (the runtime is built with one): its saved rbp is the caller's frame
      access_slow(c, a, n, store, ret, *static_cast<const uintptr_t *>(hook_frame));
      if (last.lo < last.hi && last.lo != c->hit_lo) {  // still valid: kept as the most recent of the others
        for (int i = CoreCtx::kRecentHits - 1; i > 0; --i) c->recent[i] = c->recent[i - 1];
        c->recent[0] = last;
      }
    } else if (store && c->hit_buf) {
      mark_written(c->hit_buf, a, a + n);
    }
  } else if (store && c->hit_buf) {
    mark_written(c->hit_buf, a, a + n);
  }
  if (store) c->stores[c->hit_space]++, c->store_bytes[c->hit_space] += n;
  else c->loads[c->hit_space]++, c->load_bytes[c->hit_space] += n;
  if (__builtin_expect(!c->pending.empty(), 0)) check_pending_access(c, a, a + n, store, ret, "scalar code");
}
}  // namespace

// called by the instrumented .mlu code: part of the runtime's exported interface
#define BANG_EMU_EXPORT __attribute__((visibility("default")))
#define BANG_EMU_ASAN_HOOK(N)                                                                                  \
  extern "C" BANG_EMU_EXPORT void __asan_load##N##_noabort(uintptr_t a) { on_access(a, N, false, __builtin_return_address(0), __builtin_frame_address(0)); } \
  extern "C" BANG_EMU_EXPORT void __asan_store##N##_noabort(uintptr_t a) { on_access(a, N, true, __builtin_return_address(0), __builtin_frame_address(0)); } \
  extern "C" BANG_EMU_EXPORT void __asan_load##N(uintptr_t a) { on_access(a, N, false, __builtin_return_address(0), __builtin_frame_address(0)); }           \
  extern "C" BANG_EMU_EXPORT void __asan_store##N(uintptr_t a) { on_access(a, N, true, __builtin_return_address(0), __builtin_frame_address(0)); }
BANG_EMU_ASAN_HOOK(1)
BANG_EMU_ASAN_HOOK(2)
BANG_EMU_ASAN_HOOK(4)
BANG_EMU_ASAN_HOOK(8)
BANG_EMU_ASAN_HOOK(16)
extern "C" BANG_EMU_EXPORT void __asan_loadN_noabort(uintptr_t a, size_t n) { on_access(a, n, false, __builtin_return_address(0), __builtin_frame_address(0)); }
extern "C" BANG_EMU_EXPORT void __asan_storeN_noabort(uintptr_t a, size_t n) { on_access(a, n, true, __builtin_return_address(0), __builtin_frame_address(0)); }
extern "C" BANG_EMU_EXPORT void __asan_loadN(uintptr_t a, size_t n) { on_access(a, n, false, __builtin_return_address(0), __builtin_frame_address(0)); }
extern "C" BANG_EMU_EXPORT void __asan_storeN(uintptr_t a, size_t n) { on_access(a, n, true, __builtin_return_address(0), __builtin_frame_address(0)); }
extern "C" BANG_EMU_EXPORT void __asan_handle_no_return() {}
extern "C" BANG_EMU_EXPORT void __asan_before_dynamic_init(const char *) {}
extern "C" BANG_EMU_EXPORT void __asan_after_dynamic_init() {}
