// GDRAM: device buffers, their protection from host code, and the per-call provenance marks.
//
// * Device memory (cnrtMalloc'd buffers and the torch emulation's tensor storage, bang_emu_device_alloc) is
//   an mmap'd block: user pages between guard zones. Guards are PROT_NONE for good; the user pages are
//   PROT_NONE to host code except while a launch runs or a documented copy holds a window, as on a real MLU
//   where the host cannot dereference a device pointer. A host access outside that faults, and the fault
//   handler (exec.cpp) turns it into a "host-access" error naming the buffer (host_access_fault).
// * Registered external ranges (bang_emu_register_gdram: tensors handed to kernels) are checked buffers
//   whose bytes may live inside a device block (`owner`) or in host memory (CPU tensors).
// * Provenance: each launch records which bytes kernel code wrote (GdramBuf::written, mark_written); at the
//   end of the launch those bits are ORed into the owning device buffer's `marks`, which hold "kernel code
//   wrote this byte during the current call". H2D copies and host windows opened for writing clear marks,
//   D2D copies carry them, bang_emu_begin_call voids them all (a new generation).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <shared_mutex>

#include "journal.h"
#include "runtime.h"

namespace bang_emu {

namespace {
constexpr size_t kPage = 4096;

std::shared_mutex g_buf_mu;                             // the set of buffers
std::map<uintptr_t, std::unique_ptr<GdramBuf>> g_bufs;  // keyed by guard_lo
std::vector<GdramBuf *> g_snapshot;  // cnrtMalloc'd + registered, sorted by guard_lo, rebuilt on change
std::vector<GdramBuf *> g_storage;   // torch storage blocks, sorted by guard_lo (mappings never overlap)
std::vector<GdramBuf *> g_device;    // every device buffer (the two kinds above), sorted by guard_lo
std::atomic<uint64_t> g_next_id{1};

std::mutex g_dev_mu;  // protection state and provenance marks
bool g_launching = false;

void rebuild_snapshot_locked() {
  g_snapshot.clear();
  g_storage.clear();
  g_device.clear();
  for (auto &kv : g_bufs) {
    GdramBuf *b = kv.second.get();
    (b->storage ? g_storage : g_snapshot).push_back(b);
    if (b->device) g_device.push_back(b);
  }
}

uintptr_t page_down(uintptr_t a) { return a & ~(uintptr_t)(kPage - 1); }
uintptr_t page_up(uintptr_t a) { return (a + kPage - 1) & ~(uintptr_t)(kPage - 1); }

// The mapping holding a (guards included), among sorted non-overlapping device mappings.
GdramBuf *mapping_at(const std::vector<GdramBuf *> &v, uintptr_t a) {
  auto it = std::upper_bound(v.begin(), v.end(), a, [](uintptr_t x, const GdramBuf *b) { return x < b->guard_lo; });
  if (it == v.begin()) return nullptr;
  --it;
  return a < (*it)->guard_hi ? *it : nullptr;
}

// Caller holds g_dev_mu. Guards stay PROT_NONE; the user pages follow launches and windows.
void apply_protection(GdramBuf *b) {
  int prot = (g_launching || b->write_windows) ? PROT_READ | PROT_WRITE : b->read_windows ? PROT_READ : PROT_NONE;
  uintptr_t lo = page_down(b->lo), hi = page_up(b->hi);
  mprotect(reinterpret_cast<void *>(lo), hi - lo, prot);
}

// ---- provenance marks (caller holds g_dev_mu)
std::vector<uint64_t> &marks_of(GdramBuf *b) {
  uint64_t gen = call_generation();
  if (b->marks_gen != gen) {
    b->marks.assign((b->hi - b->lo + 63) / 64, 0);
    b->marks_gen = gen;
  }
  return b->marks;
}

void set_marks(GdramBuf *b, size_t s, size_t e, bool on) {  // bit range [s, e) of b's bytes
  std::vector<uint64_t> &w = marks_of(b);
  while (s < e) {
    size_t word = s / 64, bit = s % 64, nbits = std::min<size_t>(64 - bit, e - s);
    uint64_t mask = nbits == 64 ? ~0ull : (((1ull << nbits) - 1) << bit);
    w[word] = on ? (w[word] | mask) : (w[word] & ~mask);
    s += nbits;
  }
}

// The n marks from bit s on, packed from bit 0 (word-wise: D2D copies of big tensors stay cheap).
std::vector<uint64_t> read_marks(GdramBuf *b, size_t s, size_t n) {
  const std::vector<uint64_t> &w = marks_of(b);
  std::vector<uint64_t> out((n + 63) / 64, 0);
  for (size_t i = 0; i < out.size(); ++i) {
    size_t pos = s + 64 * i, word = pos / 64, sh = pos % 64;
    uint64_t v = w[word] >> sh;
    if (sh && word + 1 < w.size()) v |= w[word + 1] << (64 - sh);
    size_t left = n - 64 * i;
    out[i] = left >= 64 ? v : v & ((1ull << left) - 1);
  }
  return out;
}

// Replaces the marks of bits [s, s + n) with `bits` (packed from bit 0, as read_marks returns them).
void write_marks(GdramBuf *b, size_t s, size_t n, const std::vector<uint64_t> &bits) {
  set_marks(b, s, s + n, false);
  std::vector<uint64_t> &w = marks_of(b);
  for (size_t i = 0; i < bits.size(); ++i) {
    if (!bits[i]) continue;
    size_t pos = s + 64 * i, word = pos / 64, sh = pos % 64;
    w[word] |= bits[i] << sh;
    if (sh && word + 1 < w.size()) w[word + 1] |= bits[i] >> (64 - sh);
  }
}

size_t count_marks(GdramBuf *b, size_t s, size_t e) {
  std::vector<uint64_t> &w = marks_of(b);
  size_t n = 0;
  while (s < e) {
    size_t word = s / 64, bit = s % 64, nbits = std::min<size_t>(64 - bit, e - s);
    uint64_t mask = nbits == 64 ? ~0ull : (((1ull << nbits) - 1) << bit);
    n += __builtin_popcountll(w[word] & mask);
    s += nbits;
  }
  return n;
}

// Device buffers are mapped in one region, from its base upwards, so that a replay (replay.cpp) can place each
// buffer of a journal at the address it had: kernel arguments, and pointers stored inside them, stay valid.
constexpr uintptr_t kRegionBase = 0x300000000000ull;  // 48 TiB: below where Linux puts mmaps and PIE images
std::atomic<uintptr_t> g_region_cursor{kRegionBase};

void *map_in_region(size_t len) {
  for (int attempt = 0; attempt < 64; ++attempt) {
    uintptr_t at = g_region_cursor.fetch_add(len + kPage);
    void *m = mmap(reinterpret_cast<void *>(at), len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == reinterpret_cast<void *>(at)) return m;
    if (m != MAP_FAILED) munmap(m, len);  // a kernel without MAP_FIXED_NOREPLACE put it elsewhere
  }
  return MAP_FAILED;
}

// [guard][user pages][guard] at m; the buffer ends where the upper guard starts.
GdramBuf *place_device_buf(void *m, size_t len, size_t guard, size_t user, size_t bytes, bool storage,
                           const std::string &label, const void *ret) {
  auto b = std::make_unique<GdramBuf>();
  b->map_base = reinterpret_cast<uintptr_t>(m);
  b->map_len = len;
  // the buffer ends where the guard starts, so overruns past the end are caught from the first byte
  b->lo = b->map_base + guard + (user - bytes);
  b->lo &= ~uintptr_t(63);  // keep 64-byte alignment like the device allocator
  b->hi = b->lo + bytes;
  b->guard_lo = b->map_base;
  b->guard_hi = b->map_base + len;
  b->device = true;
  b->storage = storage;
  b->alloc_ret = ret;
  b->label = label;
  poison_fill(reinterpret_cast<void *>(b->lo), bytes);
  GdramBuf *raw = b.get();
  {
    std::unique_lock<std::shared_mutex> lk(g_buf_mu);
    std::lock_guard<std::mutex> dk(g_dev_mu);
    mprotect(m, guard, PROT_NONE);
    mprotect(reinterpret_cast<void *>(b->map_base + guard + user), guard, PROT_NONE);
    apply_protection(raw);
    g_bufs[b->guard_lo] = std::move(b);
    rebuild_snapshot_locked();
  }
  journal_alloc(raw);
  return raw;
}

size_t guard_bytes(size_t user, bool storage) {
  // Guard zones as large as the buffer (1 MiB minimum, 256 MiB cap) for cnrtMalloc so row-sized overruns land
  // in them; tensors get at most 1 MiB (there are many, and registered views keep their own guards).
  return storage ? std::min<size_t>(std::max<size_t>(user, 64 << 10), 1 << 20)
                 : std::min<size_t>(std::max<size_t>(user, 1 << 20), 256ull << 20);
}

GdramBuf *new_device_buf(size_t bytes, bool storage, const std::string &label_prefix, const void *ret) {
  size_t user = page_up(std::max<size_t>(bytes, 1));
  size_t guard = guard_bytes(user, storage);
  size_t len = guard + user + guard;
  void *m = map_in_region(len);
  if (m == MAP_FAILED) return nullptr;
  return place_device_buf(m, len, guard, user, bytes, storage,
                          label_prefix + std::to_string(g_next_id++) + " (" + std::to_string(bytes) + " B)", ret);
}

// The wasm replay's GDRAM (wasm_host.cpp): buffers are mapped inside the kernels' memory reservation, replacing
// its inaccessible pages, and given back to it when freed (never unmapped: nothing else may land there).
uintptr_t g_wasm_lo = 0, g_wasm_hi = 0;
bool in_wasm_region(uintptr_t base, size_t len) {
  return g_wasm_lo && base >= g_wasm_lo && len <= g_wasm_hi - base && base + len <= g_wasm_hi;
}
}  // namespace

void set_wasm_gdram_region(uintptr_t lo, uintptr_t hi) {
  g_wasm_lo = lo;
  g_wasm_hi = hi;
}

namespace {

bool free_device_buf(uintptr_t p, bool storage) {
  std::unique_lock<std::shared_mutex> lk(g_buf_mu);
  for (GdramBuf *b : storage ? g_storage : g_snapshot) {
    if (b->lo != p || !b->device) continue;
    for (auto &kv : g_bufs)  // registered views inside it no longer have a home
      if (kv.second->owner == b) kv.second->owner = nullptr;
    journal_free(p, storage);
    if (in_wasm_region(b->map_base, b->map_len))
      mmap(reinterpret_cast<void *>(b->map_base), b->map_len, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    else munmap(reinterpret_cast<void *>(b->map_base), b->map_len);
    g_bufs.erase(b->guard_lo);
    rebuild_snapshot_locked();
    return true;
  }
  return false;
}

// Device buffer whose user bytes hold [lo, lo + n); nullptr if none (host memory, or straddling).
GdramBuf *device_holding(uintptr_t lo, size_t n) {
  GdramBuf *b = mapping_at(g_device, lo);
  return (b && lo >= b->lo && lo + n <= b->hi) ? b : nullptr;
}

// RAII host-access window over one device buffer (nullptr: nothing to do). Caller holds g_buf_mu (shared).
struct Window {
  GdramBuf *b;
  bool write;
  Window(GdramBuf *buf, bool w) : b(buf), write(w) {
    if (!b) return;
    std::lock_guard<std::mutex> dk(g_dev_mu);
    (write ? b->write_windows : b->read_windows)++;
    apply_protection(b);
  }
  ~Window() {
    if (!b) return;
    std::lock_guard<std::mutex> dk(g_dev_mu);
    (write ? b->write_windows : b->read_windows)--;
    apply_protection(b);
  }
};

// Element size of a tensor label made by the torch emulation ("tensor float[7] on mlu").
size_t elem_size_of_label(const std::string &label) {
  if (label.compare(0, 7, "tensor ") != 0) return 0;
  std::string t = label.substr(7, label.find('[') - 7);
  if (t == "float" || t == "int" || t == "unsigned int") return 4;
  if (t == "double" || t == "long int" || t == "long" || t == "int64_t") return 8;
  if (t == "c10::Half" || t == "c10::BFloat16" || t == "short int" || t == "short") return 2;
  if (t == "signed char" || t == "unsigned char" || t == "bool") return 1;
  return 0;
}
}  // namespace

void poison_fill(void *p, size_t bytes) {
  const char *mode = getenv("BANG_EMU_POISON");
  if (!mode || !*mode || !strcmp(mode, "none")) return;
  if (!strcmp(mode, "nan")) memset(p, 0xFF, bytes);  // NaN for fp32 and fp16
  else if (!strcmp(mode, "sentinel")) memset(p, 0xC6, bytes);  // finite: -25443.39 (fp32), -6.77 (fp16)
}

const GdramBuf *find_gdram(uintptr_t a) {
  // launches never overlap with (un)registration in well-formed programs; the snapshot is stable then
  const auto &v = g_snapshot;
  const GdramBuf *guard_hit = nullptr;
  auto it = std::upper_bound(v.begin(), v.end(), a, [](uintptr_t x, const GdramBuf *b) { return x < b->guard_lo; });
  if (it != v.begin()) {
    --it;
    // guards of neighbouring external buffers may overlap: prefer a buffer that really contains a
    for (auto j = it;; --j) {
      if (a >= (*j)->lo && a < (*j)->hi) return *j;
      if (j == v.begin() || it - j > 4) break;
    }
    if (a < (*it)->guard_hi) guard_hit = *it;
  }
  // tensor storage nobody registered (a kernel given tensor.data_ptr()): device memory all the same; it also
  // beats another buffer's guard zone when it really holds a
  if (!g_storage.empty()) {
    GdramBuf *s = mapping_at(g_storage, a);
    if (s && (!guard_hit || (a >= s->lo && a < s->hi))) return s;
  }
  return guard_hit;
}

std::vector<GdramBuf *> gdram_live() {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  std::vector<GdramBuf *> all = g_snapshot;
  all.insert(all.end(), g_storage.begin(), g_storage.end());
  return all;
}

// The per-launch bitmaps are zero here: gdram_end_launch clears them as it merges them.
void gdram_begin_launch() {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  for (auto *v : {&g_snapshot, &g_storage})
    for (GdramBuf *b : *v) b->touched = false;
}

// After the launch (and its trace record): the bytes the kernel wrote join the call's provenance marks of the
// device buffer holding them, and the per-launch bitmaps are cleared for the next launch in the same pass.
void gdram_end_launch() {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  std::lock_guard<std::mutex> dk(g_dev_mu);
  for (auto *v : {&g_snapshot, &g_storage}) {
    for (GdramBuf *b : *v) {
      if (!b->touched || !b->written) continue;
      GdramBuf *dev = b->device ? b : b->owner;
      size_t base = dev ? b->lo - dev->lo : 0, n = b->hi - b->lo;
      for (size_t w = 0; w < b->written_words; ++w) {
        uint64_t bits = b->written[w].load(std::memory_order_relaxed);
        if (!bits) continue;
        b->written[w].store(0, std::memory_order_relaxed);
        while (dev && bits) {  // runs of set bits
          int s = __builtin_ctzll(bits);
          int e = s;
          while (e < 64 && ((bits >> e) & 1)) ++e;
          size_t lo = w * 64 + s, hi = std::min(w * 64 + e, n);
          if (lo < hi) set_marks(dev, base + lo, base + hi, true);
          bits &= e == 64 ? 0 : ~0ull << e;
        }
      }
    }
  }
}

void device_protect_for_launch(bool launching) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  std::lock_guard<std::mutex> dk(g_dev_mu);
  g_launching = launching;
  for (GdramBuf *b : g_device) apply_protection(b);
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

void *gdram_alloc(size_t bytes, const void *ret) {
  GdramBuf *b = new_device_buf(bytes, false, "cnrtMalloc#", ret);
  return b ? reinterpret_cast<void *>(b->lo) : nullptr;
}

bool gdram_free(void *p) { return free_device_buf(reinterpret_cast<uintptr_t>(p), false); }

bool is_device_ptr(const void *p, size_t bytes) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  const GdramBuf *b = find_gdram(reinterpret_cast<uintptr_t>(p));
  return b && reinterpret_cast<uintptr_t>(p) >= b->lo && reinterpret_cast<uintptr_t>(p) + bytes <= b->hi;
}

size_t gdram_bytes_in_use() {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  size_t s = 0;
  for (auto *b : g_device) s += b->hi - b->lo;
  return s;
}

// ------------------------------------------------------------------------------------------ diagnoses
std::string buffer_desc(const GdramBuf *b) {
  std::string d = b->label;
  if (b->external) d += " (" + std::to_string(b->hi - b->lo) + " B)";
  if (b->device && !b->storage && b->alloc_ret) {
    std::string where = source_line(b->alloc_ret, nullptr, nullptr);
    if (!where.empty()) d += ", cnrtMalloc'd at " + where;
  }
  return d;
}

std::string task_position(const GdramBuf *b, uintptr_t a) {
  CoreCtx *c = t_core;
  if (!c) return "";
  long long off = (long long)a - (long long)b->lo;
  std::string pos = b->elem_size && off % (long long)b->elem_size == 0
                        ? "element " + std::to_string(off / (long long)b->elem_size)
                        : "byte " + std::to_string(off);
  return "; task " + std::to_string(g_task_vars.id) + " (of " + std::to_string(g_task_vars.dim) + ") starts at " + pos +
         " of it";
}

std::string describe_near(uintptr_t lo, size_t n) {
  // the nearest buffer within 64 MiB: a task offset far past a small tensor still names that tensor
  const uintptr_t kNear = 64ull << 20;
  const GdramBuf *best = nullptr;
  uintptr_t best_d = kNear;
  for (auto *v : {&g_snapshot, &g_storage}) {
    for (const GdramBuf *b : *v) {
      uintptr_t d = lo >= b->hi ? lo - b->hi : (lo + n <= b->lo ? b->lo - (lo + n) : 0);
      if (d < best_d || (d == best_d && best && b->external && !best->external)) best = b, best_d = d;
    }
  }
  if (!best) return "";
  std::string rel = lo >= best->hi     ? std::to_string(lo - best->hi) + " B past the end of "
                    : lo + n <= best->lo ? "ends " + std::to_string(best->lo - (lo + n)) + " B before the start of "
                                         : "overlaps ";
  return rel + best->label + (best->external ? " (" + std::to_string(best->hi - best->lo) + " B)" : "") +
         task_position(best, lo);
}

// A SIGSEGV/SIGBUS at `addr` outside kernel code: if it is device memory, explain and exit (async-signal
// context: no locks, no allocation beyond what a dying process can afford).
void host_access_fault(uintptr_t addr, bool write) {
  GdramBuf *b = mapping_at(g_device, addr);
  if (!b) return;
  char msg[1024];
  const char *verb = write ? "wrote" : "read";
  if (addr >= b->lo && addr < b->hi)
    snprintf(msg, sizeof msg,
             "bang-emu: error: host-access: host code %s device memory at 0x%" PRIxPTR
             " (%zu bytes into buffer %s): the host cannot dereference a device pointer; copy with "
             "cnrtMemcpy (or tensor.cpu() / copy_)\n",
             verb, addr, (size_t)(addr - b->lo), b->label.c_str());
  else
    snprintf(msg, sizeof msg,
             "bang-emu: error: host-access: host code %s 0x%" PRIxPTR
             ", %zu B %s device buffer %s: the host cannot dereference a device pointer (nor touch the memory "
             "around it); copy with cnrtMemcpy (or tensor.cpu() / copy_)\n",
             verb, addr, (size_t)(addr < b->lo ? b->lo - addr : addr - b->hi),
             addr < b->lo ? "before the start of" : "past the end of", b->label.c_str());
  ssize_t ignored = write_all_stderr(msg);
  (void)ignored;
  _exit(BANG_EMU_EXIT_HOST_ACCESS);
}

ssize_t write_all_stderr(const char *s) {
  size_t n = strlen(s), off = 0;
  while (off < n) {
    ssize_t w = ::write(2, s + off, n - off);
    if (w <= 0) return -1;
    off += (size_t)w;
  }
  return (ssize_t)off;
}

// ------------------------------------------------------------------------------------------ replay
GdramBuf *replay_device_buf(uintptr_t map_base, size_t map_len, uintptr_t lo, size_t bytes, bool storage,
                            const std::string &label) {
  size_t user = page_up(std::max<size_t>(bytes, 1));
  size_t guard = guard_bytes(user, storage);
  if (map_len != guard + user + guard || map_base % kPage) return nullptr;
  bool wasm = g_wasm_lo != 0;
  if (wasm) {  // inside the reservation, over its inaccessible pages only (never over another buffer)
    if (!in_wasm_region(map_base, map_len)) return nullptr;
    std::shared_lock<std::shared_mutex> lk(g_buf_mu);
    for (auto &kv : g_bufs)
      if (kv.second->map_len && kv.second->map_base < map_base + map_len &&
          map_base < kv.second->map_base + kv.second->map_len)
        return nullptr;
  }
  void *m = mmap(reinterpret_cast<void *>(map_base), map_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (wasm ? MAP_FIXED : MAP_FIXED_NOREPLACE), -1, 0);
  if (m == MAP_FAILED) return nullptr;
  if (m != reinterpret_cast<void *>(map_base)) {
    munmap(m, map_len);
    return nullptr;
  }
  GdramBuf *b = place_device_buf(m, map_len, guard, user, bytes, storage, label, nullptr);
  if (b->lo != lo) {
    free_device_buf(b->lo, storage);
    return nullptr;
  }
  return b;
}

bool replay_free_device_buf(uintptr_t lo, bool storage) { return free_device_buf(lo, storage); }

// ------------------------------------------------------------------------------------------ copies
namespace {
bool range_of(const int64_t *sizes, const int64_t *strides, int ndim, size_t elem, int64_t *lo, int64_t *hi) {
  int64_t a = 0, b = 0;
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] < 0) return false;
    if (sizes[d] == 0) return *lo = *hi = 0, true;
    int64_t span = (sizes[d] - 1) * strides[d];
    (span < 0 ? a : b) += span;
  }
  *lo = a * (int64_t)elem;
  *hi = b * (int64_t)elem + (int64_t)elem;
  return true;
}
}  // namespace

