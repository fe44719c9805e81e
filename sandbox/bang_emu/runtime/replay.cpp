// Trusted replay of a device journal (journal.cpp; DESIGN.md "Threat model").
//
// Runs in a clean process that no student host code ever entered: the replay harness loads this runtime, then
// the submission's *device module* (its .mlu files compiled again with every function instrumented, nothing
// run at load, calls only into the builtins: toolchain.link_device_module), and replays the journal a grading
// run wrote. Each marked input gets the host's fresh input instead of what the run uploaded; every kernel runs
// confined (strict mode: memory.cpp); the call's trace is signed with the replay's own key and its output is
// written beside it. What the run's process claimed is never read back: only the operations it asked for.
#include <dlfcn.h>
#include <link.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "journal.h"
#include "runtime.h"

namespace bang_emu {

GdramBuf *replay_device_buf(uintptr_t map_base, size_t map_len, uintptr_t lo, size_t bytes, bool storage,
                            const std::string &label);
bool replay_free_device_buf(uintptr_t lo, bool storage);
void set_strict_confinement(const std::vector<std::pair<uintptr_t, uintptr_t>> &writable, size_t tls_modid,
                            size_t tls_size);
void set_strict_image(const std::vector<std::pair<uintptr_t, uintptr_t>> &image);
std::string json_escape(const std::string &s);
size_t device_marks(uintptr_t p, size_t n);
void set_device_marks(uintptr_t p, size_t n, bool on);
std::pair<uintptr_t, uintptr_t> device_buffer_range(uintptr_t p);
std::string wasm_open(const char *path);
cnrtRet_t wasm_launch(size_t site, const char *kernel, const char *file, int line, cnrtDim3_t dim, int func_type,
                      const unsigned char *args, size_t nbytes);
void note_packed_launch_args(const std::string &layout, const unsigned char *args, size_t nbytes);

namespace {

// The replay harness's runner of torch operators (bang_harness/replay_ops.py), set before bang_emu_replay.
// phase 1: `payload` is {"op", "where", "args"}; it reads the inputs and computes the result. phase 2: `payload`
// is the operator's {"outs": ...}; it writes the result there. It answers in `result`: a first line "ok",
// "forbidden" (the assignment does not allow this operator) or "error <why>", then a line "<address> <bytes>" per
// device range it read (phase 1) or wrote (phase 2).
using OpHandler = int (*)(int phase, const char *payload, size_t n, char *result, size_t result_len);
OpHandler g_op_handler = nullptr;
constexpr size_t kOpResultBytes = 1 << 20;

struct Reader {
  const unsigned char *p, *end;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (end - p < (ptrdiff_t)sizeof(T)) {
      ok = false;
      return v;
    }
    memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string str(size_t cap) {
    uint32_t n = get<uint32_t>();
    if (!ok || n > cap || end - p < (ptrdiff_t)n) {
      ok = false;
      return "";
    }
    std::string s(reinterpret_cast<const char *>(p), n);
    p += n;
    return s;
  }
  const unsigned char *bytes(uint64_t n) {
    if (end - p < (ptrdiff_t)n || (int64_t)n < 0) {
      ok = false;
      return nullptr;
    }
    const unsigned char *q = p;
    p += n;
    return q;
  }
};

bool safe_call_id(const std::string &id) {
  if (id.empty() || id.size() > 128) return false;
  for (char ch : id)
    if (!isalnum((unsigned char)ch) && ch != '_' && ch != '-' && ch != '.') return false;
  return id[0] != '.';
}

bool read_file(const std::string &path, std::string *out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

bool write_file(const std::string &path, const void *p, size_t n) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, static_cast<const char *>(p) + off, n - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(fd);
  return off == n;
}

// The device module's launch sites, by key: the native module's ReplaySiteRecord invokers (their records' offsets
// come from the module's symbol table), or the wasm module's (wasm_host.cpp, by the index engine.py gave them).
using SiteInvoke = std::function<cnrtRet_t(const char *kernel, const char *file, int line, cnrtDim3_t dim,
                                           int func_type, const unsigned char *args, size_t nbytes)>;
using SiteMap = std::unordered_map<std::string, SiteInvoke>;

struct ModuleImage {
  std::vector<std::pair<uintptr_t, uintptr_t>> image, writable;
  size_t tls_modid = 0, tls_size = 0;
  uintptr_t base = 0;
};

int module_phdrs(struct dl_phdr_info *info, size_t, void *data) {
  auto *m = static_cast<ModuleImage *>(data);
  if (info->dlpi_addr != m->base) return 0;
  uintptr_t relro_lo = 0, relro_hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_GNU_RELRO) relro_lo = info->dlpi_addr + ph.p_vaddr, relro_hi = relro_lo + ph.p_memsz;
  }
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto &ph = info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (ph.p_type == PT_LOAD) {
      m->image.push_back({lo, hi});
      if (ph.p_flags & PF_W) m->writable.push_back({std::max(lo, relro_hi > lo && relro_lo <= lo ? relro_hi : lo), hi});
    }
    if (ph.p_type == PT_TLS) m->tls_size = ph.p_memsz;
  }
  m->tls_modid = info->dlpi_tls_modid;
  return 1;
}

