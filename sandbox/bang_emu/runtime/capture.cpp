// Launch capture for grading standalone programs (a lab program with its own main()): with
// BANG_EMU_CAPTURE_DIR set, each launch's pointer arguments that point into device memory are copied to .npy
// files (from the pointer to the end of its buffer) before the kernel runs ("in") and, where the kernel wrote
// them, after it ("out"); the launch's signed trace record lists every argument with the SHA-256 of each
// captured segment, so the host checks the files against signed digests and never believes the program's own
// check. Files are 1-D arrays of the pointee type; a range larger than BANG_EMU_CAPTURE_SEGMENT_BYTES is captured
// as its head and tail; past BANG_EMU_CAPTURE_MAX_BYTES per process nothing more is written (segments: []).
//
// Twin inputs (the trusted replay of a program only, bang_emu_program_twin): just before each launch of the
// graded kernel, its input operands are overwritten with values drawn from the host's secret seed, so an
// answer the program's host code computed and uploaded is no longer the answer (DESIGN.md "Threat model").
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime.h"

namespace bang_emu {

namespace {
thread_local std::vector<LaunchArg> t_noted;  // set by the launch glue just before launch_erased
uint64_t g_capture_index = 0;
uint64_t g_captured_bytes = 0;

size_t env_size(const char *name, size_t fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end = nullptr;
  unsigned long long x = strtoull(v, &end, 10);
  return (end && *end == '\0') ? (size_t)x : fallback;
}

std::string npy_descr(const LaunchArg &a) {
  char kind = a.dtype ? a.dtype : 'u';
  if (!a.dtype || (a.elem_size != 1 && a.elem_size != 2 && a.elem_size != 4 && a.elem_size != 8))
    return "|u1";  // raw bytes
  if (a.elem_size == 1) return std::string("|") + kind + "1";
  return std::string("<") + kind + std::to_string(a.elem_size);
}

bool write_npy(const std::string &path, const std::string &descr, const void *data, size_t bytes, size_t count) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(count) + ",), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string pre = "\x93NUMPY";
  pre += (char)1;
  pre += (char)0;
  pre += (char)(header.size() & 0xff);
  pre += (char)(header.size() >> 8);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  auto put = [&](const void *p, size_t n) {
    const char *c = static_cast<const char *>(p);
    while (n) {
      ssize_t w = write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= (size_t)w;
    }
    return true;
  };
  bool ok = put(pre.data(), pre.size()) && put(header.data(), header.size()) && put(data, bytes);
  close(fd);
  return ok;
}

struct Captured {
  LaunchArg arg;
  const GdramBuf *buf = nullptr;
  size_t bytes = 0;
  std::string in;  // JSON list of the "in" segments
};

std::string capture_segments(const std::string &dir, uint64_t index, size_t arg, const char *phase,
                             const Captured &c) {
  size_t seg_cap = env_size("BANG_EMU_CAPTURE_SEGMENT_BYTES", 64u << 20);
  size_t budget = env_size("BANG_EMU_CAPTURE_MAX_BYTES", 512u << 20);
  size_t elem = c.arg.dtype ? (size_t)c.arg.elem_size : 1;
  size_t half = (seg_cap / 2) / elem * elem;
  std::vector<std::pair<size_t, size_t>> segs;  // (offset, bytes)
  if (c.bytes <= seg_cap || half == 0) {
    segs.push_back({0, c.bytes});
  } else {
    size_t tail = (c.bytes - half) / elem * elem;
    segs.push_back({0, half});
    segs.push_back({tail, c.bytes - tail});
  }
  std::string j = "[";
  const char *base = reinterpret_cast<const char *>(c.arg.ptr);
  for (size_t s = 0; s < segs.size(); ++s) {
    size_t off = segs[s].first, n = segs[s].second;
    if (g_captured_bytes + n > budget) break;
    std::string name = "l" + std::to_string(index) + "_a" + std::to_string(arg) + "_" + phase + std::to_string(s) + ".npy";
    if (!write_npy(dir + "/" + name, npy_descr(c.arg), base + off, n, n / elem)) break;
    g_captured_bytes += n;
    Sha256 h;
    h.update(base + off, n);
    uint8_t d[32];
    h.finish(d);
    j += std::string(s ? "," : "") + "{\"offset\":" + std::to_string(off) + ",\"bytes\":" + std::to_string(n) +
         ",\"sha256\":\"" + to_hex(d, 32) + "\"}";
  }
  return j + "]";
}

// Bytes of [lo, hi) of `b` that kernel code wrote during the current launch (the per-launch bitmap).
uint64_t written_in(const GdramBuf *b, uintptr_t lo, uintptr_t hi) {
  if (!b->written || !b->touched) return 0;
  uint64_t n = 0;
  for (uintptr_t a = lo; a < hi; ++a) {
    size_t bit = a - b->lo;
    if (bit / 64 >= b->written_words) break;
    n += (b->written[bit / 64].load(std::memory_order_relaxed) >> (bit % 64)) & 1;
  }
  return n;
}

struct LaunchCapture {
  bool active = false;
  std::string dir;
  uint64_t index = 0;
  std::vector<LaunchArg> args;
  std::vector<Captured> ptrs;
} g_launch;
}  // namespace