namespace {
// A documented copy into device memory, for the journal: device to device as a copy (the replay repeats it on
// its own data), host to device as the bytes now there (the window is still open).
void journal_copy_done(GdramBuf *db, GdramBuf *sb, char *d, const char *s, size_t elem, int ndim,
                       const int64_t *sizes, const int64_t *dstr, const int64_t *sstr, int64_t dlo, int64_t dhi) {
  if (!db || !journal_active()) return;
  if (sb) journal_copy(d, s, elem, ndim, sizes, dstr, sstr);
  else journal_host_write(d + dlo, (size_t)(dhi - dlo));
}
}  // namespace

int copy_strided(void *dst, const void *src, size_t elem, int ndim, const int64_t *sizes, const int64_t *dstr,
                 const int64_t *sstr) {
  if (ndim < 0 || ndim > 16 || elem == 0 || (ndim && (!sizes || !dstr || !sstr))) return -1;
  int64_t dlo, dhi, slo, shi;
  if (!range_of(sizes, dstr, ndim, elem, &dlo, &dhi) || !range_of(sizes, sstr, ndim, elem, &slo, &shi)) return -1;
  if (dhi == dlo) return 0;
  char *d = static_cast<char *>(dst);
  const char *s = static_cast<const char *>(src);
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  GdramBuf *db = device_holding(reinterpret_cast<uintptr_t>(d + dlo), (size_t)(dhi - dlo));
  GdramBuf *sb = device_holding(reinterpret_cast<uintptr_t>(s + slo), (size_t)(shi - slo));
  Window wd(db, true), ws(sb == db ? nullptr : sb, false);
  bool contiguous = true;
  int64_t expect = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    if (sizes[k] != 1 && (dstr[k] != expect || sstr[k] != expect)) contiguous = false;
    expect *= sizes[k];
  }
  size_t count = 1;
  for (int k = 0; k < ndim; ++k) count *= (size_t)sizes[k];
  if (contiguous) {
    size_t n = count * elem;
    std::vector<uint64_t> carried;
    if (db && sb) {  // D2D carries the marks byte for byte (read them before an overlapping write)
      std::lock_guard<std::mutex> dk(g_dev_mu);
      carried = read_marks(sb, (uintptr_t)s - sb->lo, n);
    }
    memmove(d, s, n);
    if (db) {
      std::lock_guard<std::mutex> dk(g_dev_mu);
      size_t doff = (uintptr_t)d - db->lo;
      if (carried.empty()) set_marks(db, doff, doff + n, false);  // H2D: the host wrote these bytes
      else write_marks(db, doff, n, carried);
    }
    journal_copy_done(db, sb, d, s, elem, ndim, sizes, dstr, sstr, dlo, dhi);
    return 0;
  }
  // gather into a host buffer (with each element's mark: all its bytes kernel-written), then scatter: safe
  // when source and destination overlap
  std::vector<char> tmp(count * elem);
  std::vector<bool> marked(db && sb ? count : 0);
  std::vector<int64_t> idx(ndim, 0);
  for (int pass = 0; pass < 2; ++pass) {
    std::fill(idx.begin(), idx.end(), 0);
    std::unique_lock<std::mutex> dk(g_dev_mu, std::defer_lock);
    if (db) dk.lock();
    for (size_t i = 0; i < count; ++i) {
      int64_t so = 0, doff = 0;
      for (int k = 0; k < ndim; ++k) so += idx[k] * sstr[k], doff += idx[k] * dstr[k];
      if (pass == 0) {
        memcpy(&tmp[i * elem], s + so * (int64_t)elem, elem);
        if (!marked.empty()) {
          size_t m = (uintptr_t)(s + so * (int64_t)elem) - sb->lo;
          marked[i] = count_marks(sb, m, m + elem) == elem;
        }
      } else {
        memcpy(d + doff * (int64_t)elem, &tmp[i * elem], elem);
        if (db) {
          size_t m = (uintptr_t)(d + doff * (int64_t)elem) - db->lo;
          set_marks(db, m, m + elem, !marked.empty() && marked[i]);
        }
      }
      for (int k = ndim - 1; k >= 0 && ++idx[k] == sizes[k]; --k) idx[k] = 0;
    }
  }
  journal_copy_done(db, sb, d, s, elem, ndim, sizes, dstr, sstr, dlo, dhi);
  return 0;
}