struct Range {
  uintptr_t lo, hi;
  bool overlaps(uintptr_t a, uintptr_t b) const { return a < hi && lo < b; }
};

struct Taint {
  std::vector<Range> ranges;
  std::string why;
  bool hits(uintptr_t lo, uintptr_t hi) const {
    for (const Range &r : ranges)
      if (r.overlaps(lo, hi)) return true;
    return false;
  }
  void clear(uintptr_t lo, uintptr_t hi) {
    ranges.erase(std::remove_if(ranges.begin(), ranges.end(), [&](const Range &r) { return r.overlaps(lo, hi); }),
                 ranges.end());
  }
  void add(uintptr_t lo, uintptr_t hi, const std::string &source) {
    if (why.empty()) why = source;
    ranges.push_back({lo, hi});
  }
  // A kernel whose argument bytes point into a tainted buffer: every buffer its arguments point to is tainted.
  void through_kernel(const unsigned char *args, uint64_t n) {
    bool reads = false;
    for (uint64_t k = 0; !ranges.empty() && k + 8 <= n && !reads; k += 4) {
      uint64_t word;
      memcpy(&word, args + k, 8);
      reads = hits(word, word + 1);
    }
    for (uint64_t k = 0; reads && k + 8 <= n; k += 4) {
      uint64_t word;
      memcpy(&word, args + k, 8);
      auto range = device_buffer_range((uintptr_t)word);
      if (range.first < range.second) ranges.push_back({range.first, range.second});
    }
  }
};

struct OpAnswer {
  std::string status;  // "ok", "forbidden", "error ..."
  std::vector<Range> ranges;
};

OpAnswer ask_op_handler(int phase, const std::string &payload) {
  OpAnswer a;
  if (!g_op_handler) {
    a.status = "error the replay has no runner of torch operators";
    return a;
  }
  std::vector<char> out(kOpResultBytes, 0);
  g_op_handler(phase, payload.data(), payload.size(), out.data(), out.size() - 1);
  std::istringstream in(std::string(out.data()));
  std::getline(in, a.status);
  uint64_t lo = 0, n = 0;
  while (in >> lo >> n)
    if (n) a.ranges.push_back({(uintptr_t)lo, (uintptr_t)(lo + n)});
  return a;
}

struct Replay {
  std::string inputs, outputs;
  SiteMap sites;
  // Device ranges whose bytes came from an operator the assignment does not allow (`forbidden`) or from host code
  // during a call (`host`: an upload the replay repeats byte for byte, so it does not follow the twin's inputs),
  // directly or through later copies, operators and kernels that read them; `why` names the first source.
  Taint forbidden, host;
  std::string host_where;  // the line of the next host upload (kHostWhere mark)
  std::string not_kernel;  // the call's output holds forbidden bytes: which operator
  std::string host_data;   // the call's output holds host bytes: which upload
  bool op_open = false, op_marked = false, op_forbidden = false;
  bool op_in_forbidden = false, op_in_host = false;
  std::string op_name, op_where;
  uint64_t op_bytes = 0;
  std::string call;        // the call being replayed ("" before the first mark)
  bool call_failed = false;
  std::string call_error;
  bool sealed = false;
  std::set<std::string> seen;

