// Launch capture for grading standalone programs (a lab program with its own main()): with
// BANG_EMU_CAPTURE_DIR set, each launch's pointer arguments that point into device memory are copied to .npy
// files (from the pointer to the end of its buffer) before the kernel runs ("in") and, where the kernel wrote
// them, after it ("out"); the launch's signed trace record lists every argument with the SHA-256 of each
// captured segment, so the host checks the files against signed digests and never believes the program's own
// check. Files are 1-D arrays of the pointee type; a range larger than BANG_EMU_CAPTURE_SEGMENT_BYTES is captured
// as its head and tail; past BANG_EMU_CAPTURE_MAX_BYTES per process nothing more is written (segments: []).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
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