void host_window(const void *p, size_t n, bool write, bool open) {
  if (!p || !n) return;
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  GdramBuf *b = mapping_at(g_device, reinterpret_cast<uintptr_t>(p));
  if (!b) return;
  std::lock_guard<std::mutex> dk(g_dev_mu);
  if (write) {
    // host code writes these bytes: they are not the kernel's, whatever ran while the window was open (cleared
    // at both ends, so a kernel launched inside the window cannot lend its marks to host-written data)
    uintptr_t lo = std::max(reinterpret_cast<uintptr_t>(p), b->lo);
    uintptr_t hi = std::min(reinterpret_cast<uintptr_t>(p) + n, b->hi);
    if (lo < hi) set_marks(b, lo - b->lo, hi - b->lo, false);
  }
  if (write && !open) {
    uintptr_t lo = std::max(reinterpret_cast<uintptr_t>(p), b->lo);
    uintptr_t hi = std::min(reinterpret_cast<uintptr_t>(p) + n, b->hi);
    if (lo < hi) journal_host_write(reinterpret_cast<void *>(lo), hi - lo);  // still open: readable
  }
  int &w = write ? b->write_windows : b->read_windows;
  if (open) ++w;
  else if (w > 0) --w;
  apply_protection(b);
}

void memset_device(void *p, int value, size_t n) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  GdramBuf *b = device_holding(reinterpret_cast<uintptr_t>(p), n);
  Window w(b, true);
  memset(p, value, n);
  if (b) journal_memset(p, value, n);
  if (b) {
    std::lock_guard<std::mutex> dk(g_dev_mu);
    size_t off = reinterpret_cast<uintptr_t>(p) - b->lo;
    set_marks(b, off, off + n, false);
  }
}

