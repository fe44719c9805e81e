// BANG device builtins: memory movement (sync and deferred async), synchronisation, vector and tensor ops.
// Each builtin checks its operands (address space, bounds of the on-chip array or GDRAM buffer, in-flight
// async copies), does the work, and charges the cost model.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime.h"

namespace bang_emu {

double io_bytes_per_cycle(bool mpu);

namespace {

#define RET __builtin_return_address(0)

CoreCtx *core(const char *builtin, const void *ret) {
  CoreCtx *c = t_core;
  if (!c) {
    kernel_error("outside-kernel", std::string(builtin) + " called outside a kernel", ret);
  }
  check_abort();
  c->flush_scalar();
  count_builtin(builtin);
  return c;
}

std::string hexs(uintptr_t a) {
  char b[32];
  snprintf(b, sizeof b, "0x%lx", (unsigned long)a);
  return b;
}

int space_of(CoreCtx *c, uintptr_t a) {
  CoreMem *m = c->mem;
  if (m->nram.contains(a)) return kNram;
  if (m->wram.contains(a)) return kWram;
  if (m->sram && m->sram->contains(a)) return kSram;
  if (find_gdram(a)) return kGdram;
  return kOther;
}

std::string describe(CoreCtx *c, uintptr_t a) {
  int s = space_of(c, a);
  if (s == kGdram) return "GDRAM buffer " + find_gdram(a)->label;
  if (s == kOther) return "host or stack memory (not device memory)";
  return std::string(space_name(s));
}

// Counted work for the trace: elements through a vector/activation builtin (its destination's count).
void count_elements(CoreCtx *c, const char *name, size_t n) { c->elements[name] += n; }

// [lo, hi) must lie inside one array of the given on-chip space (or one GDRAM buffer).
const void *require(CoreCtx *c, const void *p, size_t bytes, int space, const char *builtin, const char *operand,
                    const void *ret) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  if (bytes == 0) return nullptr;
  if (space == kLdram || space == kOther) return nullptr;
  if (space == kGdram) {
    const GdramBuf *b = find_gdram(lo);
    if (!b) b = find_gdram(hi - 1);
    if (!b) {
      // far outside every guard zone; still name the nearest buffer when there is one (a task offset such as
      // taskId * chunk run past a small tensor), not "host memory"
      std::string near = space_of(c, lo) == kOther ? describe_near(lo, bytes) : "";
      if (!near.empty())
        kernel_error("gdram-out-of-bounds",
                     std::string(builtin) + ": " + operand + " range [" + hexs(lo) + ", " + hexs(hi) + ") of " +
                         std::to_string(bytes) + " B is outside every device buffer: it starts " + near +
                         "; check each task's offset (taskId * chunk) against the size",
                     ret);
      kernel_error("invalid-address",
                   std::string(builtin) + ": " + operand + " " + hexs(lo) + " is " + describe(c, lo) +
                       ", but the direction says GDRAM; pass a cnrtMalloc'd (or tensor) pointer",
                   ret);
    }
    if (lo < b->lo || hi > b->hi) {
      std::string rel = lo < b->lo ? std::to_string(b->lo - lo) + " B before its start"
                                   : std::to_string(hi - b->hi) + " B past its end";
      kernel_error("gdram-out-of-bounds",
                   std::string(builtin) + ": " + operand + " range [" + hexs(lo) + ", " + hexs(hi) + ") of " +
                       std::to_string(bytes) + " B reaches " + rel + " of GDRAM buffer " + buffer_desc(b) +
                       task_position(b, lo) + "; check the offsets and sizes of the last task / last tile",
                   ret);
    }
    return b;
  }
  Arena *ar = space == kNram ? &c->mem->nram : space == kWram ? &c->mem->wram : c->mem->sram;
  if (!ar || !ar->contains(lo))
    kernel_error("invalid-address",
                 std::string(builtin) + ": " + operand + " " + hexs(lo) + " is " + describe(c, lo) + ", not " +
                     space_name(space) + " as required",
                 ret);
  const OnchipVar *v = ar->var_at(lo);
  if (!v || hi > v->hi) {
    std::string name = v ? v->tag.substr(0, v->tag.find('@')) : "?";
    std::string msg = std::string(builtin) + ": " + operand + " range [" + hexs(lo) + ", " + hexs(hi) + ") of " +
                      std::to_string(bytes) + " B ";
    if (v)
      msg += "runs " + std::to_string(hi - v->hi) + " B past the end of " + space_name(space) + " array '" + name +
             "' (" + std::to_string(v->hi - v->lo) + " B)";
    else
      msg += "does not start inside any " + std::string(space_name(space)) + " array";
    kernel_error("onchip-out-of-bounds", msg, ret);
  }
  __atomic_store_n(&v->epoch, g_launch_epoch.load(std::memory_order_relaxed), __ATOMIC_RELAXED);
  return v;
}

void touch(CoreCtx *c, const void *p, size_t bytes, bool write, const char *builtin, const void *ret) {
  if (!c->pending.empty()) {
    uintptr_t lo = reinterpret_cast<uintptr_t>(p);
    check_pending_access(c, lo, lo + bytes, write, ret, builtin);
  }
}

// NRAM operand: bounds + hazards
void nram_in(CoreCtx *c, const void *p, size_t bytes, const char *b, const char *op, const void *ret) {
  require(c, p, bytes, kNram, b, op, ret);
  touch(c, p, bytes, false, b, ret);
}
void nram_out(CoreCtx *c, const void *p, size_t bytes, const char *b, const char *op, const void *ret) {
  require(c, p, bytes, kNram, b, op, ret);
  touch(c, p, bytes, true, b, ret);
}

void charge_vector(CoreCtx *c, size_t bytes, double passes = 1.0) {
  const Profile &P = profile();
  double cyc = P.vector_overhead_cycles + passes * std::ceil(bytes / P.vector_bytes_per_cycle);
  c->charge_compute(kSplitVector, cyc);
}

bool mpu_skip(CoreCtx *c) {
  if (c->is_mpu) {
    c->mpu_skipped++;
    return true;
  }
  return false;
}

void check_count(int n, const char *b, const void *ret) {
  if (n < 0) kernel_error("invalid-argument", std::string(b) + ": negative element count " + std::to_string(n), ret);
}

// ---------------------------------------------------------------------------------------- memcpy
struct DirInfo {
  const char *name;
  int src, dst;
};
const DirInfo kDirs[] = {
    {"GDRAM2NRAM", kGdram, kNram}, {"NRAM2GDRAM", kNram, kGdram}, {"LDRAM2NRAM", kLdram, kNram},
    {"NRAM2LDRAM", kNram, kLdram}, {"GDRAM2WRAM", kGdram, kWram}, {"WRAM2GDRAM", kWram, kGdram},
    {"LDRAM2WRAM", kLdram, kWram}, {"WRAM2LDRAM", kWram, kLdram}, {"NRAM2NRAM", kNram, kNram},
    {"NRAM2WRAM", kNram, kWram},   {"WRAM2NRAM", kWram, kNram},   {"GDRAM2SRAM", kGdram, kSram},
    {"SRAM2GDRAM", kSram, kGdram}, {"LDRAM2SRAM", kLdram, kSram}, {"SRAM2LDRAM", kSram, kLdram},
    {"SRAM2NRAM", kSram, kNram},   {"NRAM2SRAM", kNram, kSram},   {"SRAM2WRAM", kSram, kWram},
    {"WRAM2SRAM", kWram, kSram},   {"SRAM2SRAM", kSram, kSram},   {"GDRAM2GDRAM", kGdram, kGdram},
    {"GDRAM2LDRAM", kGdram, kLdram}, {"LDRAM2GDRAM", kLdram, kGdram}, {"LDRAM2LDRAM", kLdram, kLdram},
};

bool offchip(int s) { return s == kGdram || s == kLdram; }

void memcpy_impl(bool async, void *dst, const void *src, int size, int dir, int ds0, int ss0, int seg0, int ds1,
                 int ss1, int seg1, bool strided, const void *ret) {
  const char *bname = async ? "__memcpy_async" : "__memcpy";
  CoreCtx *c = core(bname, ret);
  if (dir < 0 || dir >= (int)(sizeof kDirs / sizeof kDirs[0]))
    kernel_error("invalid-memcpy-direction", std::string(bname) + ": " + std::to_string(dir) + " is not a mluMemcpyDirection_t", ret);
  const DirInfo &D = kDirs[dir];
  if (dir == LDRAM2LDRAM)
    kernel_error("invalid-memcpy-direction",
                 std::string(bname) + "(..., LDRAM2LDRAM) is not supported by the hardware; stage through NRAM", ret);
  if (strided && (D.src == kWram || dir == LDRAM2WRAM))
    kernel_error("invalid-memcpy-direction",
                 std::string(bname) + " with strides does not support " + D.name +
                     " (no strided copy reads WRAM or writes WRAM from LDRAM); copy contiguously",
                 ret);
  if (size < 0 || seg0 < 0 || seg1 < 0)
    kernel_error("invalid-argument", std::string(bname) + ": negative size or segment count", ret);
  if (size == 0) return;
  if (c->is_mpu && (D.src == kNram || D.dst == kNram || D.src == kWram || D.dst == kWram)) {
    c->mpu_skipped++;
    return;
  }
  long long dext = (long long)seg1 * ds1 + (long long)seg0 * ds0 + size;
  long long sext = (long long)seg1 * ss1 + (long long)seg0 * ss0 + size;
  if (ds0 < 0 || ss0 < 0 || ds1 < 0 || ss1 < 0)
    kernel_error("invalid-argument", std::string(bname) + ": negative stride", ret);
  std::string sop = std::string("source (") + D.name + ")", dop = std::string("destination (") + D.name + ")";
  require(c, src, sext, D.src, bname, sop.c_str(), ret);
  const void *dbuf = require(c, dst, dext, D.dst, bname, dop.c_str(), ret);
  touch(c, src, sext, false, bname, ret);
  touch(c, dst, dext, true, bname, ret);

  PendingCopy pc;
  pc.dst_lo = reinterpret_cast<uintptr_t>(dst);
  pc.dst_hi = pc.dst_lo + dext;
  pc.src_lo = reinterpret_cast<uintptr_t>(src);
  pc.src_hi = pc.src_lo + sext;
  pc.queue = (offchip(D.src) || offchip(D.dst)) ? 0 : 1;
  pc.dst = dst;
  pc.src = src;
  pc.size = size;
  pc.dst_stride0 = ds0;
  pc.src_stride0 = ss0;
  pc.seg0 = seg0;
  pc.dst_stride1 = ds1;
  pc.src_stride1 = ss1;
  pc.seg1 = seg1;
  pc.dir = dir;
  pc.dst_buf = D.dst == kGdram ? static_cast<const GdramBuf *>(dbuf) : nullptr;

  // cost: latency + per-segment overhead + bytes at the queue's bandwidth (64-B minimum bursts)
  const Profile &P = profile();
  long long nseg = (long long)(seg0 + 1) * (seg1 + 1);
  double bytes = (double)std::max(size, 64) * nseg;
  double moved = (double)size * nseg;
  c->bytes_moved[D.name] += (uint64_t)moved;
  double dur;
  if (pc.queue == 0) {
    if (dir == GDRAM2GDRAM) bytes *= 2;
    double bw_part = bytes / io_bytes_per_cycle(c->is_mpu);
    dur = P.io_latency_cycles + (nseg > 1 ? nseg * P.segment_cycles : 0) + bw_part;
    c->io_bw_cycles += bw_part;
    if (!async) c->io_sync_bw_cycles += bw_part;
  } else {
    dur = P.move_latency_cycles + (nseg > 1 ? nseg * P.segment_cycles : 0) + moved / P.move_bytes_per_cycle;
  }
  double &qfree = pc.queue == 0 ? c->io_free : c->move_free;
  // NRAM2NRAM runs on the compute stream, so even the async form completes at once (HDR note)
  if (!async || dir == NRAM2NRAM) {
    complete_pending(c, pc.queue);  // the DMA queue is in order: earlier async copies land first
    perform_copy(pc);
    // a blocking copy also waits for earlier vector/tensor work (its data may come from it)
    double start = std::max({c->t, qfree, c->compute_free});
    double end = start + dur;
    qfree = end;
    c->split[kSplitWait] += start - c->t;
    c->split[kSplitIo] += dur;
    c->t = end;
    return;
  }
  double start = std::max(c->t, qfree);
  qfree = start + dur;
  c->pending.push_back(pc);
}

}  // namespace

