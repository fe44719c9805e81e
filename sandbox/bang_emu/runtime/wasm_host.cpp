// The replay's WebAssembly host (issue 37; DESIGN.md "Confinement by construction"): a submission's device code
// compiled for wasm32 (bang_emu/wasm/build.py), counted (counting.py) and turned into native code by wasm2c + gcc
// (wasm/engine.py) runs here instead of the native device module. What confines it is the engine: every load and
// store of kernel code is an offset into one linear memory, a 32-bit offset plus a 32-bit static offset from the
// memory's base, so it cannot address anything outside the 8 GiB reserved here; the reservation is never
// unmapped while a kernel can run, so nothing else of the process is ever placed inside it. The clock, the
// counters, the trace and its key stay in this process's own memory, outside the reservation.
//
// The host maps the linear memory so that its GDRAM part lies on the native runtime's device region: a journal's
// buffer is placed at the address it had (replay.cpp places it; gdram.cpp maps it inside the reservation), and a
// kernel's pointer is that address minus the memory's base. On-chip arenas (memory.cpp) are carved from their own
// parts of the memory (layout.py). Builtins are imports of module "bang": each takes offsets, turns them into this
// process's addresses inside the reservation and calls the runtime's own builtin, which checks every operand range
// against the space it needs and charges the cost model, as for a native kernel. Scalar work is counted by the
// module itself into wasm globals (not in linear memory); the host adds them to the core's counts before every
// builtin and at the end of the task, so the cost model sees them in issue order. Where the kernel is, the module
// says too: its `where` global holds the code site of the statement running (counting.py marks it, lines.py makes
// the sites' table, engine.py's glue carries it), which the host hands the runtime where it would symbolise a
// return address -- so an error names the student's line as the native replay does.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "runtime.h"

namespace bang_emu {
void set_onchip_regions(uintptr_t nram, uintptr_t wram, uintptr_t sram, size_t arena_bytes, int slots);
void set_wasm_gdram_region(uintptr_t lo, uintptr_t hi);
std::pair<uintptr_t, uintptr_t> device_buffer_range(uintptr_t p);
}  // namespace bang_emu

using namespace bang_emu;

// wasm2c 1.0.32's memory object (wasm-rt.h): the generated code reads `data` (and `size` when it bounds-checks
// a data segment at instantiation); with the signal-handler configuration it checks no access itself, so the
// reservation's inaccessible pages are the bounds.
struct WasmRtMemory {
  uint8_t *data;
  uint32_t pages, max_pages, size;
};