// The output record's figures: -1 if [p, p + n) is not inside one device buffer.
int seal_range(const void *p, size_t n, size_t *kernel_written, std::string *sha_hex) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  GdramBuf *b = device_holding(lo, n);
  if (!b) return -1;
  Window w(b, false);
  Sha256 h;
  h.update(p, n);
  uint8_t digest[32];
  h.finish(digest);
  *sha_hex = to_hex(digest, 32);
  std::lock_guard<std::mutex> dk(g_dev_mu);
  *kernel_written = count_marks(b, lo - b->lo, lo - b->lo + n);
  return 0;
}

// For the replay's torch operators (replay.cpp): the kernel marks in [p, p + n) (0 outside one device buffer),
// setting them, and the user range of the device buffer holding p ({0, 0} if none).
size_t device_marks(uintptr_t p, size_t n) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  GdramBuf *b = device_holding(p, n);
  if (!b || n == 0) return 0;
  std::lock_guard<std::mutex> dk(g_dev_mu);
  return count_marks(b, p - b->lo, p - b->lo + n);
}

void set_device_marks(uintptr_t p, size_t n, bool on) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  GdramBuf *b = device_holding(p, n);
  if (!b || n == 0) return;
  std::lock_guard<std::mutex> dk(g_dev_mu);
  set_marks(b, p - b->lo, p - b->lo + n, on);
}