void perform_copy(const PendingCopy &p) {
  char *d = static_cast<char *>(p.dst);
  const char *s = static_cast<const char *>(p.src);
  for (int j = 0; j <= p.seg1; ++j) {
    for (int i = 0; i <= p.seg0; ++i) {
      char *dd = d + (size_t)j * p.dst_stride1 + (size_t)i * p.dst_stride0;
      const char *ss = s + (size_t)j * p.src_stride1 + (size_t)i * p.src_stride0;
      memmove(dd, ss, p.size);
      if (p.dst_buf) {
        uintptr_t lo = reinterpret_cast<uintptr_t>(dd);
        mark_written(p.dst_buf, lo, lo + p.size);
      }
    }
  }
}

void complete_pending(CoreCtx *c, int queue) {
  if (c->pending.empty()) return;
  std::vector<PendingCopy> keep;
  for (const PendingCopy &p : c->pending) {
    if (queue < 0 || p.queue == queue) perform_copy(p);
    else keep.push_back(p);
  }
  c->pending.swap(keep);
}

namespace {
void wait_queues(CoreCtx *c, bool io, bool move) {
  if (io) complete_pending(c, 0);
  if (move) complete_pending(c, 1);
  double target = std::max(c->t, c->compute_free);
  if (io) target = std::max(target, c->io_free);
  if (move) target = std::max(target, c->move_free);
  c->split[kSplitWait] += target - c->t;
  c->t = target;
}
}  // namespace

}  // namespace bang_emu

