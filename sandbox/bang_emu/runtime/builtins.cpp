// BANG device builtins: memory movement (sync and deferred async), synchronisation, vector and tensor ops.
// Each builtin checks its operands (address space, bounds of the on-chip array or GDRAM buffer, in-flight
// async copies), does the work, and charges the cost model.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "runtime.h"

namespace bang_emu {

double io_bytes_per_cycle(bool mpu);

namespace {

// the caller's return address (natively), or the wasm kernel's code site (runtime.h caller_ret)
#define RET caller_ret(__builtin_return_address(0))

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
  if (space == kLdram || space == kOther) {
    // LDRAM is the kernel's own stack here: in a replay a builtin may touch only the kernel's frames, never
    // their links, or the device module's own data (memory.cpp, strict mode)
    if (strict_confinement())
      strict_check_local_range(c, lo, bytes, builtin, ret, reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
    return nullptr;
  }
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
  const int queue = (offchip(D.src) || offchip(D.dst)) ? 0 : 1;
  if (!c->pending.empty()) {
    uintptr_t s_lo = reinterpret_cast<uintptr_t>(src), d_lo = reinterpret_cast<uintptr_t>(dst);
    check_pending_access(c, s_lo, s_lo + sext, false, ret, bname, queue);
    check_pending_access(c, d_lo, d_lo + dext, true, ret, bname, queue);
  }

  PendingCopy pc;
  pc.dst_lo = reinterpret_cast<uintptr_t>(dst);
  pc.dst_hi = pc.dst_lo + dext;
  pc.src_lo = reinterpret_cast<uintptr_t>(src);
  pc.src_hi = pc.src_lo + sext;
  pc.queue = queue;
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
  const TimelineLane lane = pc.queue == 0 ? kLaneIo : kLaneMove;
  const TimelineKind kind = pc.queue == 1 ? kEvMove : offchip(D.src) ? kEvLoad : kEvStore;
  pc.ret = ret;
  // NRAM2NRAM runs on the compute stream, so even the async form completes at once (HDR note)
  if (!async || dir == NRAM2NRAM) {
    complete_pending(c, pc.queue);  // the DMA queue is in order: earlier async copies land first
    // a blocking copy also waits for earlier vector/tensor work (its data may come from it)
    double start = std::max({c->t, qfree, c->compute_free});
    double end = start + dur;
    pc.start = start;
    pc.end = end;
    perform_copy(c, pc);
    qfree = end;
    c->event(lane, kind, start, end);
    c->split[kSplitWait] += start - c->t;
    c->split[kSplitIo] += dur;
    c->t = end;
    return;
  }
  double start = std::max(c->t, qfree);
  qfree = start + dur;
  pc.start = start;
  pc.end = qfree;
  c->event(lane, kind, start, qfree);
  c->pending.push_back(pc);
}

}  // namespace

void perform_copy(CoreCtx *c, const PendingCopy &p) {
  char *d = static_cast<char *>(p.dst);
  const char *s = static_cast<const char *>(p.src);
  if (sram_ordered(c)) {  // cluster-shared SRAM: ordered by the barriers (sram.cpp)
    std::vector<char> tmp;
    if (is_sram_dir_src(p.dir)) s = sram_read_source(c, p, tmp);
    if (is_sram_dir_dst(p.dir)) {
      sram_log_write(c, p, s);
      return;
    }
    if (!tmp.empty()) {
      PendingCopy q = p;
      q.src = s;
      q.src_lo = reinterpret_cast<uintptr_t>(s);
      perform_copy(nullptr, q);
      return;
    }
  }
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
    if (queue < 0 || p.queue == queue) perform_copy(c, p);
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
  c->event(kLaneIssue, kEvSync, c->t, target);
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
// The 3-D form with separate destination and source shapes (cncc's __clang_bang header: dst_stride0, dst_segnum1,
// dst_stride1, dst_segnum2, src_stride0, src_segnum1, src_stride1, src_segnum2): (segnum1 + 1) * (segnum2 + 1)
// segments of `size` bytes on each side, enumerated in the same order (mlu-ops broadcasts with a source stride of
// 0: kernels/ms_deform_attn/ms_deform_attn_forward/ms_deform_attn_utils.h). Equal shapes are the 2-level copy;
// different ones run segment by segment (each charged as its own copy: an over-estimate of the time).
static void memcpy_3d(bool async, void *dst, const void *src, int size, int dir, int ds0, int dn1, int ds1, int dn2,
                      int ss0, int sn1, int ss1, int sn2, const void *ret) {
  if (dn1 == sn1 && dn2 == sn2) {
    memcpy_impl(async, dst, src, size, dir, ds0, ss0, dn1, ds1, ss1, dn2, true, ret);
    return;
  }
  if (dn1 < 0 || dn2 < 0 || sn1 < 0 || sn2 < 0)
    kernel_error("invalid-argument", "__memcpy: negative segment count", ret);
  long long total = (long long)(dn1 + 1) * (dn2 + 1);
  if (total != (long long)(sn1 + 1) * (sn2 + 1))
    kernel_error("invalid-argument",
                 "__memcpy: the destination has " + std::to_string(total) + " segments, the source " +
                     std::to_string((long long)(sn1 + 1) * (sn2 + 1)) + "; they must be equal",
                 ret);
  for (long long k = 0; k < total; ++k) {
    char *d = static_cast<char *>(dst) + (k / (dn1 + 1)) * (long long)ds1 + (k % (dn1 + 1)) * (long long)ds0;
    const char *s = static_cast<const char *>(src) + (k / (sn1 + 1)) * (long long)ss1 + (k % (sn1 + 1)) * (long long)ss0;
    memcpy_impl(async, d, s, size, dir, 0, 0, 0, 0, 0, 0, true, ret);
  }
}
void __memcpy(void *dst, const void *src, int size, mluMemcpyDirection_t dir, int ds0, int dn1, int ds1, int dn2,
              int ss0, int sn1, int ss1, int sn2) {
  memcpy_3d(false, dst, src, size, dir, ds0, dn1, ds1, dn2, ss0, sn1, ss1, sn2, RET);
}
void __memcpy_async(void *dst, const void *src, int size, mluMemcpyDirection_t dir, int ds0, int dn1, int ds1,
                    int dn2, int ss0, int sn1, int ss1, int sn2) {
  memcpy_3d(true, dst, src, size, dir, ds0, dn1, ds1, dn2, ss0, sn1, ss1, sn2, RET);
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
  double start = std::max(c->t, c->compute_free);
  c->event(kLaneIo, kEvStore, start, start + dur);
  c->t = start + dur;
  c->split[kSplitIo] += dur;
  c->bytes_moved["GDRAMSET"] += sizeof(T) * n;
}
// src[h][w] -> dst[w][h]; rotate: clockwise by 90 degrees, i.e. the transpose with each row reversed
template <class T>
static void transpose_impl(const char *name, bool rotate, T *dst, const T *src, int h, int w, const void *ret) {
  CoreCtx *c = core(name, ret);
  if (h <= 0 || w <= 0 || mpu_skip(c)) return;
  size_t bytes = sizeof(T) * (size_t)h * w;
  nram_in(c, src, bytes, name, "src", ret);
  nram_out(c, dst, bytes, name, "dst", ret);
  if (reinterpret_cast<const char *>(dst) < reinterpret_cast<const char *>(src) + bytes &&
      reinterpret_cast<const char *>(src) < reinterpret_cast<const char *>(dst) + bytes)
    kernel_error("invalid-argument", std::string(name) + ": dst must not overlap src", ret);
  for (int i = 0; i < h; ++i)
    for (int j = 0; j < w; ++j) dst[(size_t)j * h + (rotate ? h - 1 - i : i)] = src[(size_t)i * w + j];
  count_elements(c, name, (size_t)h * w);
  charge_vector(c, bytes, 2.0);
}

// the fills take any destination pointer and write elements of the value's type (cncc's __clang_bang header, arch
// >= 200: `__bang_write_value(void *dst, int elem_count, char|short|half|int|float... value)`); mlu-ops writes a
// byte mask into a float buffer with `__bang_write_value((float *)aux, n * sizeof(float), (int8_t)0xAA)`
#define BANG_EMU_DEF_T(T)                                                                             \
  void __bang_write_value(void *dst, int n, T v) { write_value_impl<T>("__bang_write_value", static_cast<T *>(dst), n, v, RET); } \
  void __bang_write_zero(T *dst, int n) { write_value_impl<T>("__bang_write_zero", dst, n, static_cast<T>(0), RET); }      \
  void __memset_nram(void *dst, int n, T v) { write_value_impl<T>("__memset_nram", static_cast<T *>(dst), n, v, RET); } \
  void __gdramset(void *dst, int n, T v) { gdramset_impl<T>(static_cast<T *>(dst), n, v, RET); }             \
  void __nramset(void *dst, int n, T v) { write_value_impl<T>("__nramset", static_cast<T *>(dst), n, v, RET); } \
  void __bang_transpose(T *dst, const T *src, int h, int w) { transpose_impl<T>("__bang_transpose", false, dst, src, h, w, RET); } \
  void __bang_rotate90(T *dst, const T *src, int h, int w) { transpose_impl<T>("__bang_rotate90", true, dst, src, h, w, RET); }
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

// The tensor unit's WRAM weight lines, one definition for __bang_reshape_filter (which writes them),
// __bang_conv and __bang_matmul (which read them): output channel / rhs column o of n goes to line o % 64,
// slot o / 64, i.e. to row (o % 64) * (n / 64) + o / 64 of `n` rows (n % 64 == 0).
static inline size_t filter_row(int o, int n) { return (size_t)(o % 64) * (n / 64) + o / 64; }

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
  for (int o = 0; o < n; ++o) memcpy(dst + filter_row(o, n) * hwc, src + (size_t)o * hwc, sizeof(T) * hwc);
  count_elements(c, name, (size_t)n * hwc);
  charge_vector(c, bytes, 2.0);
}

// dst[0] = the maximum (minimum) of src, followed by its first index as an unsigned integer of index_bytes:
// __bang_max/min use the element's width (how MLU270-era NMS code reads it: ((unsigned short *)dst)[1] for half),
// __bang_argmax/argmin 8 bytes (cncc 3xx docs: the index, then zeros, 10 B for half and 12 B for float)
template <class T>
static void extreme_impl(const char *name, bool take_max, T *dst, const T *src, int n, const void *ret,
                         size_t index_bytes = sizeof(T)) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_out(c, dst, sizeof(T) + index_bytes, name, "dst", ret);
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (take_max ? float(src[i]) > float(src[best]) : float(src[i]) < float(src[best])) best = i;
  T value = src[best];
  dst[0] = value;
  uint64_t idx = (uint64_t)best;  // little-endian host: the low index_bytes bytes are the narrower integer
  memcpy(reinterpret_cast<char *>(dst) + sizeof(T), &idx, index_bytes);
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n);
}