  void fail(const std::string &why) {
    if (!call_failed) call_error = why;
    call_failed = true;
  }

  void finish_call() {
    if (call.empty()) return;
    std::string status = std::string("{\"call\":\"") + json_escape(call) + "\",\"ok\":" +
                         (call_failed ? "false" : "true") + ",\"sealed\":" + (sealed ? "true" : "false") +
                         ",\"error\":\"" + json_escape(call_error) + "\",\"not_kernel\":\"" +
                         json_escape(not_kernel) + "\",\"host_data\":\"" + json_escape(host_data) + "\"}\n";
    write_file(outputs + "/" + call + ".replay.json", status.data(), status.size());
    call.clear();
  }

  void begin_call(const std::string &id) {
    finish_call();
    call_failed = false;
    call_error.clear();
    not_kernel.clear();
    host_data.clear();
    sealed = false;
    if (!safe_call_id(id) || !seen.insert(id).second) {
      call = "";
      return;  // a call id the host never asked for, or twice: its operations still run, nothing is written
    }
    call = id;
    bang_emu_begin_call(id.c_str(), (outputs + "/" + id + ".trace.jsonl").c_str());
  }

  void input(uint32_t k, uintptr_t p, uint64_t n) {
    if (call.empty()) return;
    std::string data;
    if (!read_file(inputs + "/" + call + "." + std::to_string(k) + ".bin", &data)) {
      fail("the run marked input " + std::to_string(k) + ", which the call does not have");
      return;
    }
    if (data.size() != n || !is_device_ptr(reinterpret_cast<void *>(p), n)) {
      fail("input " + std::to_string(k) + " was marked as " + std::to_string(n) + " B of device memory; it has " +
           std::to_string(data.size()) + " B");
      return;
    }
    int64_t sz = (int64_t)n, one = 1;
    copy_strided(reinterpret_cast<void *>(p), data.data(), 1, 1, &sz, &one, &one);  // H2D: marks cleared
  }

  void output(uintptr_t p, uint64_t n) {
    if (call.empty() || sealed) return;
    sealed = true;
    if (forbidden.hits(p, p + n)) not_kernel = forbidden.why;
    if (host.hits(p, p + n)) host_data = host.why.empty() ? "host code" : host.why;
    if (bang_emu_seal_output(reinterpret_cast<void *>(p), n) != 0) {
      fail("the output was marked outside device memory");
      return;
    }
    std::vector<char> bytes(n);
    int64_t sz = (int64_t)n, one = 1;
    copy_strided(bytes.data(), reinterpret_cast<void *>(p), 1, 1, &sz, &one, &one);
    write_file(outputs + "/" + call + ".out.bin", bytes.data(), n);
  }

  void launch(Reader &r) {
    std::string key = r.str(1 << 16), kernel = r.str(4096), file = r.str(4096);
    uint32_t line = r.get<uint32_t>();
    cnrtDim3_t dim{r.get<uint32_t>(), r.get<uint32_t>(), r.get<uint32_t>()};
    int func_type = (int)r.get<uint32_t>();
    uint64_t n = r.get<uint64_t>();
    const unsigned char *args = r.bytes(n);
    if (!r.ok) return;
    if (key.empty()) {
      fail("kernel " + kernel + " was launched in a way the replay cannot repeat (cnrtInvokeKernel or a kernel "
           "argument that is not trivially copyable)");
      return;
    }
    auto it = sites.find(key);
    if (it == sites.end()) {
      fail("kernel " + kernel + " (" + file + ":" + std::to_string(line) +
           ") was launched from a site that the submission's device code does not have");
      return;
    }
    uintptr_t sp;
    asm volatile("mov %%rsp, %0" : "=r"(sp));
    set_launcher_frames(0, sp);  // the invoker's frames, below this one, hold the kernel's arguments
    cnrtRet_t ret = it->second(kernel.c_str(), file.c_str(), (int)line, dim, func_type, args, n);
    set_launcher_frames(0, 0);
    // a kernel that reads tainted bytes passes them on to whatever it may have written
    forbidden.through_kernel(args, n);
    host.through_kernel(args, n);
    if (ret == cnrtErrorArgsInvalid) fail("kernel " + kernel + " was launched with arguments of the wrong size");
    // a kernel error is in the trace already, as in the run
  }