using namespace bang_emu;

// ------------------------------------------------------------------------------------------ public API
bool __is_nram(const void *p) {
  CoreCtx *c = t_core;
  return c && c->mem->nram.contains(reinterpret_cast<uintptr_t>(p));
}
bool __is_wram(const void *p) {
  CoreCtx *c = t_core;
  return c && c->mem->wram.contains(reinterpret_cast<uintptr_t>(p));
}
bool __is_sram(const void *p) {
  CoreCtx *c = t_core;
  return c && c->mem->sram && c->mem->sram->contains(reinterpret_cast<uintptr_t>(p));
}

void __memcpy(void *dst, const void *src, int size, mluMemcpyDirection_t dir) {
  memcpy_impl(false, dst, src, size, dir, 0, 0, 0, 0, 0, 0, false, RET);
}
void __memcpy(void *dst, const void *src, int size, mluMemcpyDirection_t dir, int ds, int ss, int seg) {
  memcpy_impl(false, dst, src, size, dir, ds, ss, seg, 0, 0, 0, true, RET);
}
void __memcpy(void *dst, const void *src, int size, mluMemcpyDirection_t dir, int ds0, int ss0, int seg0, int ds1,
              int ss1, int seg1) {
  memcpy_impl(false, dst, src, size, dir, ds0, ss0, seg0, ds1, ss1, seg1, true, RET);
}
void __memcpy_async(void *dst, const void *src, int size, mluMemcpyDirection_t dir) {
  memcpy_impl(true, dst, src, size, dir, 0, 0, 0, 0, 0, 0, false, RET);
}
void __memcpy_async(void *dst, const void *src, int size, mluMemcpyDirection_t dir, int ds, int ss, int seg) {
  memcpy_impl(true, dst, src, size, dir, ds, ss, seg, 0, 0, 0, true, RET);
}
void __memcpy_async(void *dst, const void *src, int size, mluMemcpyDirection_t dir, int ds0, int ss0, int seg0,
                    int ds1, int ss1, int seg1) {
  memcpy_impl(true, dst, src, size, dir, ds0, ss0, seg0, ds1, ss1, seg1, true, RET);
}

void __sync() { wait_queues(core("__sync", RET), true, true); }
void __sync_io() { wait_queues(core("__sync_io", RET), true, false); }
void __sync_move() { wait_queues(core("__sync_move", RET), false, true); }
void __sync_compute() { core("__sync_compute", RET); }
void __sync_io_move_compute() { wait_queues(core("__sync_io_move_compute", RET), true, true); }
void __sync_io_move_compute(bool, bool, bool, bool, bool, bool) {
  wait_queues(core("__sync_io_move_compute", RET), true, true);
}
void __sync_copy_dram_to_nram() { wait_queues(core("__sync_copy_dram_to_nram", RET), true, false); }
void __sync_copy_nram_to_dram() { wait_queues(core("__sync_copy_nram_to_dram", RET), true, false); }
void __sync_copy_dram_to_wram() { wait_queues(core("__sync_copy_dram_to_wram", RET), true, false); }
void __sync_copy_dram_to_sram() { wait_queues(core("__sync_copy_dram_to_sram", RET), true, false); }
void __sync_copy_sram_to_dram() { wait_queues(core("__sync_copy_sram_to_dram", RET), true, false); }
void __sync_copy_sram_to_nram() { wait_queues(core("__sync_copy_sram_to_nram", RET), false, true); }
void __sync_copy_nram_to_sram() { wait_queues(core("__sync_copy_nram_to_sram", RET), false, true); }
void __sync_cluster() {
  core("__sync_cluster", RET);
  barrier(kBarCluster, "__sync_cluster()", RET);
}
void __sync_all() {
  core("__sync_all", RET);
  barrier(kBarAll, "__sync_all()", RET);
}
void __sync_all_ipu() {
  core("__sync_all_ipu", RET);
  barrier(kBarAllIpu, "__sync_all_ipu()", RET);
}
void __sync_all_mpu() {
  core("__sync_all_mpu", RET);
  barrier(kBarAllMpu, "__sync_all_mpu()", RET);
}

// ------------------------------------------------------------------------------------------ set memory
template <class T>
static void write_value_impl(const char *name, T *dst, int n, T value, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_out(c, dst, sizeof(T) * n, name, "dst", ret);
  std::fill(dst, dst + n, value);
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n);
}
template <class T>
static void gdramset_impl(T *dst, int n, T value, const void *ret) {
  CoreCtx *c = core("__gdramset", ret);
  check_count(n, "__gdramset", ret);
  if (n == 0) return;
  const GdramBuf *b = static_cast<const GdramBuf *>(require(c, dst, sizeof(T) * n, kGdram, "__gdramset", "dst", ret));
  std::fill(dst, dst + n, value);
  uintptr_t lo = reinterpret_cast<uintptr_t>(dst);
  mark_written(b, lo, lo + sizeof(T) * n);
  const Profile &P = profile();
  double dur = P.io_latency_cycles + sizeof(T) * n / io_bytes_per_cycle(c->is_mpu);
  c->t = std::max(c->t, c->compute_free) + dur;
  c->split[kSplitIo] += dur;
  c->bytes_moved["GDRAMSET"] += sizeof(T) * n;
}
template <class T>
static void transpose_impl(T *dst, const T *src, int h, int w, const void *ret) {
  CoreCtx *c = core("__bang_transpose", ret);
  if (h <= 0 || w <= 0 || mpu_skip(c)) return;
  size_t bytes = sizeof(T) * (size_t)h * w;
  nram_in(c, src, bytes, "__bang_transpose", "src", ret);
  nram_out(c, dst, bytes, "__bang_transpose", "dst", ret);
  if (reinterpret_cast<const char *>(dst) < reinterpret_cast<const char *>(src) + bytes &&
      reinterpret_cast<const char *>(src) < reinterpret_cast<const char *>(dst) + bytes)
    kernel_error("invalid-argument", "__bang_transpose: dst must not overlap src", ret);
  for (int i = 0; i < h; ++i)
    for (int j = 0; j < w; ++j) dst[(size_t)j * h + i] = src[(size_t)i * w + j];
  count_elements(c, "__bang_transpose", (size_t)h * w);
  charge_vector(c, bytes, 2.0);
}