namespace {
constexpr size_t kReservation = 8ull << 30;  // 32-bit address + 32-bit static offset

// What engine.py's glue exports from the module's shared object.
struct Glue {
  size_t (*instance_size)();
  void (*init_module)();
  void (*instantiate)(void *inst, void *bang, void *env);
  uint64_t *(*counter)(void *inst, int k);
  uint32_t *(*stack_pointer)(void *inst);
  uint32_t (*site)(size_t k, void *inst, uint32_t args, uint32_t nbytes);
  const uint64_t *layout;  // engine.py's LAYOUT_FIELDS, from layout.py
  // where the kernel is (lines.py): the global, and the sites' table -- {files, sites}, the files' names each
  // NUL-terminated, (file, line) per site from 1; absent from an engine made before it existed
  uint32_t *(*where)(void *inst);
  const unsigned *line_counts;
  const char *line_files;
  const unsigned *line_sites;
};
enum LayoutField { kStackBytes = 0, kArgsBase, kArgsBytes, kOnchipBase, kNramBase, kWramBase, kSramBase, kSramEnd,
                   kGdramBase, kMaxMemory, kMaxInstances, kArenaBytes, kJournalRegion, kLayoutFields };
// counting.py's COUNTER_EXPORTS order: loads then stores, each gdram, nram, wram, sram, other
constexpr int kCounterSpaces[5] = {kGdram, kNram, kWram, kSram, kOther};

Glue g_glue;
WasmRtMemory g_memory;
uintptr_t g_base = 0;
std::vector<void *> g_instances;
std::atomic<int> g_next_instance{0};
thread_local int t_instance = -1;
thread_local bool t_begun = false;
thread_local uint32_t *t_where = nullptr;  // this thread's instance's `where` global

// The code sites' files and lines (site k at k - 1) and one token per site, &g_site_tokens[k]: the "return
// address" the runtime keeps and later names (source_line), as a native kernel's return address. Token 0 is no
// site (none marked yet, or a module without lines): it names no line, so the error is named at the launch's --
// never at the engine's own code, whose native addresses mean nothing to the student.
std::vector<std::string> g_line_files;
std::vector<std::pair<uint32_t, uint32_t>> g_line_sites;
std::vector<char> g_site_tokens(1, 0);

const void *current_site() {
  uint32_t k = t_where ? *t_where : 0;
  return &g_site_tokens[k <= g_line_sites.size() ? k : 0];
}

bool site_line(const void *token, std::string *file, int *line) {
  const char *t = static_cast<const char *>(token);
  if (t < g_site_tokens.data() || t >= g_site_tokens.data() + g_site_tokens.size()) return false;
  size_t k = t - g_site_tokens.data();
  *file = k ? g_line_files[g_line_sites[k - 1].first] : "";
  *line = k ? (int)g_line_sites[k - 1].second : 0;
  return true;
}

// The sites' table of the engine's glue, checked (engine.py wrote it from a checked section; a table that does not
// hold together is dropped whole: errors are then named at the launch's line).
void load_lines() {
  set_code_sites(CodeSites{&site_line, &current_site});
  if (!g_glue.line_counts || !g_glue.line_files || !g_glue.line_sites) return;
  unsigned n_files = g_glue.line_counts[0], n_sites = g_glue.line_counts[1];
  std::vector<std::string> files;
  const char *p = g_glue.line_files;
  for (unsigned i = 0; i < n_files; ++i) {
    size_t n = strnlen(p, 4097);
    if (n > 4096) return;
    files.emplace_back(p, n);
    p += n + 1;
  }
  std::vector<std::pair<uint32_t, uint32_t>> sites;
  for (unsigned k = 0; k < n_sites; ++k) {
    unsigned f = g_glue.line_sites[2 * k], line = g_glue.line_sites[2 * k + 1];
    if (f >= n_files || line == 0 || line > (unsigned)INT32_MAX) return;
    sites.emplace_back(f, line);
  }
  g_line_files = std::move(files);
  g_line_sites = std::move(sites);
  g_site_tokens.assign(g_line_sites.size() + 1, 0);
}

struct BangInstance {
  int unused;
};
BangInstance g_bang;

[[noreturn]] void wasm_error(const std::string &message) {
  kernel_error("wasm-kernel", message, current_site());
}

uint64_t layout_of(LayoutField f) { return g_glue.layout[f]; }

void *instance() {
  if (t_instance < 0) {
    t_instance = g_next_instance.fetch_add(1);
    if (t_instance >= (int)g_instances.size())
      wasm_error("more emulated cores run at once than the wasm replay has instances for");
  }
  return g_instances[t_instance];
}

// The module's counts since the last call, added to the core's scalar work (the cost model charges them at the
// next flush, before the builtin that called here).
void charge_scalar() {
  CoreCtx *c = t_core;
  if (!c || t_instance < 0) return;
  void *inst = g_instances[t_instance];
  for (int k = 0; k < 10; ++k) {
    uint64_t *n = g_glue.counter(inst, k);
    if (!*n) continue;
    int s = kCounterSpaces[k % 5];
    if (k < 5) c->loads[s] += *n, c->load_bytes[s] += 4 * *n;
    else c->stores[s] += *n, c->store_bytes[s] += 4 * *n;
    *n = 0;
  }
}

void reset_counters(void *inst) {
  for (int k = 0; k < 10; ++k) *g_glue.counter(inst, k) = 0;
}

// An operand: `n` bytes at offset `off` of the memory, as this process's address. The range must lie in the
// memory (the runtime's builtin then checks its space); a length is taken as unsigned 64-bit.
char *at(uint32_t off, uint64_t n = 0) {
  if ((uint64_t)off + n > (uint64_t)g_memory.size) wasm_error("a builtin's operand lies outside the kernel's memory");
  return reinterpret_cast<char *>(g_base + off);
}

template <class T>
T *of(uint32_t off) {
  return reinterpret_cast<T *>(at(off));
}

struct SiteCall {
  size_t site;
  uint32_t args, nbytes;
  uint32_t status;
};

void task_body(void *ctx) {
  auto *call = static_cast<SiteCall *>(ctx);
  void *inst = instance();
  // each instance has its own stack: instance 0 the module's own (below STACK_BYTES), the others theirs above
  // ONCHIP_BASE; a task starts on an empty one
  *g_glue.stack_pointer(inst) = (uint32_t)(t_instance == 0 ? layout_of(kStackBytes)
                                                           : layout_of(kOnchipBase) + t_instance * layout_of(kStackBytes));
  reset_counters(inst);
  t_begun = false;
  t_where = g_glue.where ? g_glue.where(inst) : nullptr;
  if (t_where) *t_where = 0;  // no statement of this task has run yet: its errors name the launch
  t_code_ret = nullptr;
  uint32_t status = g_glue.site(call->site, inst, call->args, call->nbytes);
  t_code_ret = nullptr;
  charge_scalar();
  if (status) call->status = status;
}
}  // namespace