  bool device_range(uintptr_t p, uint64_t n) { return n == 0 || is_device_ptr(reinterpret_cast<void *>(p), n); }

  void untaint(uintptr_t lo, uintptr_t hi) {
    forbidden.clear(lo, hi);
    host.clear(lo, hi);
  }

  std::string op_text() const { return op_name + (op_where.empty() ? "" : " (" + op_where + ")"); }

  // kOpBegin: the operator's inputs are read now (the run may free them before its end); its result is written
  // at kOpEnd, where the run's copy-back put it.
  void op_begin(Reader &r) {
    op_name = r.str(256);
    op_where = r.str(1024);
    std::string args = r.str(64u << 20);
    if (!r.ok) return;
    if (op_open) fail("torch operator " + op_text() + " began inside another one");
    op_open = true;
    op_marked = op_forbidden = op_in_forbidden = op_in_host = false;
    op_bytes = 0;
    OpAnswer a = ask_op_handler(1, "{\"op\":\"" + json_escape(op_name) + "\",\"where\":\"" + json_escape(op_where) +
                                       "\",\"args\":" + (args.empty() ? "null" : args) + "}");
    if (a.status.compare(0, 5, "error") == 0) {
      fail("torch operator " + op_text() + " could not be replayed:" + a.status.substr(5));
      return;
    }
    op_forbidden = a.status == "forbidden";
    for (const Range &in : a.ranges) {
      op_bytes += in.hi - in.lo;
      op_marked = op_marked || device_marks(in.lo, in.hi - in.lo) > 0;
      op_in_forbidden = op_in_forbidden || forbidden.hits(in.lo, in.hi);
      op_in_host = op_in_host || host.hits(in.lo, in.hi);
    }
  }

  void op_end(Reader &r) {
    std::string outs = r.str(64u << 20);
    if (!r.ok) return;
    if (!op_open) {
      fail("a torch operator ended that never began");
      return;
    }
    op_open = false;
    OpAnswer a = ask_op_handler(2, outs.empty() ? "null" : outs);
    if (a.status.compare(0, 5, "error") == 0) {
      fail("torch operator " + op_text() + " could not be replayed:" + a.status.substr(5));
      return;
    }
    for (const Range &out : a.ranges) {
      op_bytes += out.hi - out.lo;
      // an allowed operator passes the kernels' marks on (a cast of a kernel's output is still the kernels' work)
      set_device_marks(out.lo, out.hi - out.lo, op_marked && !op_forbidden);
      untaint(out.lo, out.hi);
      if (op_forbidden) forbidden.add(out.lo, out.hi, op_text());
      else if (op_in_forbidden) forbidden.add(out.lo, out.hi, "");
      if (op_in_host) host.add(out.lo, out.hi, "");
    }
    // charged like a device library call: its bytes through GDRAM plus a launch
    const Profile &P = profile();
    double us = P.launch_overhead_us + (double)op_bytes / (P.gdram_gbps * 1000.0);
    trace_record("op", "\"op\":\"" + json_escape(op_name) + "\",\"where\":\"" + json_escape(op_where) +
                           "\",\"allowed\":" + (op_forbidden ? "false" : "true") + ",\"bytes\":" +
                           std::to_string(op_bytes) + ",\"modelled_time_us\":" + json_number(us));
  }