std::pair<uintptr_t, uintptr_t> device_buffer_range(uintptr_t p) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  GdramBuf *b = mapping_at(g_device, p);
  if (!b || p < b->lo || p >= b->hi) return {0, 0};
  return {b->lo, b->hi};
}

}  // namespace bang_emu

using namespace bang_emu;

extern "C" void bang_emu_register_gdram(void *p, size_t bytes, const char *label) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  std::unique_lock<std::shared_mutex> lk(g_buf_mu);
  for (auto &kv : g_bufs) {
    GdramBuf *b = kv.second.get();
    if (b->external && b->lo == lo && b->hi == lo + bytes) return;  // same range again: no-op
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
  b->elem_size = elem_size_of_label(b->label);
  GdramBuf *home = mapping_at(g_device, lo);
  b->owner = (home && lo >= home->lo && b->hi <= home->hi) ? home : nullptr;
  uintptr_t key = b->guard_lo;
  while (g_bufs.count(key)) ++key;  // distinct keys even with identical guard starts
  b->guard_lo = key;
  journal_register(p, bytes, b->label, true);
  g_bufs[key] = std::move(b);
  rebuild_snapshot_locked();
}

extern "C" void bang_emu_unregister_gdram(void *p) {
  std::unique_lock<std::shared_mutex> lk(g_buf_mu);
  for (auto it = g_bufs.begin(); it != g_bufs.end(); ++it) {
    if (it->second->external && it->second->lo == reinterpret_cast<uintptr_t>(p)) {
      journal_register(p, it->second->hi - it->second->lo, it->second->label, false);
      g_bufs.erase(it);
      rebuild_snapshot_locked();
      return;
    }
  }
}