// One unsigned result computed from src: written to dst[0], or (dst null: the cncc 4 forms, `int k =
// __bang_count(src, n)`) returned to scalar code, which then waits for the vector unit like a sync.
template <class T, class F>
static unsigned int scan_impl(const char *name, unsigned int *dst, const T *src, int n, F f, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return f(src, 0);
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  if (dst) nram_out(c, dst, sizeof(unsigned int), name, "dst", ret);
  unsigned int r = f(src, n);
  if (dst) dst[0] = r;
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n);
  if (!dst) wait_queues(c, false, false);
  return r;
}
// how many elements of src are non-zero
template <class T>
static unsigned int count_nonzero(const T *src, int n) {
  unsigned int k = 0;
  for (int i = 0; i < n; ++i) k += float(src[i]) != 0.0f;
  return k;
}
// the index of the first non-zero element; 0xffffffff when there is none (cncc docs: "all ones")
template <class T>
static unsigned int first_nonzero(const T *src, int n) {
  for (int i = 0; i < n; ++i)
    if (float(src[i]) != 0.0f) return (unsigned int)i;
  return 0xffffffffu;
}

// The elements of src that keep(i) selects, packed in order at dst (the rest of dst unchanged); their count.
// Selected before dst is written, so the selector may read dst itself.
template <class T, class K>
static unsigned int pack_selected(CoreCtx *c, const char *name, T *dst, const T *src, int n, K keep, const void *ret) {
  thread_local std::vector<T> picked;
  picked.clear();
  for (int i = 0; i < n; ++i)
    if (keep(i)) picked.push_back(src[i]);
  if (!picked.empty()) {
    nram_out(c, dst, sizeof(T) * picked.size(), name, "dst", ret);
    memmove(dst, picked.data(), sizeof(T) * picked.size());
  }
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * n, 2.0);
  return (unsigned int)picked.size();
}