void note_launch_args(const LaunchArg *args, int n) { t_noted.assign(args, args + (n > 0 ? n : 0)); }

// The wasm replay's launches (replay.cpp): no launch glue runs there, so the arguments are described from the
// journal's packed bytes (x86-64 sizes, no padding, as ReplaySite::pack wrote them) and the site's `layout`,
// which bang_emu/wasm/sites.py arg_layout() derives from the site key's argument types: one entry per argument,
// "<kind>,<bytes>,<pointee bytes>,<dtype>" joined by ';' -- kind p (pointer), i (integer, dtype i or u: its
// signedness) or o (other); bytes 0 when unknown (one unknown argument takes what the others leave of `nbytes`,
// and after a second one nothing is known); dtype '-' for none. The same LaunchArg as describe_launch_arg makes
// natively, so capture and the twin (below) see the launch alike on both engines.
void note_packed_launch_args(const std::string &layout, const unsigned char *args, size_t nbytes) {
  struct Entry {
    char kind;
    size_t bytes, elem;
    char dtype;
  };
  std::vector<Entry> entries;
  size_t start = 0;
  while (!layout.empty() && start <= layout.size()) {
    size_t end = layout.find(';', start);
    std::string item = layout.substr(start, end == std::string::npos ? std::string::npos : end - start);
    Entry e{'o', 0, 0, '-'};
    unsigned long long bytes = 0, elem = 0;
    char kind = 'o', dtype = '-';
    if (sscanf(item.c_str(), "%c,%llu,%llu,%c", &kind, &bytes, &elem, &dtype) == 4 && bytes <= 64 && elem <= (1u << 20))
      e = Entry{kind, (size_t)bytes, (size_t)elem, dtype};
    entries.push_back(e);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  size_t known = 0, unknown = 0;
  for (const Entry &e : entries) {
    known += e.bytes;
    unknown += e.bytes == 0;
  }
  if (unknown == 1 && known < nbytes)
    for (Entry &e : entries)
      if (!e.bytes) e.bytes = nbytes - known;
  std::vector<LaunchArg> out;
  size_t off = 0;
  bool lost = false;  // past an argument of unknown size: the offsets are not known
  for (const Entry &e : entries) {
    LaunchArg a{0, nullptr, 0, 0, 0};
    lost = lost || e.bytes == 0 || off + e.bytes > nbytes;
    if (!lost && e.kind == 'p' && e.bytes == 8) {
      uint64_t word;
      memcpy(&word, args + off, 8);
      a = LaunchArg{1, reinterpret_cast<const void *>((uintptr_t)word), 0, (int)(e.elem ? e.elem : 1),
                    e.dtype == '-' ? (char)0 : e.dtype};
    } else if (!lost && e.kind == 'i' && (e.bytes == 1 || e.bytes == 2 || e.bytes == 4 || e.bytes == 8)) {
      uint64_t raw = 0;
      memcpy(&raw, args + off, e.bytes);  // little-endian, as the run's
      long long v = (long long)raw;
      if (e.dtype == 'i' && e.bytes < 8) {
        int shift = 64 - 8 * (int)e.bytes;
        v = (long long)(raw << shift) >> shift;
      }
      a = LaunchArg{2, nullptr, v, 0, 0};
    }
    out.push_back(a);
    off += e.bytes;
  }
  note_launch_args(out.data(), (int)out.size());
}

namespace {
struct TwinOperand {
  int arg, rows_arg, cols_arg;  // a row-major rows x cols matrix at pointer argument `arg`
};
struct TwinPlan {
  bool active = false;
  std::string kernel;  // base name (grader/checks/integrity.py base_name), as the host picks the graded launches
  uint64_t seed = 0;
  std::vector<TwinOperand> operands;
} g_twin;

constexpr uint64_t kTwinGamma = 0x9E3779B97F4A7C15ull;

uint64_t twin_mix(uint64_t z) {  // splitmix64's finaliser; grader/programs/captures.py twin_values mirrors it
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// `void ns::k<float>(float*, int)` -> `k`, as grader/checks/integrity.py base_name.
std::string kernel_base_name(std::string name) {
  const std::string anon = "(anonymous namespace)::";
  for (size_t at; (at = name.find(anon)) != std::string::npos;) name.erase(at, anon.size());
  int depth = 0;
  size_t cut = name.size();
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    else if (name[i] == '>') --depth;
    else if (name[i] == '(' && depth == 0) {
      cut = i;
      break;
    }
  }
  auto trim = [](std::string t) {
    size_t a = t.find_first_not_of(" \t\n\r\f\v"), b = t.find_last_not_of(" \t\n\r\f\v");
    return a == std::string::npos ? std::string() : t.substr(a, b - a + 1);
  };
  std::string head = trim(name.substr(0, cut));
  while (!head.empty() && head.back() == '>') {
    int d = 0;
    bool cut_here = false;
    for (size_t j = head.size(); j-- > 0;) {
      d += head[j] == '>' ? 1 : head[j] == '<' ? -1 : 0;
      if (d == 0) {
        head = trim(head.substr(0, j));
        cut_here = true;
        break;
      }
    }
    if (!cut_here) break;
  }
  size_t colons = head.rfind("::");
  if (colons != std::string::npos) head = head.substr(colons + 2);
  size_t space = head.find_last_of(" \t\n\r\f\v");
  return space == std::string::npos ? head : head.substr(space + 1);
}

// Element i of an operand's twin: a float in [1, 1.125) (the lab draws its inputs from [1, 1.1]) whose low
// mantissa bits come from splitmix64 at counter i of the operand's stream: exact, so the host redraws the same.
void twin_fill(unsigned char *out, size_t first, size_t count, int elem, uint64_t stream) {
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = twin_mix(stream + kTwinGamma * (uint64_t)(first + i + 1));
    if (elem == 4) {
      uint32_t bits = 0x3F800000u | (uint32_t)(v >> 44);
      memcpy(out + i * 4, &bits, 4);
    } else if (elem == 2) {
      uint16_t bits = (uint16_t)(0x3C00u | (uint16_t)(v >> 57));
      memcpy(out + i * 2, &bits, 2);
    } else {
      uint64_t bits = 0x3FF0000000000000ull | (v >> 15);
      memcpy(out + i * 8, &bits, 8);
    }
  }
}
}  // namespace