extern "C" void *bang_emu_device_alloc(size_t bytes, const char *label) {
  std::string prefix = label && *label ? std::string(label) + " #" : "mlu storage #";
  GdramBuf *b = new_device_buf(bytes, true, prefix, nullptr);
  return b ? reinterpret_cast<void *>(b->lo) : nullptr;
}

extern "C" void bang_emu_device_free(void *p) {
  if (p) free_device_buf(reinterpret_cast<uintptr_t>(p), true);
}

extern "C" int bang_emu_copy_strided(void *dst, const void *src, size_t elem_size, int ndim, const int64_t *sizes,
                                     const int64_t *dst_strides, const int64_t *src_strides) {
  return copy_strided(dst, src, elem_size, ndim, sizes, dst_strides, src_strides);
}

extern "C" int bang_emu_is_device_range(const void *p, size_t bytes) {
  std::shared_lock<std::shared_mutex> lk(g_buf_mu);
  return device_holding(reinterpret_cast<uintptr_t>(p), bytes) != nullptr;
}
extern "C" void bang_emu_host_access_begin(const void *p, size_t bytes, int write) { host_window(p, bytes, write, true); }
extern "C" void bang_emu_host_access_end(const void *p, size_t bytes, int write) { host_window(p, bytes, write, false); }