// the elements of src whose mask is non-zero, packed in order at dst (the rest of dst is left unchanged); the
// mask may be dst itself (MLU270 YOLOv3 lab code does this), so the selection is made before dst is written
template <class T>
static unsigned int collect_impl(const char *name, T *dst, const T *src, const T *mask, int n, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return 0;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_in(c, mask, sizeof(T) * n, name, "mask", ret);
  return pack_selected(c, name, dst, src, n, [mask](int i) { return float(mask[i]) != 0.0f; }, ret);
}

// __bang_filter_bitindex(dst, src, bitmask, n): the elements of src whose bit is set, packed in order at dst (the
// count returned). Bit order most significant first, element i <-> bit 7 - i % 8 of byte i / 8: mlu-ops' complex
// abs (kernels/abs/abs_block.mlu) selects the real parts [re, im, re, im...] with 0xAA and the imaginary ones with
// 0x55 (assumed from that use; no document seen).
template <class T>
static unsigned int filter_bitindex_impl(T *dst, const T *src, const void *bitmask, int n, const void *ret) {
  const char *name = "__bang_filter_bitindex";
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return 0;
  nram_in(c, src, sizeof(T) * n, name, "src", ret);
  nram_in(c, bitmask, (size_t)(n + 7) / 8, name, "bitmask", ret);
  const unsigned char *bits = static_cast<const unsigned char *>(bitmask);
  return pack_selected(c, name, dst, src, n, [bits](int i) { return (bits[i / 8] & (0x80u >> (i % 8))) != 0; }, ret);
}

#define BANG_EMU_DEF_F(T)                                                                                          \
  unsigned int __bang_filter_bitindex(T *d, const T *s, const void *m, int n) { return filter_bitindex_impl<T>(d, s, m, n, RET); } \
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
  void __bang_argmax(T *d, const T *s, int n) { extreme_impl<T>("__bang_argmax", true, d, s, n, RET, 8); } \
  void __bang_argmin(T *d, const T *s, int n) { extreme_impl<T>("__bang_argmin", false, d, s, n, RET, 8); } \
  void __bang_count(unsigned int *d, const T *s, int n) { scan_impl<T>("__bang_count", d, s, n, count_nonzero<T>, RET); } \
  unsigned int __bang_count(const T *s, int n) { return scan_impl<T>("__bang_count", nullptr, s, n, count_nonzero<T>, RET); } \
  void __bang_findfirst1(unsigned int *d, const T *s, int n) { scan_impl<T>("__bang_findfirst1", d, s, n, first_nonzero<T>, RET); } \
  unsigned int __bang_findfirst1(const T *s, int n) { return scan_impl<T>("__bang_findfirst1", nullptr, s, n, first_nonzero<T>, RET); } \
  void __bang_collect(T *d, const T *s, const T *m, int n) { collect_impl<T>("__bang_collect", d, s, m, n, RET); } \
  unsigned int __bang_filter(T *d, const T *s, const T *m, int n) { return collect_impl<T>("__bang_filter", d, s, m, n, RET); }
BANG_EMU_DEF_F(float)
BANG_EMU_DEF_F(half)
#undef BANG_EMU_DEF_F

// __cn_vector_hypot_f32(n, dst, a, b): dst[i] = hypot(a[i], b[i]), the vector form of libdevice's
// __cn_scalar_hypot_f32 (argument order from mlu-ops' complex abs, kernels/abs/abs_block.mlu)
void __cn_vector_hypot_f32(int n, float *d, const float *a, const float *b) {
  binary<float>("__cn_vector_hypot_f32", d, a, b, n, [](float x, float y) { return std::hypot(x, y); }, RET);
}

// NRAM to NRAM on the vector unit (size in bytes): segnum segments of size bytes, segment i from src + i * src_stride
// to dst + i * dst_stride (segnum counts the segments, unlike __memcpy's "minus one": assumed, README)
static void move_impl(void *dst, const void *src, int size, int ds, int ss, int segnum, const void *ret) {
  const char *name = "__bang_move";
  CoreCtx *c = core(name, ret);
  if (size < 0 || ds < 0 || ss < 0 || segnum < 0)
    kernel_error("invalid-argument", "__bang_move: negative size, stride or segment count", ret);
  if (size == 0 || segnum == 0 || mpu_skip(c)) return;
  size_t dext = (size_t)(segnum - 1) * ds + size, sext = (size_t)(segnum - 1) * ss + size;
  nram_in(c, src, sext, name, "src", ret);
  nram_out(c, dst, dext, name, "dst", ret);
  for (int i = 0; i < segnum; ++i)
    memmove(static_cast<char *>(dst) + (size_t)i * ds, static_cast<const char *>(src) + (size_t)i * ss, size);
  count_elements(c, name, (size_t)size * segnum);  // bytes: the operands are untyped
  charge_vector(c, (size_t)size * segnum);
}
void __bang_move(void *dst, const void *src, int size) { move_impl(dst, src, size, 0, 0, 1, RET); }
void __bang_move(void *dst, const void *src, int size, int dst_stride, int src_stride, int segnum) {
  move_impl(dst, src, size, dst_stride, src_stride, segnum, RET);
}

// dst[i] = table[src[i]]; an index outside the table is an error (the hardware's behaviour is undocumented). dst
// may be src (mlu-ops looks up 0/1 masks in place): each element is read before it is written.
template <class TD, class TS>
static void lut_impl(TD *dst, const TS *src, const TD *table, int n, int len, const void *ret) {
  static_assert(sizeof(TD) == sizeof(TS), "__bang_lut: dst, src and table have one element size");
  const char *name = "__bang_lut";
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  check_count(len, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(TS) * (size_t)n, name, "src", ret);
  nram_in(c, table, sizeof(TD) * (size_t)len, name, "table", ret);
  nram_out(c, dst, sizeof(TD) * (size_t)n, name, "dst", ret);
  for (int i = 0; i < n; ++i)
    if (src[i] >= (TS)len)
      kernel_error("invalid-argument", "__bang_lut: src[" + std::to_string(i) + "] = " + std::to_string(src[i]) +
                                           " is outside the table of " + std::to_string(len) + " entries", ret);
  for (int i = 0; i < n; ++i) dst[i] = table[src[i]];
  count_elements(c, name, n);
  charge_vector(c, sizeof(TD) * (size_t)n);
}
void __bang_lut(int32_t *d, const uint32_t *s, const int32_t *t, int n, int len) { lut_impl(d, s, t, n, len, RET); }
void __bang_lut(int16_t *d, const uint16_t *s, const int16_t *t, int n, int len) { lut_impl(d, s, t, n, len, RET); }

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