  // Applies one record; false ends the replay (a malformed journal).
  bool apply(JournalKind kind, Reader r, std::string *error) {
    switch (kind) {
      case JournalKind::kAlloc: {
        uint64_t base = r.get<uint64_t>(), len = r.get<uint64_t>(), lo = r.get<uint64_t>(), bytes = r.get<uint64_t>();
        bool storage = r.get<uint8_t>() != 0;
        std::string label = r.str(256);
        if (!r.ok) break;
        if (!replay_device_buf(base, len, lo, bytes, storage, label)) {
          *error = "a device buffer could not be placed where the run had it";
          return false;
        }
        untaint(lo, lo + bytes);
        return true;
      }
      case JournalKind::kFree: {
        uint64_t lo = r.get<uint64_t>();
        bool storage = r.get<uint8_t>() != 0;
        if (r.ok) {
          auto range = device_buffer_range(lo);
          if (range.first < range.second) untaint(range.first, range.second);
          replay_free_device_buf(lo, storage);
        }
        return r.ok || (*error = "malformed free record", false);
      }
      case JournalKind::kWrite: {
        uint64_t dst = r.get<uint64_t>(), n = r.get<uint64_t>();
        const unsigned char *data = r.bytes(n);
        if (!r.ok) break;
        if (!device_range(dst, n)) {
          fail("host code wrote outside device memory");
          return true;
        }
        int64_t sz = (int64_t)n, one = 1;
        if (n) copy_strided(reinterpret_cast<void *>(dst), data, 1, 1, &sz, &one, &one);
        untaint(dst, dst + n);
        if (!call.empty() && n) host.add(dst, dst + n, host_where);
        host_where.clear();
        return true;
      }
      case JournalKind::kCopy: {
        uint64_t dst = r.get<uint64_t>(), src = r.get<uint64_t>(), elem = r.get<uint64_t>();
        uint32_t ndim = r.get<uint32_t>();
        if (!r.ok || ndim > 16) break;
        int64_t sizes[16], dstr[16], sstr[16];
        for (uint32_t k = 0; k < ndim; ++k) sizes[k] = (int64_t)r.get<uint64_t>();
        for (uint32_t k = 0; k < ndim; ++k) dstr[k] = (int64_t)r.get<uint64_t>();
        for (uint32_t k = 0; k < ndim; ++k) sstr[k] = (int64_t)r.get<uint64_t>();
        if (!r.ok) break;
        // both sides must be device memory: the replay never reads its own host memory into the device
        int64_t lo = 0, hi = 0, slo = 0, shi = 0;
        for (uint32_t k = 0; k < ndim; ++k) {
          if (sizes[k] <= 0) return true;
          (dstr[k] < 0 ? lo : hi) += (sizes[k] - 1) * dstr[k];
          (sstr[k] < 0 ? slo : shi) += (sizes[k] - 1) * sstr[k];
        }
        if (elem == 0 || elem > 64 ||
            !device_range(dst + lo * (int64_t)elem, (uint64_t)((hi - lo + 1) * (int64_t)elem)) ||
            !device_range(src + slo * (int64_t)elem, (uint64_t)((shi - slo + 1) * (int64_t)elem))) {
          fail("a device-to-device copy reached outside device memory");
          return true;
        }
        copy_strided(reinterpret_cast<void *>(dst), reinterpret_cast<void *>(src), elem, (int)ndim, sizes, dstr, sstr);
        {  // the copy carries what its source was made of
          uintptr_t dlo = dst + lo * (int64_t)elem, dhi = dst + (hi + 1) * (int64_t)elem;
          uintptr_t s_lo = src + slo * (int64_t)elem, s_hi = src + (shi + 1) * (int64_t)elem;
          bool from_forbidden = forbidden.hits(s_lo, s_hi), from_host = host.hits(s_lo, s_hi);
          untaint(dlo, dhi);
          if (from_forbidden) forbidden.add(dlo, dhi, "");
          if (from_host) host.add(dlo, dhi, "");
        }
        return true;
      }
      case JournalKind::kMemset: {
        uint64_t dst = r.get<uint64_t>();
        uint32_t value = r.get<uint32_t>();
        uint64_t n = r.get<uint64_t>();
        if (!r.ok) break;
        if (!device_range(dst, n)) fail("a memset reached outside device memory");
        else {
          memset_device(reinterpret_cast<void *>(dst), (int)value, n);
          untaint(dst, dst + n);
        }
        return true;
      }
      case JournalKind::kRegister:
      case JournalKind::kUnregister: {
        uint64_t p = r.get<uint64_t>(), n = r.get<uint64_t>();
        std::string label = r.str(256);
        if (!r.ok) break;
        if (kind == JournalKind::kUnregister) bang_emu_unregister_gdram(reinterpret_cast<void *>(p));
        else if (device_range(p, n)) bang_emu_register_gdram(reinterpret_cast<void *>(p), n, label.c_str());
        else fail("a kernel was given host memory (" + label + "), which a replay cannot reproduce");
        return true;
      }
      case JournalKind::kLaunch:
        launch(r);
        if (!r.ok) break;
        return true;
      case JournalKind::kMark: {
        auto what = (JournalMark)r.get<uint8_t>();
        uint32_t index = r.get<uint32_t>();
        uint64_t p = r.get<uint64_t>(), n = r.get<uint64_t>();
        std::string text = r.str(256);
        if (!r.ok) break;
        if (what == JournalMark::kCall) begin_call(text);
        else if (what == JournalMark::kInput) input(index, p, n);
        else if (what == JournalMark::kOutput) output(p, n);
        else if (what == JournalMark::kHostWhere) host_where = text;
        return true;
      }
      case JournalKind::kOpBegin:
        op_begin(r);
        if (!r.ok) break;
        return true;
      case JournalKind::kOpEnd:
        op_end(r);
        if (!r.ok) break;
        return true;
      case JournalKind::kOverflow:
        fail("the run's device journal reached its cap (" + std::to_string(kJournalMaxBytes >> 20) +
             " MiB of host uploads): the replay stops here");
        *error = "journal cap";
        return false;
    }
    *error = "malformed journal record";
    return false;
  }
};

}  // namespace
}  // namespace bang_emu

