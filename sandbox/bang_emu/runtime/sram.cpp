// Cluster-shared SRAM ordered by the barriers (UNIONn jobs), not by the order the host happens to run the
// cluster's threads in. The BANG guide orders SRAM between cores only through __sync_cluster()/__sync_all()
// (DEVGUIDE 3.3.5.2: every core of the cluster, the memory core included, meets there); between two barriers the
// cores run concurrently and a DMA write into SRAM lands some cycles after it is issued. So here:
// - a DMA write into SRAM is held in its core's log (its data snapshotted when the copy completes) and lands in
//   the arena when the next barrier its core takes part in releases, every participant's writes in modelled
//   landing order;
// - a DMA read of SRAM sees the arena as the last barrier left it plus its own core's earlier writes (a core's
//   queues are in order), never another core's write of the same interval;
// - at the barrier, a read of bytes another core wrote in the same interval with a write issued no later than
//   the read (a read that expects the write: no barrier orders them) is reported as `sram-race`. A read issued
//   before another core's write of the same bytes sees the old data, as it does on the card when the read runs
//   first: mlu-ops' 5-stage pipelines store a tile with SRAM2GDRAM from every core and refill it with
//   GDRAM2SRAM right behind (kernels/binary_op/binary_op_5pipeline.h).
// Scalar code and the fills/atomics that reach SRAM act on the arena at once; before they do, their core's own
// held writes land (sram_publish_own), so the core still sees its own writes in program order. So do a core's
// writes once it holds more than kLogEntries of them or kLogBytes between two barriers (memory and cost bound).
#include <algorithm>
#include <cstring>

#include "runtime.h"