// rhs layout in WRAM (README, "__bang_matmul"): N rows of K in __bang_reshape_filter's line order (column n in
// line n % 64, slot n / 64: what mlu-ops' FFT writes before every __bang_matmul, fft_generic_butterfly.h), which
// is plain N rows of K for N <= 64. BANG_EMU_MATMUL_RHS=nk reads plain N rows of K at any N, =kn K rows of N (the
// right matrix as the AICS lab copies it): experiments, not what the grader runs.
enum RhsLayout { kRhsNK, kRhsKN, kRhsFilter };
RhsLayout rhs_layout() {
  static const RhsLayout layout = [] {
    const char *e = getenv("BANG_EMU_MATMUL_RHS");
    if (e && !strcmp(e, "kn")) return kRhsKN;
    if (e && !strcmp(e, "nk")) return kRhsNK;
    return kRhsFilter;
  }();
  return layout;
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
  RhsLayout layout = rhs_layout();
  if (layout == kRhsFilter && N > 64) {
    if (N % 64)
      kernel_error("invalid-argument",
                   "__bang_matmul: N = " + std::to_string(N) + " is above 64 but not a multiple of 64: the right "
                   "matrix's WRAM lines hold column n in line n % 64, slot n / 64 (the __bang_reshape_filter "
                   "order), which needs whole slots; pad N to a multiple of 64 with zero columns",
                   ret);
    for (int n = 0; n < N; ++n) {
      const size_t row = filter_row(n, N);
      for (int k = 0; k < K; ++k) b[(size_t)k * N + n] = float(rhs[row * K + k]);
    }
  } else if (layout != kRhsKN) {
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
  for (int y = 0; y < ho; ++y)
    for (int x = 0; x < wo; ++x)
      for (int o = 0; o < co; ++o) {
        const TK *f = kernel + filter_row(o, co) * win;
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

// ------------------------------------------------------------------------------------- conversions
namespace {
template <class TD, class TS, class Conv>
void convert(const char *name, TD *dst, const TS *src, int n, Conv conv, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(TS) * (size_t)n, name, "src", ret);
  nram_out(c, dst, sizeof(TD) * (size_t)n, name, "dst", ret);
  for (int i = 0; i < n; ++i) dst[i] = conv(src[i]);
  count_elements(c, name, n);
  charge_vector(c, std::max(sizeof(TS), sizeof(TD)) * (size_t)n);  // the wider side sets the vector passes
}
}  // namespace

#define BANG_EMU_DEF_CVT(mode)                                                                                  \
  void __bang_float2half_##mode(half *d, const float *s, int n) {                                             \
    convert("__bang_float2half_" #mode, d, s, n, [](float x) { return round_to<HalfFmt>(x, round_##mode); }, RET); \
  }                                                                                                           \
  void __bang_float2bfloat16_##mode(bfloat16_t *d, const float *s, int n) {                                   \
    convert("__bang_float2bfloat16_" #mode, d, s, n, [](float x) { return round_to<Bf16Fmt>(x, round_##mode); }, RET); \
  }                                                                                                           \
  void __bang_half2bfloat16_##mode(bfloat16_t *d, const half *s, int n) {                                     \
    convert("__bang_half2bfloat16_" #mode, d, s, n, [](half x) { return round_to<Bf16Fmt>((float)x, round_##mode); }, RET); \
  }
BANG_EMU_ROUNDINGS(BANG_EMU_DEF_CVT)
#undef BANG_EMU_DEF_CVT

void __bang_half2float(float *d, const half *s, int n) {
  convert("__bang_half2float", d, s, n, [](half x) { return (float)x; }, RET);
}
void __bang_bfloat162float(float *d, const bfloat16_t *s, int n) {
  convert("__bang_bfloat162float", d, s, n, [](bfloat16_t x) { return (float)x; }, RET);
}

// ------------------------------------------------------------------------- comparisons with a scalar
namespace {
template <class T, class Cmp>
void compare_scalar(const char *name, T *dst, const T *src, T value, int n, Cmp cmp, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  nram_in(c, src, sizeof(T) * (size_t)n, name, "src", ret);
  nram_out(c, dst, sizeof(T) * (size_t)n, name, "dst", ret);
  // compared in the operands' own type (a float detour would merge large int32 values)
  typedef typename std::conditional<std::is_integral<T>::value, T, float>::type V;
  V v = V(value);
  for (int i = 0; i < n; ++i) dst[i] = T(cmp(V(src[i]), v) ? 1 : 0);
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * (size_t)n);
}
}  // namespace
#define BANG_EMU_DEF_CMP_SCALAR(op, T, expr)                                                                    \
  void __bang_##op##_scalar(T *d, const T *s, T v, int n) {                                                   \
    compare_scalar<T>("__bang_" #op "_scalar", d, s, v, n, [](auto x, auto y) { return expr; }, RET);         \
  }
#define BANG_EMU_DEF_CMP_TYPES(op, expr)                                                                        \
  BANG_EMU_DEF_CMP_SCALAR(op, float, expr) BANG_EMU_DEF_CMP_SCALAR(op, half, expr)                            \
  BANG_EMU_DEF_CMP_SCALAR(op, bfloat16_t, expr) BANG_EMU_DEF_CMP_SCALAR(op, int, expr)                        \
  BANG_EMU_DEF_CMP_SCALAR(op, int16_t, expr) BANG_EMU_DEF_CMP_SCALAR(op, int8_t, expr)                        \
  BANG_EMU_DEF_CMP_SCALAR(op, unsigned int, expr) BANG_EMU_DEF_CMP_SCALAR(op, uint16_t, expr)                 \
  BANG_EMU_DEF_CMP_SCALAR(op, uint8_t, expr)
BANG_EMU_DEF_CMP_TYPES(eq, x == y)
BANG_EMU_DEF_CMP_TYPES(ne, x != y)
BANG_EMU_DEF_CMP_TYPES(lt, x < y)
BANG_EMU_DEF_CMP_TYPES(le, x <= y)
BANG_EMU_DEF_CMP_TYPES(gt, x > y)
BANG_EMU_DEF_CMP_TYPES(ge, x >= y)
#undef BANG_EMU_DEF_CMP_TYPES
#undef BANG_EMU_DEF_CMP_SCALAR

// ------------------------------------------------------------------------------------------ fusion
namespace {
// One operand of __bang_fusion: a vector (m elements, repeated over n) or a scalar.
template <class T>
struct FusionArg {
  const T *p;
  T v;
  T at(int i, int m) const { return p ? p[i % m] : v; }
};

template <class T>
void fusion_impl(bang_fusion_op_t op, T *dst, const T *a, FusionArg<T> b, FusionArg<T> c, int n, int m,
                 const void *ret) {
  const char *name = "__bang_fusion";
  CoreCtx *ctx = core(name, ret);
  check_count(n, name, ret);
  if (m < 0) m = n;
  if (op < FUSION_FMA || op > FUSION_FSS)
    kernel_error("invalid-argument", "__bang_fusion: " + std::to_string((int)op) + " is not a FUSION_* operation",
                 ret);
  if (n == 0 || mpu_skip(ctx)) return;
  if (m <= 0 || n % m)
    kernel_error("invalid-argument", "__bang_fusion: the operand count " + std::to_string(m) +
                                         " must be positive and divide the element count " + std::to_string(n), ret);
  nram_in(ctx, a, sizeof(T) * (size_t)n, name, "src0", ret);
  if (b.p) nram_in(ctx, b.p, sizeof(T) * (size_t)m, name, "src1", ret);
  if (c.p) nram_in(ctx, c.p, sizeof(T) * (size_t)m, name, "src2", ret);
  nram_out(ctx, dst, sizeof(T) * (size_t)n, name, "dst", ret);
  // integers exactly, floating types in double with one rounding at the end (a fused instruction; assumed)
  typedef typename std::conditional<std::is_integral<T>::value, long long, double>::type V;
  for (int i = 0; i < n; ++i) {
    V x = V(a[i]), y = V(b.at(i, m)), z = V(c.at(i, m)), r;
    switch (op) {
      case FUSION_FMA: r = x * y + z; break;
      case FUSION_FMS: r = x * y - z; break;
      case FUSION_FAM: r = (x + y) * z; break;
      case FUSION_FSM: r = (x - y) * z; break;
      case FUSION_FAA: r = x + y + z; break;
      case FUSION_FAS: r = x + y - z; break;
      case FUSION_FSA: r = x - y + z; break;
      default: r = x - y - z; break;  // FUSION_FSS
    }
    dst[i] = T(r);
  }
  count_elements(ctx, name, n);
  charge_vector(ctx, sizeof(T) * (size_t)n);
}
template <class T> FusionArg<T> farg(const T *p) { return FusionArg<T>{p, T(0)}; }
template <class T> FusionArg<T> farg(T v) { return FusionArg<T>{nullptr, v}; }
}  // namespace
#define BANG_EMU_DEF_FUSION(T)                                                                                  \
  void __bang_fusion(bang_fusion_op_t op, T *d, const T *a, const T *b, const T *c, int n, int m) {           \
    fusion_impl<T>(op, d, a, farg<T>(b), farg<T>(c), n, m, RET);                                              \
  }                                                                                                           \
  void __bang_fusion(bang_fusion_op_t op, T *d, const T *a, const T *b, T c, int n, int m) {                  \
    fusion_impl<T>(op, d, a, farg<T>(b), farg<T>(c), n, m, RET);                                              \
  }                                                                                                           \
  void __bang_fusion(bang_fusion_op_t op, T *d, const T *a, T b, const T *c, int n, int m) {                  \
    fusion_impl<T>(op, d, a, farg<T>(b), farg<T>(c), n, m, RET);                                              \
  }                                                                                                           \
  void __bang_fusion(bang_fusion_op_t op, T *d, const T *a, T b, T c, int n, int m) {                         \
    fusion_impl<T>(op, d, a, farg<T>(b), farg<T>(c), n, m, RET);                                              \
  }
BANG_EMU_FUSION_TYPES(BANG_EMU_DEF_FUSION)
#undef BANG_EMU_DEF_FUSION

// ----------------------------------------------------------------------------------------- atomics
namespace {
std::mutex g_atomic_mutex;  // one lock for every atomic of every core: they are rare, correctness first

enum AtomicOp { kAtAdd, kAtInc, kAtDec, kAtMax, kAtMin, kAtAnd, kAtOr, kAtXor, kAtExch, kAtCas };

template <class T>
T atomic_apply(AtomicOp op, T old, T v, T cmp) {
  typedef typename std::conditional<sizeof(T) == 2, uint16_t, uint32_t>::type B;
  B ob, vb;
  memcpy(&ob, &old, sizeof(T));
  memcpy(&vb, &v, sizeof(T));
  auto from_bits = [](B b) { T t; memcpy(&t, &b, sizeof(T)); return t; };
  switch (op) {
    case kAtAdd: return T(old + v);
    case kAtInc: return old >= v ? T(0) : T(old + T(1));  // CUDA atomicInc
    case kAtDec: return (old == T(0) || old > v) ? v : T(old - T(1));  // CUDA atomicDec
    case kAtMax: return old < v ? v : old;
    case kAtMin: return v < old ? v : old;
    case kAtAnd: return from_bits(B(ob & vb));
    case kAtOr: return from_bits(B(ob | vb));
    case kAtXor: return from_bits(B(ob ^ vb));
    case kAtExch: return v;
    default: return old == cmp ? v : old;  // kAtCas
  }
}

// The target of an atomic: GDRAM (a device buffer) or SRAM; checked, and charged as a blocking read-modify-write
// on the IO-DMA path (bytes both ways).
const GdramBuf *atomic_target(CoreCtx *c, const char *name, const void *p, size_t bytes, const void *ret) {
  int space = space_of(c, reinterpret_cast<uintptr_t>(p)) == kSram ? kSram : kGdram;
  const void *buf = require(c, p, bytes, space, name, "target (GDRAM or SRAM)", ret);
  touch(c, p, bytes, true, name, ret);
  if (space == kSram) sram_publish_own(c);  // atomics act on the arena at once
  const Profile &P = profile();
  double dur = P.io_latency_cycles + 2.0 * std::max<size_t>(bytes, 64) / io_bytes_per_cycle(c->is_mpu);
  double start = std::max(c->t, c->compute_free);
  c->event(kLaneIo, kEvStore, start, start + dur);
  c->split[kSplitWait] += start - c->t;
  c->split[kSplitIo] += dur;
  c->t = start + dur;
  c->bytes_moved[space == kGdram ? "GDRAM2ATOMIC" : "SRAM2ATOMIC"] += bytes;
  c->bytes_moved[space == kGdram ? "ATOMIC2GDRAM" : "ATOMIC2SRAM"] += bytes;
  return space == kGdram ? static_cast<const GdramBuf *>(buf) : nullptr;
}

// target[i] = op(target[i], values[i or 0]); old values to dst (NRAM) when dst is given
template <class T>
void atomic_impl(const char *name, AtomicOp op, T *dst, T *target, const T *values, const T *compares, T value,
                 T compare, int n, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0) return;
  if (values) nram_in(c, values, sizeof(T) * (size_t)n, name, "src2", ret);
  if (compares) nram_in(c, compares, sizeof(T) * (size_t)n, name, "compare", ret);
  if (dst) nram_out(c, dst, sizeof(T) * (size_t)n, name, "dst", ret);
  const GdramBuf *buf = atomic_target(c, name, target, sizeof(T) * (size_t)n, ret);
  {
    std::lock_guard<std::mutex> lock(g_atomic_mutex);
    for (int i = 0; i < n; ++i) {
      T old = target[i];
      target[i] = atomic_apply<T>(op, old, values ? values[i] : value, compares ? compares[i] : compare);
      if (dst) dst[i] = old;
    }
  }
  if (buf) {
    uintptr_t lo = reinterpret_cast<uintptr_t>(target);
    mark_written(buf, lo, lo + sizeof(T) * (size_t)n);
  }
  count_elements(c, name, n);
}
}  // namespace