using namespace bang_emu;

namespace {
// The entry points' answer: a message into the caller's buffer, and -1.
struct Reply {
  char *message;
  size_t len;
  int operator()(const std::string &m) const {
    if (message && len) snprintf(message, len, "%s", m.c_str());
    return -1;
  }
};

// The journal file, its magic checked: "" or why not.
std::string load_journal(const char *path, std::string *journal) {
  if (!read_file(path, journal)) return "cannot read the journal";
  if (journal->size() < 4 || journal->compare(0, 4, "BEJ1") != 0) return "not a device journal";
  return "";
}

// Applies every record of `journal` (its magic checked) to R, then closes the last call.
template <class Say>
int run_journal(Replay &R, const std::string &journal, Say say) {
  Reader r{reinterpret_cast<const unsigned char *>(journal.data()) + 4,
           reinterpret_cast<const unsigned char *>(journal.data()) + journal.size()};
  std::string error;
  while (r.p < r.end) {
    auto kind = (JournalKind)r.get<uint8_t>();
    uint32_t len = r.get<uint32_t>();
    const unsigned char *payload = r.bytes(len);
    if (!r.ok) {
      error = "the journal ends inside a record (the run was killed while writing it)";
      break;
    }
    if (!R.apply(kind, Reader{payload, payload + len}, &error)) break;
  }
  if (!error.empty()) R.fail(error);
  R.finish_call();
  return error.empty() ? 0 : say(error);
}
}  // namespace

extern "C" void bang_emu_replay_set_op_handler(OpHandler handler) { g_op_handler = handler; }

extern "C" int bang_emu_replay(const char *journal_path, const char *device_module, const uint64_t *site_offsets,
                               size_t site_count, const char *inputs_dir, const char *outputs_dir, char *message,
                               size_t message_len) {
  Reply say{message, message_len};
  std::string journal;
  if (std::string why = load_journal(journal_path, &journal); !why.empty()) return say(why);
  void *module = dlopen(device_module, RTLD_NOW | RTLD_LOCAL);
  if (!module) return say(std::string("cannot load the device module: ") + dlerror());
  ModuleImage img;
  struct link_map *lm = nullptr;
  if (dlinfo(module, RTLD_DI_LINKMAP, &lm) != 0 || !lm) return say("the device module's link map was not found");
  img.base = lm->l_addr;
  dl_iterate_phdr(module_phdrs, &img);
  if (img.image.empty()) return say("the device module's segments were not found");
  set_strict_confinement(img.writable, img.tls_modid, img.tls_size);
  set_strict_image(img.image);
  Replay R;
  R.inputs = inputs_dir;
  R.outputs = outputs_dir;
  for (size_t i = 0; i < site_count; ++i) {
    uintptr_t at = img.base + site_offsets[i];
    bool inside = false;
    for (auto &r : img.image) inside = inside || (at >= r.first && at + sizeof(ReplaySiteRecord) <= r.second);
    if (!inside) return say("a launch-site record lies outside the device module");
    auto *record = reinterpret_cast<const ReplaySiteRecord *>(at);
    R.sites.emplace(record->key(), record->invoke);
  }
  return run_journal(R, journal, say);
}