#define BANG_EMU_DEF_T(T)                                                                             \
  void __bang_write_value(T *dst, int n, T v) { write_value_impl<T>("__bang_write_value", dst, n, v, RET); } \
  void __bang_write_zero(T *dst, int n) { write_value_impl<T>("__bang_write_zero", dst, n, static_cast<T>(0), RET); }      \
  void __memset_nram(T *dst, int n, T v) { write_value_impl<T>("__memset_nram", dst, n, v, RET); }            \
  void __gdramset(T *dst, int n, T v) { gdramset_impl<T>(dst, n, v, RET); }                                   \
  void __nramset(T *dst, int n, T v) { write_value_impl<T>("__nramset", dst, n, v, RET); }                    \
  void __bang_transpose(T *dst, const T *src, int h, int w) { transpose_impl<T>(dst, src, h, w, RET); }
BANG_EMU_DEF_T(float)
BANG_EMU_DEF_T(half)
BANG_EMU_DEF_T(int)
BANG_EMU_DEF_T(int16_t)
BANG_EMU_DEF_T(int8_t)
BANG_EMU_DEF_T(uint8_t)
BANG_EMU_DEF_T(uint16_t)
BANG_EMU_DEF_T(unsigned int)
BANG_EMU_DEF_T(char)
#undef BANG_EMU_DEF_T

// ------------------------------------------------------------------------------------------ vector ops
template <class T, class F>
static void unary(const char *name, T *dst, const T *src, int n, F f, const void *ret, double passes = 1.0) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_out(c, dst, sizeof(T) * n, name, "dst", ret);
  for (int i = 0; i < n; ++i) dst[i] = T(f(float(src[i])));
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n, passes);
}
template <class T, class F>
static void binary(const char *name, T *dst, const T *a, const T *b, int n, F f, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, a, sizeof(T) * n, name, "src0", ret);
  nram_in(c, b, sizeof(T) * n, name, "src1", ret);
  nram_out(c, dst, sizeof(T) * n, name, "dst", ret);
  for (int i = 0; i < n; ++i) dst[i] = T(f(float(a[i]), float(b[i])));
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n);
}
template <class T, class F>
static void cycle(const char *name, T *dst, const T *src, const T *seg, int n, int m, F f, const void *ret) {
  CoreCtx *c = core(name, ret);
  if (n <= 0 || m <= 0 || mpu_skip(c)) return;
  if (n % m) kernel_error("invalid-argument", std::string(name) + ": src_n must be a multiple of seg_n", ret);
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_in(c, seg, sizeof(T) * m, name, "seg", ret);
  nram_out(c, dst, sizeof(T) * n, name, "dst", ret);
  for (int i = 0; i < n; ++i) dst[i] = T(f(float(src[i]), float(seg[i % m])));
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n);
}

static inline float sigmoid_hw(float x) {
  // hardware __bang_active_sigmoid saturates outside (-7.75, 7.75) (BANG header docs)
  if (x <= -7.75f) return 0.0f;
  if (x >= 7.75f) return 1.0f;
  return 1.0f / (1.0f + std::exp(-x));
}

template <class T>
static void taylor_sigmoid(const char *name, T *dst, const T *src, T *aux1, T *aux2, int n, const void *ret) {
  CoreCtx *c = core(name, ret);
  if (n <= 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_out(c, dst, sizeof(T) * n, name, "dst", ret);
  nram_out(c, aux1, sizeof(T) * n, name, "aux1", ret);
  nram_out(c, aux2, sizeof(T) * n, name, "aux2", ret);
  if (dst == src) kernel_error("invalid-argument", std::string(name) + ": dst must not alias src", ret);
  for (int i = 0; i < n; ++i) {
    float x = float(src[i]);
    aux1[i] = T(x);  // the aux buffers are scratch; their contents are undefined afterwards
    aux2[i] = T(-x);
    dst[i] = T(sigmoid_hw(x));
  }
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n, 6.0);
}

template <class T>
static void reduce_sum_impl(T *dst, const T *src, int n, const void *ret) {
  const char *name = "__bang_reduce_sum";
  CoreCtx *c = core(name, ret);
  if (n <= 0 || mpu_skip(c)) return;
  const int per = 128 / sizeof(T);
  int blocks = (n + per - 1) / per;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_out(c, dst, sizeof(T) * ((size_t)(blocks - 1) * per + 1), name, "dst", ret);
  for (int b = 0; b < blocks; ++b) {
    float s = 0;
    for (int i = b * per; i < std::min(n, (b + 1) * per); ++i) s += float(src[i]);
    dst[(size_t)b * per] = T(s);  // 3xx: the other elements of each 128-B block of dst are left unchanged
  }
  count_elements(c, name, n);  // elements processed (the charge is by source bytes too)
  charge_vector(c, sizeof(T) * n);
}