#define BANG_EMU_DEF_ATOMIC(OP, T)                                                                              \
  void __bang_atomic_##OP(T *d, T *s1, T v) {                                                                 \
    atomic_impl<T>("__bang_atomic_" #OP, k_at_##OP(), d, s1, nullptr, nullptr, v, (T)0, 1, RET);              \
  }                                                                                                           \
  void __bang_atomic_##OP(T *d, T *s1, const T *v, int n) {                                                   \
    atomic_impl<T>("__bang_atomic_" #OP, k_at_##OP(), d, s1, v, nullptr, (T)0, (T)0, n, RET);                 \
  }
namespace {
constexpr AtomicOp k_at_add() { return kAtAdd; }
constexpr AtomicOp k_at_inc() { return kAtInc; }
constexpr AtomicOp k_at_dec() { return kAtDec; }
constexpr AtomicOp k_at_max() { return kAtMax; }
constexpr AtomicOp k_at_min() { return kAtMin; }
constexpr AtomicOp k_at_and() { return kAtAnd; }
constexpr AtomicOp k_at_or() { return kAtOr; }
constexpr AtomicOp k_at_xor() { return kAtXor; }
constexpr AtomicOp k_at_exch() { return kAtExch; }
}  // namespace
#define BANG_EMU_DEF_ATOMIC_ALL(OP) BANG_EMU_ATOMIC_TYPES(BANG_EMU_DEF_ATOMIC, OP)
BANG_EMU_ATOMIC_OPS(BANG_EMU_DEF_ATOMIC_ALL)
#define BANG_EMU_DEF_ATOMIC_CAS(unused, T)                                                                      \
  void __bang_atomic_cas(T *d, T *s1, T cmp, T v) {                                                           \
    atomic_impl<T>("__bang_atomic_cas", kAtCas, d, s1, nullptr, nullptr, v, cmp, 1, RET);                     \
  }                                                                                                           \
  void __bang_atomic_cas(T *d, T *s1, const T *cmp, const T *v, int n) {                                      \
    atomic_impl<T>("__bang_atomic_cas", kAtCas, d, s1, v, cmp, (T)0, (T)0, n, RET);                           \
  }