// Before a launch of the graded kernel (launch_erased, with the launch lock held): each input operand the plan
// names gets its twin, rows x cols elements from its pointer, as a host upload would write it. An operand that
// cannot take it (not a floating-point device buffer that large) keeps its bytes, and the host, which redraws
// the twin, finds the captured input is not it.
void twin_substitute(const char *kernel) {
  if (!g_twin.active || !kernel || kernel_base_name(kernel) != g_twin.kernel) return;
  const std::vector<LaunchArg> &args = t_noted;
  uint64_t index = g_capture_index;  // the capture index capture_launch_begin gives this launch
  for (const TwinOperand &op : g_twin.operands) {
    size_t n = args.size();
    if ((size_t)op.arg >= n || (size_t)op.rows_arg >= n || (size_t)op.cols_arg >= n) continue;
    const LaunchArg &a = args[op.arg];
    long long rows = args[op.rows_arg].kind == 2 ? args[op.rows_arg].value : 0;
    long long cols = args[op.cols_arg].kind == 2 ? args[op.cols_arg].value : 0;
    int elem = a.elem_size;
    if (a.kind != 1 || a.dtype != 'f' || (elem != 2 && elem != 4 && elem != 8)) continue;
    if (rows <= 0 || cols <= 0 || rows > (1ll << 40) / cols) continue;
    size_t count = (size_t)rows * (size_t)cols;
    if (!is_device_ptr(a.ptr, count * (size_t)elem)) continue;
    uint64_t stream = twin_mix(g_twin.seed + kTwinGamma * (index * 64 + (uint64_t)op.arg + 1));
    constexpr size_t kChunk = 1 << 20;  // elements per upload: the twin never needs a second full-size copy
    std::vector<unsigned char> buf(std::min(count, kChunk) * (size_t)elem);
    for (size_t first = 0; first < count; first += kChunk) {
      size_t c = std::min(kChunk, count - first);
      twin_fill(buf.data(), first, c, elem, stream);
      int64_t sz = (int64_t)(c * (size_t)elem), one = 1;
      copy_strided(const_cast<char *>(static_cast<const char *>(a.ptr)) + first * (size_t)elem, buf.data(), 1, 1,
                   &sz, &one, &one);  // H2D: the bytes are the host's, not a kernel's
    }
  }
}