// HWC pooling over complete windows (incomplete ones are dropped): the window's sum, or its maximum
template <class T>
static void pool_impl(const char *name, bool take_max, T *dst, const T *src, int ch, int h, int w, int kh, int kw,
                      int sw, int sh, const void *ret) {
  CoreCtx *c = core(name, ret);
  if (ch <= 0 || h <= 0 || w <= 0 || kh <= 0 || kw <= 0 || sw <= 0 || sh <= 0 || mpu_skip(c)) return;
  int ho = (h - kh) / sh + 1, wo = (w - kw) / sw + 1;
  if (ho <= 0 || wo <= 0) return;
  nram_in(c, src, sizeof(T) * (size_t)ch * h * w, name, "src", ret);
  nram_out(c, dst, sizeof(T) * (size_t)ch * ho * wo, name, "dst", ret);
  for (int y = 0; y < ho; ++y)
    for (int x = 0; x < wo; ++x)
      for (int cc = 0; cc < ch; ++cc) {
        float s = take_max ? -INFINITY : 0.0f;
        for (int i = 0; i < kh; ++i)
          for (int j = 0; j < kw; ++j) {
            float v = float(src[((size_t)(y * sh + i) * w + (x * sw + j)) * ch + cc]);
            s = take_max ? std::max(s, v) : s + v;
          }
        dst[((size_t)y * wo + x) * ch + cc] = T(s);
      }
  count_elements(c, name, (size_t)ch * h * w);
  charge_vector(c, sizeof(T) * (size_t)ch * h * w);
}

template <class T>
static void reshape_filter_impl(T *dst, const T *src, int n, int h, int w, int ci, const void *ret) {
  const char *name = "__bang_reshape_filter";
  CoreCtx *c = core(name, ret);
  if (n <= 0 || h <= 0 || w <= 0 || ci <= 0 || mpu_skip(c)) return;
  if (n % 64) kernel_error("invalid-argument", "__bang_reshape_filter: n must be a multiple of 64", ret);
  size_t hwc = (size_t)h * w * ci, bytes = sizeof(T) * n * hwc;
  nram_in(c, src, bytes, name, "src", ret);
  nram_out(c, dst, bytes, name, "dst", ret);
  // the WRAM filter lines __bang_conv reads (README): output channel o to line o % 64, slot o / 64
  const int slots = n / 64;
  for (int o = 0; o < n; ++o)
    memcpy(dst + ((size_t)(o % 64) * slots + o / 64) * hwc, src + (size_t)o * hwc, sizeof(T) * hwc);
  count_elements(c, name, (size_t)n * hwc);
  charge_vector(c, bytes, 2.0);
}

// dst[0] = the maximum (minimum) of src; dst[1], read as the unsigned integer of the element's width, its first
// index (how MLU270-era NMS code reads it: ((unsigned short *)dst)[1] for half)
template <class T>
static void extreme_impl(const char *name, bool take_max, T *dst, const T *src, int n, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_out(c, dst, 2 * sizeof(T), name, "dst", ret);
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (take_max ? float(src[i]) > float(src[best]) : float(src[i]) < float(src[best])) best = i;
  T value = src[best];
  dst[0] = value;
  if (sizeof(T) == 2) {
    uint16_t idx = (uint16_t)best;
    memcpy(reinterpret_cast<char *>(dst) + 2, &idx, 2);
  } else {
    uint32_t idx = (uint32_t)best;
    memcpy(reinterpret_cast<char *>(dst) + 4, &idx, 4);
  }
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n);
}

// dst[0] = how many elements of src are non-zero
template <class T>
static void count_impl(unsigned int *dst, const T *src, int n, const void *ret) {
  const char *name = "__bang_count";
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_out(c, dst, sizeof(unsigned int), name, "dst", ret);
  unsigned int k = 0;
  for (int i = 0; i < n; ++i) k += float(src[i]) != 0.0f;
  dst[0] = k;
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n);
}

// the elements of src whose mask is non-zero, packed in order at dst (the rest of dst is left unchanged); the
// mask may be dst itself (MLU270 YOLOv3 lab code does this), so the selection is made before dst is written
template <class T>
static void collect_impl(T *dst, const T *src, const T *mask, int n, const void *ret) {
  const char *name = "__bang_collect";
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_in(c, mask, sizeof(T) * n, name, "mask", ret);
  thread_local std::vector<T> picked;
  picked.clear();
  for (int i = 0; i < n; ++i)
    if (float(mask[i]) != 0.0f) picked.push_back(src[i]);
  if (!picked.empty()) {
    nram_out(c, dst, sizeof(T) * picked.size(), name, "dst", ret);
    memmove(dst, picked.data(), sizeof(T) * picked.size());
  }
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n, 2.0);
}