BANG_EMU_ATOMIC_TYPES(BANG_EMU_DEF_ATOMIC_CAS, cas)
#define BANG_EMU_DEF_ATOMIC_REDUCE(OP, T)                                                                       \
  void __bang_atomic_reduce_##OP(T *d, const T *s, int n) {                                                   \
    atomic_impl<T>("__bang_atomic_reduce_" #OP, k_at_##OP(), nullptr, d, s, nullptr, (T)0, (T)0, n, RET);     \
  }
BANG_EMU_DEF_ATOMIC_REDUCE(add, float) BANG_EMU_DEF_ATOMIC_REDUCE(add, half)
BANG_EMU_DEF_ATOMIC_REDUCE(add, int) BANG_EMU_DEF_ATOMIC_REDUCE(add, short)
BANG_EMU_DEF_ATOMIC_REDUCE(max, float) BANG_EMU_DEF_ATOMIC_REDUCE(max, half)
BANG_EMU_DEF_ATOMIC_REDUCE(max, int) BANG_EMU_DEF_ATOMIC_REDUCE(max, short)
BANG_EMU_DEF_ATOMIC_REDUCE(min, float) BANG_EMU_DEF_ATOMIC_REDUCE(min, half)
BANG_EMU_DEF_ATOMIC_REDUCE(min, int) BANG_EMU_DEF_ATOMIC_REDUCE(min, short)
#undef BANG_EMU_DEF_ATOMIC_REDUCE
#undef BANG_EMU_DEF_ATOMIC_CAS
#undef BANG_EMU_DEF_ATOMIC_ALL
#undef BANG_EMU_DEF_ATOMIC