// ------------------------------------------------------------------------------------------ engine hooks
extern "C" __attribute__((visibility("default"))) WasmRtMemory *Z_envZ_memory(void *) { return &g_memory; }

// wasm2c's traps (unreachable, integer overflow or division by zero, an indirect call of the wrong type, ...):
// wasm-rt-impl.c is compiled with WASM_RT_TRAP_HANDLER=bang_wasm_trap. An access outside the memory faults in the
// reservation instead, which the runtime's fault handler reports as for a native kernel.
extern "C" __attribute__((visibility("default"))) void bang_wasm_trap(int code) {
  static const char *const names[] = {"none", "out of bounds", "integer overflow", "division by zero",
                                      "invalid float-to-integer conversion", "unreachable",
                                      "indirect call of the wrong type", "uncaught exception", "call stack exhausted"};
  std::string what = code >= 0 && code < (int)(sizeof names / sizeof *names) ? names[code] : "trap";
  if (!t_core) {
    write_all_stderr(("bang-emu: error: wasm trap outside a kernel: " + what + "\n").c_str());
    _exit(87);
  }
  kernel_error(code == 3 || code == 2 ? "arithmetic-exception" : "wasm-trap", "the kernel trapped: " + what,
               current_site());
}

// ------------------------------------------------------------------------------------------ builtins ("bang")
#define BANG_IMPORT(name) extern "C" __attribute__((visibility("default"))) auto Z_bangZ_##name
using u32 = uint32_t;
using u64 = uint64_t;

BANG_IMPORT(task_var)(void *, u32 which)->u32 {
  const TaskVars &v = g_task_vars;
  const int values[12] = {v.id_x, v.id_y, v.id_z, v.dim_x, v.dim_y, v.dim_z,
                          v.id,   v.dim,  v.core_id, v.core_dim, v.cluster_id, v.cluster_dim};
  if (which >= 12) wasm_error("task_var: no such task variable");
  return (u32)values[which];
}

BANG_IMPORT(onchip_alloc)(void *, u32 space, u32 bytes, u32 tag)->u32 {
  charge_scalar();
  const char *t = at(tag, 1);
  size_t room = g_memory.size - tag;
  if (strnlen(t, std::min<size_t>(room, 4096)) >= std::min<size_t>(room, 4096)) wasm_error("onchip_alloc: bad tag");
  if (space != kNram && space != kWram && space != kSram) wasm_error("onchip_alloc: not an on-chip space");
  char *p = static_cast<char *>(onchip_alloc((int)space, bytes, t));
  return (u32)(reinterpret_cast<uintptr_t>(p) - g_base);
}

// An initialised on-chip array's first use by this thread: natively its reference is a thread_local, initialised
// (the initial values copied in) once per thread, so once per core, and the array keeps what kernels write into
// it from then on; the module copies the values only when this says 1. Only a flag: the copy is the module's.
BANG_IMPORT(onchip_first_use)(void *, u32 array)->u32 {
  static thread_local std::unordered_set<u32> seen;
  return seen.insert(array).second ? 1 : 0;
}