#define BANG_EMU_DEF_F(T)                                                                                          \
  void __bang_add(T *d, const T *a, const T *b, int n) { binary<T>("__bang_add", d, a, b, n, [](float x, float y) { return x + y; }, RET); } \
  void __bang_sub(T *d, const T *a, const T *b, int n) { binary<T>("__bang_sub", d, a, b, n, [](float x, float y) { return x - y; }, RET); } \
  void __bang_mul(T *d, const T *a, const T *b, int n) { binary<T>("__bang_mul", d, a, b, n, [](float x, float y) { return x * y; }, RET); } \
  void __bang_add_scalar(T *d, const T *s, T v, int n) { float fv = float(v); unary<T>("__bang_add_scalar", d, s, n, [fv](float x) { return x + fv; }, RET); } \
  void __bang_sub_scalar(T *d, const T *s, T v, int n) { float fv = float(v); unary<T>("__bang_sub_scalar", d, s, n, [fv](float x) { return x - fv; }, RET); } \
  void __bang_mul_scalar(T *d, const T *s, T v, int n) { float fv = float(v); unary<T>("__bang_mul_scalar", d, s, n, [fv](float x) { return x * fv; }, RET); } \
  void __bang_add_const(T *d, const T *s, T v, int n) { float fv = float(v); unary<T>("__bang_add_const", d, s, n, [fv](float x) { return x + fv; }, RET); } \
  void __bang_sub_const(T *d, const T *s, T v, int n) { float fv = float(v); unary<T>("__bang_sub_const", d, s, n, [fv](float x) { return x - fv; }, RET); } \
  void __bang_mul_const(T *d, const T *s, T v, int n) { float fv = float(v); unary<T>("__bang_mul_const", d, s, n, [fv](float x) { return x * fv; }, RET); } \
  void __bang_active_sigmoid(T *d, const T *s, int n) { unary<T>("__bang_active_sigmoid", d, s, n, sigmoid_hw, RET); } \
  void __bang_active_exp(T *d, const T *s, int n) { unary<T>("__bang_active_exp", d, s, n, [](float x) { return x < -7.75f ? 5.96e-8f : std::exp(x); }, RET); } \
  void __bang_active_exphp(T *d, const T *s, int n) { unary<T>("__bang_active_exphp", d, s, n, [](float x) { return x < -15.0f ? 3e-7f : std::exp(x); }, RET); } \
  void __bang_active_recip(T *d, const T *s, int n) { unary<T>("__bang_active_recip", d, s, n, [](float x) { return 1.0f / x; }, RET); } \
  void __bang_active_reciphp(T *d, const T *s, int n) { unary<T>("__bang_active_reciphp", d, s, n, [](float x) { return 1.0f / x; }, RET); } \
  void __bang_active_relu(T *d, const T *s, int n) { unary<T>("__bang_active_relu", d, s, n, [](float x) { return x > 0 ? x : 0.0f; }, RET); } \
  void __bang_active_abs(T *d, const T *s, int n) { unary<T>("__bang_active_abs", d, s, n, [](float x) { return std::fabs(x); }, RET); } \
  void __bang_taylor3_sigmoid(T *d, const T *s, T *a1, T *a2, int n) { taylor_sigmoid<T>("__bang_taylor3_sigmoid", d, s, a1, a2, n, RET); } \
  void __bang_taylor4_sigmoid(T *d, const T *s, T *a1, T *a2, int n) { taylor_sigmoid<T>("__bang_taylor4_sigmoid", d, s, a1, a2, n, RET); } \
  void __bang_recip(T *d, const T *s, int n) { unary<T>("__bang_recip", d, s, n, [](float x) { return 1.0f / x; }, RET); } \
  void __bang_pow2(T *d, const T *s, int n) { unary<T>("__bang_pow2", d, s, n, [](float x) { return std::exp2(x); }, RET); } \
  void __bang_reduce_sum(T *d, const T *s, int n) { reduce_sum_impl<T>(d, s, n, RET); } \
  void __bang_sumpool(T *d, const T *s, int ch, int h, int w, int kh, int kw) { pool_impl<T>("__bang_sumpool", false, d, s, ch, h, w, kh, kw, kw, kh, RET); } \
  void __bang_sumpool(T *d, const T *s, int ch, int h, int w, int kh, int kw, int sw, int sh) { pool_impl<T>("__bang_sumpool", false, d, s, ch, h, w, kh, kw, sw, sh, RET); } \
  void __bang_maxpool(T *d, const T *s, int ch, int h, int w, int kh, int kw) { pool_impl<T>("__bang_maxpool", true, d, s, ch, h, w, kh, kw, kw, kh, RET); } \
  void __bang_maxpool(T *d, const T *s, int ch, int h, int w, int kh, int kw, int sw, int sh) { pool_impl<T>("__bang_maxpool", true, d, s, ch, h, w, kh, kw, sw, sh, RET); } \
  void __bang_cycle_add(T *d, const T *s, const T *g, int n, int m) { cycle<T>("__bang_cycle_add", d, s, g, n, m, [](float x, float y) { return x + y; }, RET); } \
  void __bang_cycle_mul(T *d, const T *s, const T *g, int n, int m) { cycle<T>("__bang_cycle_mul", d, s, g, n, m, [](float x, float y) { return x * y; }, RET); } \
  void __bang_reshape_filter(T *d, const T *s, int n, int h, int w, int c) { reshape_filter_impl<T>(d, s, n, h, w, c, RET); } \
  void __bang_cycle_sub(T *d, const T *s, const T *g, int n, int m) { cycle<T>("__bang_cycle_sub", d, s, g, n, m, [](float x, float y) { return x - y; }, RET); } \
  void __bang_cycle_gt(T *d, const T *s, const T *g, int n, int m) { cycle<T>("__bang_cycle_gt", d, s, g, n, m, [](float x, float y) { return x > y ? 1.0f : 0.0f; }, RET); } \
  void __bang_active_sqrt(T *d, const T *s, int n) { unary<T>("__bang_active_sqrt", d, s, n, [](float x) { return std::sqrt(x); }, RET); } \
  void __bang_sqrt(T *d, const T *s, int n) { unary<T>("__bang_sqrt", d, s, n, [](float x) { return std::sqrt(x); }, RET); } \
  void __bang_square(T *d, const T *s, int n) { unary<T>("__bang_square", d, s, n, [](float x) { return x * x; }, RET); } \
  void __bang_gt(T *d, const T *a, const T *b, int n) { binary<T>("__bang_gt", d, a, b, n, [](float x, float y) { return x > y ? 1.0f : 0.0f; }, RET); } \
  void __bang_ge(T *d, const T *a, const T *b, int n) { binary<T>("__bang_ge", d, a, b, n, [](float x, float y) { return x >= y ? 1.0f : 0.0f; }, RET); } \
  void __bang_lt(T *d, const T *a, const T *b, int n) { binary<T>("__bang_lt", d, a, b, n, [](float x, float y) { return x < y ? 1.0f : 0.0f; }, RET); } \
  void __bang_le(T *d, const T *a, const T *b, int n) { binary<T>("__bang_le", d, a, b, n, [](float x, float y) { return x <= y ? 1.0f : 0.0f; }, RET); } \
  void __bang_eq(T *d, const T *a, const T *b, int n) { binary<T>("__bang_eq", d, a, b, n, [](float x, float y) { return x == y ? 1.0f : 0.0f; }, RET); } \
  void __bang_ne(T *d, const T *a, const T *b, int n) { binary<T>("__bang_ne", d, a, b, n, [](float x, float y) { return x != y ? 1.0f : 0.0f; }, RET); } \
  void __bang_not(T *d, const T *s, int n) { unary<T>("__bang_not", d, s, n, [](float x) { return x == 0.0f ? 1.0f : 0.0f; }, RET); } \
  void __bang_max(T *d, const T *s, int n) { extreme_impl<T>("__bang_max", true, d, s, n, RET); } \
  void __bang_min(T *d, const T *s, int n) { extreme_impl<T>("__bang_min", false, d, s, n, RET); } \
  void __bang_count(unsigned int *d, const T *s, int n) { count_impl<T>(d, s, n, RET); } \
  void __bang_collect(T *d, const T *s, const T *m, int n) { collect_impl<T>(d, s, m, n, RET); }
BANG_EMU_DEF_F(float)
BANG_EMU_DEF_F(half)
#undef BANG_EMU_DEF_F