// Called with the launch lock held, after gdram_begin_launch and with device memory open to the runtime.
void capture_launch_begin() {
  g_launch = LaunchCapture{};
  g_launch.args.swap(t_noted);
  const char *dir = getenv("BANG_EMU_CAPTURE_DIR");
  if (!dir || !*dir || !trace_enabled()) return;
  g_launch.active = true;
  g_launch.dir = dir;
  g_launch.index = g_capture_index++;
  for (size_t i = 0; i < g_launch.args.size(); ++i) {
    Captured c;
    c.arg = g_launch.args[i];
    if (c.arg.kind == 1) {
      uintptr_t p = reinterpret_cast<uintptr_t>(c.arg.ptr);
      const GdramBuf *b = p ? find_gdram(p) : nullptr;
      if (b && p >= b->lo && p < b->hi) {
        c.buf = b;
        c.bytes = b->hi - p;
        c.in = capture_segments(g_launch.dir, g_launch.index, i, "in", c);
      }
    }
    g_launch.ptrs.push_back(c);
  }
}

// The launch record's "capture" field (empty when capture is off); takes the "out" copies first.
std::string capture_launch_end() {
  if (!g_launch.active) return "";
  std::string j = ",\"capture\":{\"index\":" + std::to_string(g_launch.index) + ",\"args\":[";
  for (size_t i = 0; i < g_launch.ptrs.size(); ++i) {
    const Captured &c = g_launch.ptrs[i];
    j += i ? "," : "";
    if (c.arg.kind == 2) {
      j += "{\"kind\":\"int\",\"value\":" + std::to_string(c.arg.value) + "}";
    } else if (c.arg.kind == 1 && c.buf) {
      uintptr_t p = reinterpret_cast<uintptr_t>(c.arg.ptr);
      uint64_t w = written_in(c.buf, p, p + c.bytes);
      std::string out = w ? capture_segments(g_launch.dir, g_launch.index, i, "out", c) : "[]";
      j += "{\"kind\":\"ptr\",\"dtype\":\"" + npy_descr(c.arg) + "\",\"bytes\":" + std::to_string(c.bytes) +
           ",\"written\":" + std::to_string(w) + ",\"in\":" + c.in + ",\"out\":" + out + "}";
    } else {
      j += std::string("{\"kind\":\"") + (c.arg.kind == 1 ? "host_ptr" : "other") + "\"}";
    }
  }
  g_launch.active = false;
  return j + "]}";
}

}  // namespace bang_emu

// The replay of a program sets its plan once, before the journal is replayed (bang_harness/programs.py):
// `operands` holds `count` triples (pointer argument, argument holding its rows, argument holding its columns).
extern "C" __attribute__((visibility("default"))) void bang_emu_program_twin(const char *kernel, uint64_t seed,
                                                                              const int32_t *operands, size_t count) {
  using namespace bang_emu;
  g_twin = TwinPlan{};
  if (!kernel || !operands || count == 0 || count > 16) return;
  g_twin.active = true;
  g_twin.kernel = kernel;
  g_twin.seed = seed;
  for (size_t i = 0; i < count; ++i) g_twin.operands.push_back({operands[3 * i], operands[3 * i + 1], operands[3 * i + 2]});
}