// ------------------------------------------------------------------------------- 3xx elementwise families
namespace {
// the type the arithmetic runs in: float for the floating types, the integer itself otherwise
template <class T>
using Calc = typename std::conditional<std::is_integral<T>::value, long long, float>::type;

template <class T>
T bits_op(T a, T b, int op) {  // 0 and, 1 or, 2 xor, 3 not(a)
  typedef typename std::conditional<sizeof(T) == 1, uint8_t,
                                    typename std::conditional<sizeof(T) == 2, uint16_t, uint32_t>::type>::type B;
  B x, y, r;
  memcpy(&x, &a, sizeof(T));
  memcpy(&y, &b, sizeof(T));
  r = op == 0 ? B(x & y) : op == 1 ? B(x | y) : op == 2 ? B(x ^ y) : B(~x);
  T t;
  memcpy(&t, &r, sizeof(T));
  return t;
}

template <class T, class F>
void elementwise(const char *name, T *dst, const T *a, const T *b, int n, int m, F f, const void *ret) {
  CoreCtx *c = core(name, ret);
  check_count(n, name, ret);
  if (n == 0 || mpu_skip(c)) return;
  if (b && (m <= 0 || n % m))
    kernel_error("invalid-argument", std::string(name) + ": src_n (" + std::to_string(n) +
                                         ") must be a positive multiple of seg_n (" + std::to_string(m) + ")", ret);
  nram_in(c, a, sizeof(T) * (size_t)n, name, "src0", ret);
  if (b) nram_in(c, b, sizeof(T) * (size_t)m, name, "src1", ret);
  nram_out(c, dst, sizeof(T) * (size_t)n, name, "dst", ret);
  for (int i = 0; i < n; ++i) dst[i] = f(a[i], b ? b[i % m] : a[i]);
  count_elements(c, name, n);
  charge_vector(c, sizeof(T) * (size_t)n);
}

template <class T> T op_and(T a, T b) { return T((Calc<T>(a) != 0 && Calc<T>(b) != 0) ? 1 : 0); }
template <class T> T op_or(T a, T b) { return T((Calc<T>(a) != 0 || Calc<T>(b) != 0) ? 1 : 0); }
template <class T> T op_xor(T a, T b) { return T(((Calc<T>(a) != 0) != (Calc<T>(b) != 0)) ? 1 : 0); }
template <class T> T op_band(T a, T b) { return bits_op(a, b, 0); }
template <class T> T op_bor(T a, T b) { return bits_op(a, b, 1); }
template <class T> T op_bxor(T a, T b) { return bits_op(a, b, 2); }
template <class T> T op_maxequal(T a, T b) { return Calc<T>(a) < Calc<T>(b) ? b : a; }
template <class T> T op_minequal(T a, T b) { return Calc<T>(b) < Calc<T>(a) ? b : a; }
template <class T> T op_div(T a, T b) {
  if (std::is_integral<T>::value && Calc<T>(b) == 0) return T(0);  // no SIGFPE from a vector unit (assumed 0)
  return T(Calc<T>(a) / Calc<T>(b));
}
template <class T> T op_lt(T a, T b) { return T(Calc<T>(a) < Calc<T>(b) ? 1 : 0); }
template <class T> T op_le(T a, T b) { return T(Calc<T>(a) <= Calc<T>(b) ? 1 : 0); }
template <class T> T op_eq(T a, T b) { return T(Calc<T>(a) == Calc<T>(b) ? 1 : 0); }
template <class T> T op_ge(T a, T b) { return T(Calc<T>(a) >= Calc<T>(b) ? 1 : 0); }
template <class T> T op_ne(T a, T b) { return T(Calc<T>(a) != Calc<T>(b) ? 1 : 0); }
template <class T> T op_abs(T a, T) { return Calc<T>(a) < 0 ? T(-Calc<T>(a)) : a; }
template <class T> T op_floor(T a, T) { return std::is_integral<T>::value ? a : T(std::floor(float(a))); }
template <class T> T op_log2(T a, T) { return T(std::log2(float(a))); }
template <class T> T op_sin(T a, T) { return T(std::sin(float(a))); }
template <class T> T op_cos(T a, T) { return T(std::cos(float(a))); }
template <class T> T op_exp(T a, T) { return T(std::exp(float(a))); }
template <class T> T op_rsqrt(T a, T) { return T(1.0f / std::sqrt(float(a))); }
template <class T> T op_bnot(T a, T) { return bits_op(a, a, 3); }
template <class T> T op_not(T a, T) { return T(Calc<T>(a) == 0 ? 1 : 0); }
template <class T> T op_add(T a, T b) { return T(Calc<T>(a) + Calc<T>(b)); }
template <class T> T op_sub(T a, T b) { return T(Calc<T>(a) - Calc<T>(b)); }
template <class T> T op_mul(T a, T b) { return T(Calc<T>(a) * Calc<T>(b)); }
}  // namespace

#define BANG_EMU_DEF_BINARY(op, T)                                                                              \
  void __bang_##op(T *d, const T *a, const T *b, int n) { elementwise<T>("__bang_" #op, d, a, b, n, n, op_##op<T>, RET); }
#define BANG_EMU_DEF_UNARY(op, T)                                                                               \
  void __bang_##op(T *d, const T *a, int n) { elementwise<T>("__bang_" #op, d, a, nullptr, n, n, op_##op<T>, RET); }
#define BANG_EMU_DEF_CYCLE(op, T)                                                                               \
  void __bang_cycle_##op(T *d, const T *a, const T *b, int n, int m) {                                        \
    elementwise<T>("__bang_cycle_" #op, d, a, b, n, m, op_##op<T>, RET);                                      \
  }