void __bang_float2half_rn(half *dst, const float *src, int n) {
  const void *ret = RET;
  CoreCtx *c = core("__bang_float2half_rn", ret);
  if (n <= 0 || mpu_skip(c)) return;
  nram_in(c, src, 4 * (size_t)n, "__bang_float2half_rn", "src", ret);
  nram_out(c, dst, 2 * (size_t)n, "__bang_float2half_rn", "dst", ret);
  for (int i = 0; i < n; ++i) dst[i] = (half)src[i];  // IEEE round-to-nearest-even
  count_elements(c, "__bang_float2half_rn", n);
  charge_vector(c, 4 * (size_t)n);
}
void __bang_float2half_tz(half *dst, const float *src, int n) {
  const void *ret = RET;
  CoreCtx *c = core("__bang_float2half_tz", ret);
  if (n <= 0 || mpu_skip(c)) return;
  nram_in(c, src, 4 * (size_t)n, "__bang_float2half_tz", "src", ret);
  nram_out(c, dst, 2 * (size_t)n, "__bang_float2half_tz", "dst", ret);
  for (int i = 0; i < n; ++i) {
    half h = (half)src[i];
    if (std::fabs((float)h) > std::fabs(src[i]) && std::isfinite(src[i])) {
      uint16_t bits;  // one ulp toward zero: decrement the magnitude bits
      memcpy(&bits, &h, 2);
      bits = (uint16_t)(bits - 1);
      memcpy(&h, &bits, 2);
    }
    dst[i] = h;
  }
  count_elements(c, "__bang_float2half_tz", n);
  charge_vector(c, 4 * (size_t)n);
}
void __bang_half2float(float *dst, const half *src, int n) {
  const void *ret = RET;
  CoreCtx *c = core("__bang_half2float", ret);
  if (n <= 0 || mpu_skip(c)) return;
  nram_in(c, src, 2 * (size_t)n, "__bang_half2float", "src", ret);
  nram_out(c, dst, 4 * (size_t)n, "__bang_half2float", "dst", ret);
  for (int i = 0; i < n; ++i) dst[i] = (float)src[i];
  count_elements(c, "__bang_half2float", n);
  charge_vector(c, 4 * (size_t)n);
}

// ------------------------------------------------------------------------------------------ matmul
namespace {
typedef float v8f __attribute__((vector_size(32)));

// C[M][N] = A[M][K] * B[K][N], row-major fp32; 4x16 register tiles.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void gemm_kn(float *C, const float *A, const float *B,
                                                                          int M, int K, int N) {
  int i = 0;
  for (; i + 4 <= M; i += 4) {
    int j = 0;
    for (; j + 16 <= N; j += 16) {
      v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
      const float *a0 = A + (size_t)i * K, *a1 = a0 + K, *a2 = a1 + K, *a3 = a2 + K;
      for (int k = 0; k < K; ++k) {
        v8f b0, b1;
        memcpy(&b0, B + (size_t)k * N + j, 32);
        memcpy(&b1, B + (size_t)k * N + j + 8, 32);
        float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
        c00 += x0 * b0;
        c01 += x0 * b1;
        c10 += x1 * b0;
        c11 += x1 * b1;
        c20 += x2 * b0;
        c21 += x2 * b1;
        c30 += x3 * b0;
        c31 += x3 * b1;
      }
      memcpy(C + (size_t)(i + 0) * N + j, &c00, 32);
      memcpy(C + (size_t)(i + 0) * N + j + 8, &c01, 32);
      memcpy(C + (size_t)(i + 1) * N + j, &c10, 32);
      memcpy(C + (size_t)(i + 1) * N + j + 8, &c11, 32);
      memcpy(C + (size_t)(i + 2) * N + j, &c20, 32);
      memcpy(C + (size_t)(i + 2) * N + j + 8, &c21, 32);
      memcpy(C + (size_t)(i + 3) * N + j, &c30, 32);
      memcpy(C + (size_t)(i + 3) * N + j + 8, &c31, 32);
    }
    for (; j < N; ++j)
      for (int r = 0; r < 4; ++r) {
        float s = 0;
        for (int k = 0; k < K; ++k) s += A[(size_t)(i + r) * K + k] * B[(size_t)k * N + j];
        C[(size_t)(i + r) * N + j] = s;
      }
  }
  for (; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float s = 0;
      for (int k = 0; k < K; ++k) s += A[(size_t)i * K + k] * B[(size_t)k * N + j];
      C[(size_t)i * N + j] = s;
    }
}

// rhs layout in WRAM: N rows of K (Cambricon's "column-major right matrix", the project's contract) unless
// BANG_EMU_MATMUL_RHS=kn asks for K rows of N (the right matrix as the AICS lab copies it); README.
bool rhs_is_nk() {
  static const bool nk = [] {
    const char *e = getenv("BANG_EMU_MATMUL_RHS");
    return !(e && !strcmp(e, "kn"));
  }();
  return nk;
}