// Every builtin of device.h: the host function of its import (generated by bang_emu/wasm/api.py): the module's
// scalar counts charged first, each offset turned into an address inside the memory, the runtime's builtin called.
#define BANG_WASM_EXPORT __attribute__((visibility("default")))
namespace {
// the module's counts charged, and its site made the builtin's "return address" (runtime.h caller_ret)
inline void bang_wasm_charge() {
  charge_scalar();
  t_code_ret = current_site();
}
inline char *bang_wasm_at(u32 off) { return at(off); }
template <class T>
inline T bang_wasm_from_bits(u32 bits) {
  uint16_t b = (uint16_t)bits;
  T v;
  static_assert(sizeof(T) == 2, "a 16-bit type");
  memcpy(&v, &b, 2);
  return v;
}
template <class T>
inline u32 bang_wasm_to_bits(T v) {
  uint16_t b;
  static_assert(sizeof(T) == 2, "a 16-bit type");
  memcpy(&b, &v, 2);
  return b;
}
}  // namespace
#include "wasm_api_gen.h"

// A scalar store into GDRAM (counting.py calls this before the store): the bytes are marked as written by a
// kernel, the replay's provenance. An address outside every buffer is left to the store, which faults on the
// buffer's guard or on the reservation's inaccessible pages.
BANG_IMPORT(scalar_store_gdram)(void *, u32 address, u32 bytes)->void {
  uintptr_t a = g_base + address;
  if (const GdramBuf *b = find_gdram(a))
    if (a >= b->lo && a + bytes <= b->hi) mark_written(b, a, a + bytes);
}

// printf of device code (wasm/device_stdio.c): the format and its arguments read from the kernel's memory, each
// conversion formatted by the host's snprintf, the text written to stdout as the native device module's printf
// does. A wasm32 argument list is packed at each argument's alignment: int, long, size_t, pointers and char 4 bytes,
// long long and double (a float is promoted) 8, long double (IEEE binary128 in wasm32) 16. A `*` width or precision
// takes an int argument, as in C (a negative width left-justifies, a negative precision is none). %n is refused, as
// natively.
namespace {
constexpr int kPrintfWidthCap = 1 << 16;  // one conversion's width or precision (the kernel's stdout is capped anyway)

template <typename... A>
void append_formatted(std::string &out, const std::string &spec, A... value) {
  char small[512];
  int n = snprintf(small, sizeof small, spec.c_str(), value...);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    out.append(small, (size_t)n);
    return;
  }
  std::string big((size_t)n + 1, '\0');
  snprintf(big.data(), big.size(), spec.c_str(), value...);
  out.append(big.data(), (size_t)n);
}
}  // namespace

BANG_IMPORT(vprintf)(void *, u32 format, u32 args)->u32 {
  charge_scalar();
  const char *f = at(format, 1);
  size_t room = std::min<size_t>(g_memory.size - format, 1 << 16);
  size_t flen = strnlen(f, room);
  if (flen == room) wasm_error("printf: the format is not a string inside the kernel's memory");
  std::string out;
  uint64_t at_arg = args;
  auto take = [&](unsigned size) -> const void * {
    at_arg = (at_arg + size - 1) / size * size;
    const void *p = at((u32)at_arg, size);
    at_arg += size;
    return p;
  };
  auto take_int = [&](unsigned size) -> uint64_t {
    uint64_t v = 0;
    memcpy(&v, take(size), size);
    return v;
  };
  for (size_t i = 0; i < flen; ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    size_t j = i + 1;
    // flags, width and precision; each `*` replaced by its int argument's value
    std::string plain = "%";
    while (j < flen && strchr("-+ #0123456789.*", f[j])) {
      if (f[j] != '*') {
        plain += f[j++];
        continue;
      }
      ++j;
      long v = (int32_t)take_int(4);
      if (!plain.empty() && plain.back() == '.') {
        if (v < 0) plain.pop_back();  // a negative precision is taken as if omitted
        else plain += std::to_string(std::min<long>(v, kPrintfWidthCap));
      } else {
        plain += std::to_string(std::max<long>(std::min<long>(v, kPrintfWidthCap), -kPrintfWidthCap));
      }
    }
    std::string mods;
    while (j < flen && strchr("hlLqjzt", f[j])) mods += f[j++];
    if (j >= flen) break;
    char conv = f[j];
    bool wide = mods == "ll" || mods == "j" || mods == "q" || mods == "L";
    if (conv == '%') {
      out += '%';
    } else if (conv == 'n') {
      wasm_error("printf with %n in kernel code (it stores through an argument)");
    } else if (strchr("di", conv)) {
      uint64_t v = take_int(wide ? 8 : 4);
      long long s = wide ? (long long)v : (long long)(int32_t)v;
      if (mods == "hh") s = (signed char)s;
      else if (mods == "h") s = (short)s;
      append_formatted(out, plain + "ll" + conv, s);
    } else if (strchr("ouxX", conv)) {
      uint64_t v = take_int(wide ? 8 : 4);
      unsigned long long u = wide ? v : (uint32_t)v;
      if (mods == "hh") u = (unsigned char)u;
      else if (mods == "h") u = (unsigned short)u;
      append_formatted(out, plain + "ll" + conv, u);
    } else if (conv == 'c') {
      append_formatted(out, plain + conv, (int)(unsigned char)take_int(4));
    } else if (strchr("eEfFgGaA", conv)) {
      if (mods == "L") {
        __float128 q;
        memcpy(&q, take(16), 16);
        append_formatted(out, plain + "L" + conv, (long double)q);
      } else {
        double d;
        memcpy(&d, take(8), 8);
        append_formatted(out, plain + conv, d);
      }
    } else if (conv == 's') {
      u32 s = (u32)take_int(4);
      const char *str = at(s, 1);
      size_t n = strnlen(str, std::min<size_t>(g_memory.size - s, 1 << 16));
      append_formatted(out, plain + "s", std::string(str, n).c_str());
    } else if (conv == 'p') {
      append_formatted(out, std::string("0x%x"), (unsigned)take_int(4));
    } else {
      out.append(f + i, f + j + 1);
    }
    i = j;
  }
  fwrite(out.data(), 1, out.size(), stdout);
  return (u32)out.size();
}