namespace {
// Each site key's argument layout for the wasm replay (bang_emu_wasm_site_layout), read as bang_emu_replay_wasm
// starts.
std::unordered_map<std::string, std::string> g_site_layouts;
}  // namespace

// Before bang_emu_replay_wasm: the argument layout of a site key (bang_emu/wasm/sites.py arg_layout), so each of its
// launches notes its arguments as a native invoker's launch does (capture.cpp note_packed_launch_args: a program's
// capture and twin inputs). A key without one launches with no arguments noted (nothing captured, no twin).
extern "C" __attribute__((visibility("default"))) void bang_emu_wasm_site_layout(const char *key, const char *layout) {
  if (key && layout) g_site_layouts[key] = layout;
}

// The same replay with the kernels compiled to WebAssembly (wasm_host.cpp): `keys[i]` is a journal site key and
// `sites[i]` the index of its invoker in the module (the harness maps one to the other: bang_emu/wasm/sites.py).
extern "C" __attribute__((visibility("default"))) int bang_emu_replay_wasm(
    const char *journal_path, const char *wasm_module, const char *const *keys, const uint64_t *sites,
    size_t site_count, const char *inputs_dir, const char *outputs_dir, char *message, size_t message_len) {
  Reply say{message, message_len};
  std::string journal;
  if (std::string why = load_journal(journal_path, &journal); !why.empty()) return say(why);
  std::string why = wasm_open(wasm_module);
  if (!why.empty()) {  // nothing replayed yet: the harness replays the journal natively instead
    say(why);
    return -2;
  }
  Replay R;
  R.inputs = inputs_dir;
  R.outputs = outputs_dir;
  for (size_t i = 0; i < site_count; ++i) {
    size_t site = sites[i];
    auto found = g_site_layouts.find(keys[i]);
    std::string layout = found == g_site_layouts.end() ? "" : found->second;
    R.sites.emplace(keys[i], [site, layout](const char *kernel, const char *file, int line, cnrtDim3_t dim,
                                            int func_type, const unsigned char *args, size_t nbytes) {
      note_packed_launch_args(layout, args, nbytes);
      return wasm_launch(site, kernel, file, line, dim, func_type, args, nbytes);
    });
  }
  return run_journal(R, journal, say);
}

// The device module binds every call outside the builtins to a stub that lands here (device_module.py).
extern "C" void bang_emu_forbidden_call(const char *name) {
  std::string what = name ? name : "?";
  if (t_core)
    kernel_error("forbidden-call",
                 "kernel code called " + what + ", which device code cannot call (only device functions and builtins)",
                 __builtin_return_address(0));
  write_all_stderr(("bang-emu: error: forbidden-call: " + what + " called outside a kernel\n").c_str());
  _exit(87);
}

// A kernel's printf in the device module (device_module.py): the host's printf, but never %n, which would store
// through an argument where no check sees it.
extern "C" int bang_emu_device_vprintf(const char *format, va_list args) {
  if (!format) return -1;
  for (const char *p = strchr(format, '%'); p; p = strchr(p + 2, '%')) {
    if (p[1] == '%') continue;
    const char *q = p + 1;
    while (*q && !strchr("diouxXeEfFgGaAcspn", *q)) ++q;
    if (*q == 'n') {
      if (t_core)
        kernel_error("forbidden-call", "printf with %n in kernel code (it stores through an argument)",
                     __builtin_return_address(0));
      return -1;
    }
    if (!*q) break;
    p = q - 1;
  }
  return vprintf(format, args);
}