template <class TD, class TL, class TR>
void matmul_impl(TD *dst, const TL *lhs, const TR *rhs, int M, int K, int N, double ops_per_cycle, float scale,
                 const void *ret) {
  const char *name = "__bang_matmul";
  CoreCtx *c = core(name, ret);
  if (M <= 0 || K <= 0 || N <= 0) {
    kernel_error("invalid-argument", "__bang_matmul: M, K and N must be positive (got " + std::to_string(M) + ", " +
                                         std::to_string(K) + ", " + std::to_string(N) + ")", ret);
  }
  if (mpu_skip(c)) return;
  nram_in(c, lhs, sizeof(TL) * (size_t)M * K, name, "lhs (NRAM)", ret);
  require(c, rhs, sizeof(TR) * (size_t)K * N, kWram, name, "rhs (WRAM)", ret);
  touch(c, rhs, sizeof(TR) * (size_t)K * N, false, name, ret);
  nram_out(c, dst, sizeof(TD) * (size_t)M * N, name, "dst", ret);
  thread_local std::vector<float> a, b, out;
  a.resize((size_t)M * K);
  b.resize((size_t)K * N);
  out.resize((size_t)M * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(lhs[i]);
  if (rhs_is_nk()) {
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) b[(size_t)k * N + n] = float(rhs[(size_t)n * K + k]);
  } else {
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(rhs[i]);
  }
  if (std::is_same<TD, float>::value && std::is_same<TL, float>::value && std::is_same<TR, float>::value && scale == 1.0f) {
    gemm_kn(reinterpret_cast<float *>(dst), a.data(), b.data(), M, K, N);
  } else {
    gemm_kn(out.data(), a.data(), b.data(), M, K, N);
    for (size_t i = 0; i < out.size(); ++i) dst[i] = TD(out[i] * scale);
  }
  c->tensor_macs += (uint64_t)M * K * N;
  const Profile &P = profile();
  double cyc = P.tensor_overhead_cycles + 2.0 * M * K * N / ops_per_cycle;
  c->charge_compute(kSplitTensor, cyc);
}
// Convolution on the tensor unit: src[H][W][Ci] (NRAM), dst[Ho][Wo][Co] (NRAM) over complete windows, filters
// in WRAM with output channel co at line co % 64, slot co / 64 of [64][Co/64][Kh][Kw][Ci] -- the layout the
// MLU270 GEMM tutorials (CambriconECO/BANGC_Gemm_Tutorial) build with strided NRAM2NRAM copies before
// NRAM2WRAM. Fixed-point forms scale the integer sum by 2^fix_position.
template <class TD, class TS, class TK>
void conv_impl(TD *dst, const TS *src, const TK *kernel, int ci, int h, int w, int kh, int kw, int sw, int sh, int co,
               double ops_per_cycle, float scale, const void *ret) {
  const char *name = "__bang_conv";
  CoreCtx *c = core(name, ret);
  if (ci <= 0 || h <= 0 || w <= 0 || kh <= 0 || kw <= 0 || sw <= 0 || sh <= 0 || co <= 0 || kh > h || kw > w)
    kernel_error("invalid-argument",
                 "__bang_conv: ci, h, w, kh, kw, strides and co must be positive and the kernel no larger than the "
                 "input (got ci=" + std::to_string(ci) + " h=" + std::to_string(h) + " w=" + std::to_string(w) +
                     " kh=" + std::to_string(kh) + " kw=" + std::to_string(kw) + " co=" + std::to_string(co) + ")",
                 ret);
  if (co % 64)
    kernel_error("invalid-argument",
                 "__bang_conv: co = " + std::to_string(co) + " is not a multiple of 64 (the WRAM filter layout "
                 "holds 64 output channels per line); pad the output channels", ret);
  if (mpu_skip(c)) return;
  int ho = (h - kh) / sh + 1, wo = (w - kw) / sw + 1;
  size_t win = (size_t)kh * kw * ci;
  nram_in(c, src, sizeof(TS) * (size_t)h * w * ci, name, "src (NRAM)", ret);
  require(c, kernel, sizeof(TK) * win * co, kWram, name, "kernel (WRAM)", ret);
  touch(c, kernel, sizeof(TK) * win * co, false, name, ret);
  nram_out(c, dst, sizeof(TD) * (size_t)ho * wo * co, name, "dst", ret);
  const int slots = co / 64;
  for (int y = 0; y < ho; ++y)
    for (int x = 0; x < wo; ++x)
      for (int o = 0; o < co; ++o) {
        const TK *f = kernel + ((size_t)(o % 64) * slots + o / 64) * win;
        double s = 0;
        for (int i = 0; i < kh; ++i)
          for (int j = 0; j < kw; ++j) {
            const TS *px = src + ((size_t)(y * sh + i) * w + (x * sw + j)) * ci;
            const TK *fk = f + ((size_t)i * kw + j) * ci;
            for (int k = 0; k < ci; ++k) s += double(float(px[k])) * double(float(fk[k]));
          }
        double out = s * scale;
        if (std::is_integral<TD>::value)  // int16 results: rounded and saturated (assumed; no overflow UB)
          out = std::min(32767.0, std::max(-32768.0, std::nearbyint(out)));
        dst[((size_t)y * wo + x) * co + o] = TD(float(out));
      }
  uint64_t macs = (uint64_t)ho * wo * co * win;
  c->tensor_macs += macs;
  const Profile &P = profile();
  c->charge_compute(kSplitTensor, P.tensor_overhead_cycles + 2.0 * macs / ops_per_cycle);
}
}  // namespace

#define BANG_EMU_DEF_CONV(TD, TS, TK)                                                                               \
  void __bang_conv(TD *d, const TS *s, const TK *k, int ci, int h, int w, int kh, int kw, int sw, int sh, int co, \
                   int pos) {                                                                                    \
    conv_impl(d, s, k, ci, h, w, kh, kw, sw, sh, co, profile().tensor_ops_per_cycle_int, std::ldexp(1.0f, pos), RET); \
  }
BANG_EMU_CONV_FIXED_TYPES(BANG_EMU_DEF_CONV)
#undef BANG_EMU_DEF_CONV
void __bang_conv(float *d, const float *s, const float *k, int ci, int h, int w, int kh, int kw, int sw, int sh, int co) {
  conv_impl(d, s, k, ci, h, w, kh, kw, sw, sh, co, profile().tensor_ops_per_cycle_fp32, 1.0f, RET);
}
void __bang_conv(half *d, const half *s, const half *k, int ci, int h, int w, int kh, int kw, int sw, int sh, int co) {
  conv_impl(d, s, k, ci, h, w, kh, kw, sw, sh, co, profile().tensor_ops_per_cycle_fp16, 1.0f, RET);
}

void __bang_matmul(float *dst, const float *lhs, const float *rhs, int M, int K, int N) {
  matmul_impl(dst, lhs, rhs, M, K, N, profile().tensor_ops_per_cycle_fp32, 1.0f, RET);
}
void __bang_matmul(float *dst, const half *lhs, const half *rhs, int M, int K, int N) {
  matmul_impl(dst, lhs, rhs, M, K, N, profile().tensor_ops_per_cycle_fp16, 1.0f, RET);
}
void __bang_matmul(half *dst, const half *lhs, const half *rhs, int M, int K, int N) {
  matmul_impl(dst, lhs, rhs, M, K, N, profile().tensor_ops_per_cycle_fp16, 1.0f, RET);
}
void __bang_matmul(float *dst, const int16_t *lhs, const int8_t *rhs, int M, int K, int N, int pos) {
  matmul_impl(dst, lhs, rhs, M, K, N, profile().tensor_ops_per_cycle_int, std::ldexp(1.0f, pos), RET);
}
void __bang_matmul(float *dst, const int8_t *lhs, const int8_t *rhs, int M, int K, int N, int pos) {
  matmul_impl(dst, lhs, rhs, M, K, N, profile().tensor_ops_per_cycle_int, std::ldexp(1.0f, pos), RET);
}
void __bang_matmul(float *dst, const int16_t *lhs, const int16_t *rhs, int M, int K, int N, int pos) {
  matmul_impl(dst, lhs, rhs, M, K, N, profile().tensor_ops_per_cycle_int, std::ldexp(1.0f, pos), RET);
}