// Launches: a journal address is already this process's address of the buffer (the memory's GDRAM lies on the
// device region); it must be inside a journaled device buffer, its end included.
BANG_IMPORT(launch_pointer)(void *, u64 address, u32 index)->u32 {
  if (address == 0) return 0;
  auto range = device_buffer_range((uintptr_t)address);
  bool inside = range.first < range.second && address >= range.first && address <= range.second;
  if (!inside || address < g_base || address - g_base >= g_memory.size) {
    char hex[32];
    snprintf(hex, sizeof hex, "%#llx", (unsigned long long)address);
    wasm_error("launch argument " + std::to_string(index) + ": pointer " + hex +
               " is not inside any journaled device buffer");
  }
  return (u32)(address - g_base);
}
// A pointer member of a struct argument (torch_mlu's AddressList): inside a journaled buffer as above; null stays
// null; any other value (an unused slot holds whatever the host's stack held, natively never followed) is not
// refused but placed at the memory's end (layout.py MAX_MEMORY_BYTES, never accessible), where every access traps.
BANG_IMPORT(launch_member_pointer)(void *, u64 address, u32 index)->u32 {
  (void)index;
  if (address == 0) return 0;
  auto range = device_buffer_range((uintptr_t)address);
  bool inside = range.first < range.second && address >= range.first && address <= range.second;
  if (!inside || address < g_base || address - g_base >= g_memory.size) return (u32)g_memory.size;
  return (u32)(address - g_base);
}
BANG_IMPORT(launch_long)(void *, u64 value, u32 is_signed, u32 index)->u32 {
  if (is_signed ? (int64_t)value != (int32_t)value : value > 0xffffffffull)
    wasm_error("launch argument " + std::to_string(index) + ": " + std::to_string((long long)value) +
               " does not fit wasm32's 32-bit long");
  return (u32)value;
}
BANG_IMPORT(launch_begin)(void *)->void {
  if (t_begun) wasm_error("launch_begin called twice in one task (only a site's invoker calls it)");
  t_begun = true;
  reset_counters(instance());  // the invoker's unpacking is not the kernel's work
}