namespace bang_emu {

namespace {

// A core that writes SRAM this often (or this much) between two barriers lands its writes early: long
// barrier-free stretches (each core streaming its own part of SRAM) keep memory and the checks' cost bounded.
constexpr size_t kLogEntries = 1024;
constexpr size_t kLogBytes = 64u << 20;

// (dst offset, src offset) of each segment of a copy, in issue order.
template <class F>
void for_segments(const PendingCopy &p, F f) {
  int k = 0;
  for (int j = 0; j <= p.seg1; ++j)
    for (int i = 0; i <= p.seg0; ++i, ++k)
      f((size_t)j * p.dst_stride1 + (size_t)i * p.dst_stride0, (size_t)j * p.src_stride1 + (size_t)i * p.src_stride0,
        k);
}

long long segments(const PendingCopy &p) { return (long long)(p.seg0 + 1) * (p.seg1 + 1); }

// Does the write's destination share a byte with the read's source?
bool overlaps(const PendingCopy &w, const PendingCopy &r) {
  if (!(w.dst_lo < r.src_hi && r.src_lo < w.dst_hi)) return false;
  if (segments(w) * segments(r) > (1 << 20)) return true;  // extents overlap; too many segments to pair up
  bool hit = false;
  for_segments(w, [&](size_t wd, size_t, int) {
    if (hit) return;
    uintptr_t wl = w.dst_lo + wd, wh = wl + w.size;
    for_segments(r, [&](size_t, size_t rs, int) {
      uintptr_t rl = r.src_lo + rs;
      if (wl < rl + r.size && rl < wh) hit = true;
    });
  });
  return hit;
}

// The write's bytes that fall in [lo, lo + out.size()) copied over `out` (lo == nullptr: into the arena itself).
void unpack(const SramWrite &w, char *out, uintptr_t lo, size_t n) {
  const PendingCopy &p = w.copy;
  for_segments(p, [&](size_t d, size_t, int k) {
    const char *data = w.data.data() + (size_t)k * p.size;
    if (!out) {
      memcpy(reinterpret_cast<char *>(p.dst_lo + d), data, p.size);
      return;
    }
    uintptr_t a = p.dst_lo + d, b = a + p.size;
    uintptr_t s = std::max(a, lo), e = std::min(b, (uintptr_t)(lo + n));
    if (s < e) memcpy(out + (s - lo), data + (s - a), e - s);
  });
}

std::string who(int slot) {
  int role = slot % 5, cluster = slot / 5;
  return (role == 4 ? std::string("the memory core") : "core " + std::to_string(role)) + " of cluster " +
         std::to_string(cluster);
}

std::string where(const void *ret) {
  int line = 0;
  std::string file;
  source_line(ret, &line, &file);
  return line ? " (line " + std::to_string(line) + ")" : "";
}

const char *dir_name(int dir) {
  static const char *names[] = {"GDRAM2NRAM", "NRAM2GDRAM", "LDRAM2NRAM", "NRAM2LDRAM", "GDRAM2WRAM", "WRAM2GDRAM",
                                "LDRAM2WRAM", "WRAM2LDRAM", "NRAM2NRAM",  "NRAM2WRAM",  "WRAM2NRAM",  "GDRAM2SRAM",
                                "SRAM2GDRAM", "LDRAM2SRAM", "SRAM2LDRAM", "SRAM2NRAM",  "NRAM2SRAM",  "SRAM2WRAM",
                                "WRAM2SRAM",  "SRAM2SRAM"};
  return dir >= 0 && dir < (int)(sizeof names / sizeof names[0]) ? names[dir] : "copy";
}

}  // namespace

bool sram_ordered(const CoreCtx *c) { return c && c->sram_shared && c->mem && c->mem->sram; }

bool is_sram_dir_src(int dir) {
  return dir == SRAM2GDRAM || dir == SRAM2LDRAM || dir == SRAM2NRAM || dir == SRAM2WRAM || dir == SRAM2SRAM;
}
bool is_sram_dir_dst(int dir) {
  return dir == GDRAM2SRAM || dir == LDRAM2SRAM || dir == NRAM2SRAM || dir == WRAM2SRAM || dir == SRAM2SRAM;
}

const char *sram_read_source(CoreCtx *c, const PendingCopy &p, std::vector<char> &tmp) {
  size_t n = p.src_hi - p.src_lo;
  tmp.resize(n);
  {
    std::lock_guard<std::mutex> lk(c->mem->sram->data_mu);
    memcpy(tmp.data(), reinterpret_cast<const char *>(p.src_lo), n);
  }
  for (const SramWrite &w : c->sram_writes)
    if (!w.published && w.copy.dst_lo < p.src_hi && p.src_lo < w.copy.dst_hi) unpack(w, tmp.data(), p.src_lo, n);
  if (c->sram_reads.size() >= kLogEntries)  // the race check keeps the later half
    c->sram_reads.erase(c->sram_reads.begin(), c->sram_reads.begin() + kLogEntries / 2);
  c->sram_reads.push_back(p);
  return tmp.data();
}

void sram_log_write(CoreCtx *c, const PendingCopy &p, const char *src) {
  size_t held = 0;
  for (const SramWrite &x : c->sram_writes) held += x.data.size();
  if (c->sram_writes.size() >= kLogEntries || held >= kLogBytes) {
    sram_publish_own(c);
    c->sram_writes.clear();  // landed: out of the race check too
  }
  SramWrite w;
  w.copy = p;
  w.core = c->slot;
  w.data.resize((size_t)p.size * segments(p));
  for_segments(p, [&](size_t, size_t s, int k) { memcpy(w.data.data() + (size_t)k * p.size, src + s, p.size); });
  c->sram_writes.push_back(std::move(w));
  // scalar code must come back through access_slow to see this write (sram_publish_own)
  c->forget_hits(kSram);
}

void sram_publish_own(CoreCtx *c) {
  if (!sram_ordered(c)) return;
  bool any = false;
  for (const SramWrite &w : c->sram_writes) any |= !w.published;
  if (!any) return;
  std::lock_guard<std::mutex> lk(c->mem->sram->data_mu);
  for (SramWrite &w : c->sram_writes)
    if (!w.published) {
      unpack(w, nullptr, 0, 0);
      w.published = true;
    }
}

void sram_land_writes(std::vector<SramWrite> &writes, Arena *sram) {
  // landing order; equal landings by core, then by issue order (stable)
  std::stable_sort(writes.begin(), writes.end(), [](const SramWrite &a, const SramWrite &b) {
    return a.copy.end != b.copy.end ? a.copy.end < b.copy.end : a.core < b.core;
  });
  std::lock_guard<std::mutex> lk(sram->data_mu);
  for (const SramWrite &w : writes)
    if (!w.published) unpack(w, nullptr, 0, 0);
}

std::string sram_land(const std::vector<CoreCtx *> &participants, const void **ret) {
  std::string race;
  std::vector<Arena *> arenas;
  for (CoreCtx *c : participants)
    if (c && c->mem && c->mem->sram && std::find(arenas.begin(), arenas.end(), c->mem->sram) == arenas.end())
      arenas.push_back(c->mem->sram);
  for (Arena *a : arenas) {
    std::vector<CoreCtx *> cores;
    for (CoreCtx *c : participants)
      if (c && c->mem && c->mem->sram == a) cores.push_back(c);
    for (CoreCtx *y : cores)
      for (const PendingCopy &r : y->sram_reads)
        for (CoreCtx *x : cores) {
          if (x == y || !race.empty()) continue;
          for (const SramWrite &w : x->sram_writes) {
            if (w.copy.start > r.start || !overlaps(w.copy, r)) continue;
            race = std::string(dir_name(r.dir)) + " on " + who(y->slot) + " reads SRAM [" +
                   std::to_string(r.src_lo - a->base) + ", " + std::to_string(r.src_hi - a->base) +
                   ") (offsets in the cluster's SRAM) that " + dir_name(w.copy.dir) + " on " + who(x->slot) +
                   where(w.copy.ret) + " writes in the same interval between barriers, issued first (cycle " +
                   std::to_string((long long)w.copy.start) + ", the read at cycle " +
                   std::to_string((long long)r.start) +
                   "). No __sync_cluster() orders them, so on the MLU the read races with the write; here it sees "
                   "the SRAM as the last barrier left it. Call __sync_cluster() after writing SRAM that other "
                   "cores read";
            *ret = r.ret;
            break;
          }
        }
    std::vector<SramWrite> writes;
    for (CoreCtx *c : cores) {
      for (SramWrite &w : c->sram_writes) writes.push_back(std::move(w));
      c->sram_writes.clear();
      c->sram_reads.clear();
    }
    sram_land_writes(writes, a);
  }
  return race;
}

}  // namespace bang_emu