#define BANG_EMU_DEF_BINARY_ALL(op) BANG_EMU_ELEMENTWISE_TYPES(BANG_EMU_DEF_BINARY, op)
#define BANG_EMU_DEF_UNARY_ALL(op) BANG_EMU_ELEMENTWISE_TYPES(BANG_EMU_DEF_UNARY, op)
BANG_EMU_BINARY_OPS(BANG_EMU_DEF_BINARY_ALL)
BANG_EMU_UNARY_OPS(BANG_EMU_DEF_UNARY_ALL)
#define BANG_EMU_DEF_CYCLE_ALL(op) BANG_EMU_ELEMENTWISE_TYPES(BANG_EMU_DEF_CYCLE, op)
BANG_EMU_DEF_CYCLE_ALL(lt) BANG_EMU_DEF_CYCLE_ALL(le) BANG_EMU_DEF_CYCLE_ALL(eq) BANG_EMU_DEF_CYCLE_ALL(ge)
BANG_EMU_DEF_CYCLE_ALL(ne) BANG_EMU_DEF_CYCLE_ALL(and) BANG_EMU_DEF_CYCLE_ALL(or) BANG_EMU_DEF_CYCLE_ALL(band)
BANG_EMU_DEF_CYCLE_ALL(bor) BANG_EMU_DEF_CYCLE_ALL(maxequal) BANG_EMU_DEF_CYCLE_ALL(minequal)
#undef BANG_EMU_DEF_CYCLE_ALL
#undef BANG_EMU_DEF_UNARY_ALL
#undef BANG_EMU_DEF_BINARY_ALL
#define BANG_EMU_DEF_INT_SCALAR(T)                                                                              \
  void __bang_add_scalar(T *d, const T *s, T v, int n) {                                                      \
    elementwise<T>("__bang_add_scalar", d, s, nullptr, n, n, [v](T a, T) { return op_add<T>(a, v); }, RET);   \
  }                                                                                                           \
  void __bang_sub_scalar(T *d, const T *s, T v, int n) {                                                      \
    elementwise<T>("__bang_sub_scalar", d, s, nullptr, n, n, [v](T a, T) { return op_sub<T>(a, v); }, RET);   \
  }                                                                                                           \
  void __bang_mul_scalar(T *d, const T *s, T v, int n) {                                                      \
    elementwise<T>("__bang_mul_scalar", d, s, nullptr, n, n, [v](T a, T) { return op_mul<T>(a, v); }, RET);   \
  }                                                                                                           \
  void __bang_add(T *d, const T *a, const T *b, int n) { elementwise<T>("__bang_add", d, a, b, n, n, op_add<T>, RET); } \
  void __bang_sub(T *d, const T *a, const T *b, int n) { elementwise<T>("__bang_sub", d, a, b, n, n, op_sub<T>, RET); } \
  void __bang_mul(T *d, const T *a, const T *b, int n) { elementwise<T>("__bang_mul", d, a, b, n, n, op_mul<T>, RET); } \
  void __bang_cycle_add(T *d, const T *a, const T *b, int n, int m) { elementwise<T>("__bang_cycle_add", d, a, b, n, m, op_add<T>, RET); } \
  void __bang_cycle_sub(T *d, const T *a, const T *b, int n, int m) { elementwise<T>("__bang_cycle_sub", d, a, b, n, m, op_sub<T>, RET); } \
  void __bang_cycle_mul(T *d, const T *a, const T *b, int n, int m) { elementwise<T>("__bang_cycle_mul", d, a, b, n, m, op_mul<T>, RET); } \
  void __sramset(T *d, int n, T v) { sramset_impl<T>(d, n, v, RET); }
namespace {
template <class T>
void sramset_impl(T *dst, int n, T value, const void *ret) {
  CoreCtx *c = core("__sramset", ret);
  check_count(n, "__sramset", ret);
  if (n == 0) return;
  require(c, dst, sizeof(T) * (size_t)n, kSram, "__sramset", "dst", ret);
  touch(c, dst, sizeof(T) * (size_t)n, true, "__sramset", ret);
  sram_publish_own(c);  // the fill acts on the arena at once: the core's own held SRAM writes come first
  std::fill(dst, dst + n, value);
  count_elements(c, "__sramset", n);
  const Profile &P = profile();
  // an on-chip fill on the move path: latency + bytes at its rate, blocking like __gdramset
  double dur = P.move_latency_cycles + sizeof(T) * (double)n / P.move_bytes_per_cycle;
  double start = std::max(c->t, c->compute_free);
  c->event(kLaneMove, kEvMove, start, start + dur);
  c->t = start + dur;
  c->split[kSplitIo] += dur;
}
}  // namespace
BANG_EMU_DEF_INT_SCALAR(int)
BANG_EMU_DEF_INT_SCALAR(int16_t)
#undef BANG_EMU_DEF_INT_SCALAR
void __sramset(float *d, int n, float v) { sramset_impl<float>(d, n, v, RET); }
void __sramset(half *d, int n, half v) { sramset_impl<half>(d, n, v, RET); }

#define BANG_EMU_DEF_FIX(mode)                                                                                  \
  void __bang_float2int32_##mode(int *d, const float *s, int n, int pos) {                                    \
    convert("__bang_float2int32_" #mode, d, s, n,                                                             \
            [pos](float x) { return round_int<int>(std::ldexp((double)x, -pos), round_##mode); }, RET);       \
  }                                                                                                           \
  void __bang_float2int16_##mode(int16_t *d, const float *s, int n, int pos) {                                \
    convert("__bang_float2int16_" #mode, d, s, n,                                                             \
            [pos](float x) { return round_int<int16_t>(std::ldexp((double)x, -pos), round_##mode); }, RET);   \
  }                                                                                                           \
  void __bang_half2int16_##mode(int16_t *d, const half *s, int n, int pos) {                                  \
    convert("__bang_half2int16_" #mode, d, s, n,                                                              \
            [pos](half x) { return round_int<int16_t>(std::ldexp((double)x, -pos), round_##mode); }, RET);    \
  }                                                                                                           \
  void __bang_half2int32_##mode(int *d, const half *s, int n, int pos) {                                      \
    convert("__bang_half2int32_" #mode, d, s, n,                                                              \
            [pos](half x) { return round_int<int>(std::ldexp((double)x, -pos), round_##mode); }, RET);        \
  }                                                                                                           \
  void __bang_int322float_##mode(float *d, const int *s, int n, int pos) {                                    \
    convert("__bang_int322float_" #mode, d, s, n,                                                             \
            [pos](int x) { return round_float(std::ldexp((double)x, pos), round_##mode); }, RET);             \
  }
BANG_EMU_ROUNDINGS(BANG_EMU_DEF_FIX)
#undef BANG_EMU_DEF_FIX
#define BANG_EMU_DEF_INT_NOT(T) \
  void __bang_not(T *d, const T *a, int n) { elementwise<T>("__bang_not", d, a, nullptr, n, n, op_not<T>, RET); }
BANG_EMU_INTEGER_TYPES(BANG_EMU_DEF_INT_NOT)
#undef BANG_EMU_DEF_INT_NOT