// ------------------------------------------------------------------------------------------ the replay's side
namespace bang_emu {

// Loads the module's shared object, reserves and lays out the memory, creates the instances. "" or the reason.
std::string wasm_open(const char *path) {
  void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!so) return std::string("cannot load the wasm device module: ") + dlerror();
  auto sym = [&](const char *name) { return dlsym(so, name); };
  g_glue.instance_size = reinterpret_cast<size_t (*)()>(sym("bang_wasm_instance_size"));
  g_glue.init_module = reinterpret_cast<void (*)()>(sym("bang_wasm_init_module"));
  g_glue.instantiate = reinterpret_cast<void (*)(void *, void *, void *)>(sym("bang_wasm_instantiate"));
  g_glue.counter = reinterpret_cast<uint64_t *(*)(void *, int)>(sym("bang_wasm_counter"));
  g_glue.stack_pointer = reinterpret_cast<uint32_t *(*)(void *)>(sym("bang_wasm_stack_pointer"));
  g_glue.site = reinterpret_cast<uint32_t (*)(size_t, void *, uint32_t, uint32_t)>(sym("bang_wasm_site"));
  g_glue.layout = static_cast<const uint64_t *>(sym("bang_wasm_layout"));
  g_glue.where = reinterpret_cast<uint32_t *(*)(void *)>(sym("bang_wasm_where"));
  g_glue.line_counts = static_cast<const unsigned *>(sym("bang_wasm_line_counts"));
  g_glue.line_files = static_cast<const char *>(sym("bang_wasm_line_files"));
  g_glue.line_sites = static_cast<const unsigned *>(sym("bang_wasm_line_sites"));
  if (!g_glue.instance_size || !g_glue.init_module || !g_glue.instantiate || !g_glue.counter ||
      !g_glue.stack_pointer || !g_glue.site || !g_glue.layout)
    return "the wasm device module lacks its glue (engine.py)";
  if (g_glue.layout[kLayoutFields] != kLayoutFields) return "the wasm device module's layout table is another version";
  uintptr_t base = (uintptr_t)(layout_of(kJournalRegion) - layout_of(kGdramBase));
  void *m = mmap(reinterpret_cast<void *>(base), kReservation, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (m != reinterpret_cast<void *>(base)) {
    if (m != MAP_FAILED) munmap(m, kReservation);
    return "cannot reserve the wasm memory at its place (something else is mapped there)";
  }
  g_base = base;
  // stacks, data, the launch arguments and the on-chip arenas are always there; GDRAM is mapped per buffer
  if (mprotect(m, layout_of(kSramEnd), PROT_READ | PROT_WRITE) != 0) return "cannot map the wasm memory";
  g_memory.data = static_cast<uint8_t *>(m);
  g_memory.pages = g_memory.max_pages = (uint32_t)(layout_of(kMaxMemory) >> 16);
  g_memory.size = (uint32_t)layout_of(kMaxMemory);
  int slots = (int)layout_of(kMaxInstances);
  set_onchip_regions(base + layout_of(kNramBase), base + layout_of(kWramBase), base + layout_of(kSramBase),
                     layout_of(kArenaBytes), slots);
  set_wasm_gdram_region(base + layout_of(kGdramBase), base + layout_of(kMaxMemory));
  load_lines();
  g_glue.init_module();
  // every instance is made now, before any kernel runs: instantiating writes the module's data segments
  int n = std::min(slots, std::max(1, profile().clusters * profile().cores_per_cluster));
  for (int i = 0; i < n; ++i) {
    void *inst = calloc(1, g_glue.instance_size());
    g_glue.instantiate(inst, &g_bang, nullptr);
    g_instances.push_back(inst);
  }
  return "";
}

// One launch through the module's site `site`: the journal's argument bytes are placed in the memory's argument
// area and each task calls the site's invoker there. cnrtErrorArgsInvalid when the bytes are not the site's.
cnrtRet_t wasm_launch(size_t site, const char *kernel, const char *file, int line, cnrtDim3_t dim, int func_type,
                      const unsigned char *args, size_t nbytes) {
  if (nbytes > layout_of(kArgsBytes)) return cnrtErrorArgsInvalid;
  memcpy(reinterpret_cast<void *>(g_base + layout_of(kArgsBase)), args, nbytes);
  SiteCall call{site, (uint32_t)layout_of(kArgsBase), (uint32_t)nbytes, 0};
  launch_erased(kernel, file, line, dim, func_type, nullptr, &task_body, &call);
  if (call.status == 1) return cnrtErrorArgsInvalid;
  return cnrtGetLastError();
}

}  // namespace bang_emu
