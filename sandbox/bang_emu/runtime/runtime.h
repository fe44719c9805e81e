// Internal interfaces of the bang_emu runtime (not installed for users).
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

// The runtime is built with -fvisibility=hidden: what these public headers declare (BANG builtins, CNRT,
// the bang_emu_* C entry points, the launch glue cncc-emu generates) is exported, nothing else.
#pragma GCC visibility push(default)
#include "../include/bang_emu/device.h"
#include "../include/bang_emu/external.h"
#pragma GCC visibility pop
#include "spaces_gen.h"  // enum Space, kSpaceNames, kSpaceKeys: generated from ../spaces.py by toolchain.py

struct cnrtQueue {
  double clock_us = 0;  // modelled device time of the work queued so far
  cnrtRet_t error = cnrtSuccess;
};
struct cnrtNotifier {
  double time_us = -1;
};

namespace bang_emu {

const char *space_name(int s);

// Where a core's modelled cycles went: busy per unit, and the issue stream's stalls. The keys are the trace's
// "time_split_us" ones, which the host reads.
enum TimeSplit : int { kSplitScalar = 0, kSplitVector, kSplitTensor, kSplitIo, kSplitWait, kSplits };
inline constexpr const char *kTimeSplitKeys[kSplits] = {"scalar", "vector", "tensor", "io", "wait"};
using SplitTimes = std::array<double, kSplits>;

// The profile timeline (a launch record's "timeline", read on the host from the replay's trace only): per core
// the modelled busy intervals of each unit. Lanes and kinds are indices into these names, which the host reads
// from the record itself.
enum TimelineLane : uint8_t { kLaneIssue = 0, kLaneCompute, kLaneIo, kLaneMove, kLanes };
inline constexpr const char *kLaneNames[kLanes] = {"issue", "compute", "io", "move"};
enum TimelineKind : uint8_t { kEvScalar = 0, kEvLoad, kEvStore, kEvMove, kEvVector, kEvTensor, kEvSync, kEvBarrier,
                              kEvKinds };
inline constexpr const char *kKindNames[kEvKinds] = {"scalar", "load",  "store", "move",
                                                     "vector", "tensor", "sync",  "barrier"};
struct TimelineEvent {
  double start, end;  // cycles from the task's start
  uint8_t lane, kind;
};

// ---------------------------------------------------------------- device profiles (cost model parameters)
struct Profile {
  std::string name;
  std::vector<std::pair<std::string, double>> figures;  // the device's devices.json entry, in file order
  int arch;                 // __BANG_ARCH__ of the part
  double clock_mhz;         // cycles per microsecond
  int clusters;
  int cores_per_cluster;
  size_t nram, wram, sram;  // bytes per core / per cluster
  double gdram_gbps;        // card GDRAM bandwidth (GB/s), shared by every core
  double dma_efficiency;    // fraction of the GDRAM bandwidth DMA reaches
  double cluster_gbps;      // GDRAM bandwidth one cluster can draw
  double core_io_bytes_per_cycle;    // one core's IO-DMA ceiling
  double move_bytes_per_cycle;       // on-chip Move-DMA (SRAM<->NRAM/WRAM, NRAM<->WRAM)
  double io_latency_cycles, move_latency_cycles, segment_cycles;
  double scalar_load[kSpaces], scalar_store[kSpaces];  // cycles per scalar access, by address space
  double vector_bytes_per_cycle, vector_overhead_cycles;
  double tensor_ops_per_cycle_fp32, tensor_ops_per_cycle_fp16, tensor_ops_per_cycle_int, tensor_overhead_cycles;
  double barrier_cycles;
  double launch_overhead_us;
};
const Profile &profile();
const Profile *find_profile(const std::string &name);
std::string profile_names();
void capture_device_env();  // called once by the runtime's constructor

// ---------------------------------------------------------------- diagnostics
struct Diagnostic {
  std::string severity, kind, message, kernel, file;
  int line = 0;
};
// Thrown through kernel code to stop the task that hit a check (or saw another task's abort).
struct KernelAbort {};

// ---------------------------------------------------------------- GDRAM buffers
struct GdramBuf {
  uintptr_t lo = 0, hi = 0;        // user bytes [lo, hi)
  uintptr_t guard_lo = 0, guard_hi = 0;  // accesses in the guard but outside [lo, hi) are out of bounds
  uintptr_t map_base = 0;
  size_t map_len = 0;
  bool external = false;
  std::string label;
  std::unique_ptr<std::atomic<uint64_t>[]> written;  // per-byte bitmap for the current launch
  size_t written_words = 0;
  bool touched = false;
  // Device memory (cnrtMalloc, bang_emu_device_alloc) is owned by the runtime: PROT_NONE to host code outside
  // launches and documented copies, and it carries the per-call provenance marks (bytes kernel code wrote
  // during the current call). Registered external ranges point at the device buffer holding them, if any.
  bool device = false;
  bool storage = false;  // torch storage block: found only when no cnrtMalloc'd/registered buffer matches
  GdramBuf *owner = nullptr;
  std::vector<uint64_t> marks;  // valid when marks_gen == the current call generation
  uint64_t marks_gen = 0;
  int read_windows = 0, write_windows = 0;  // open host-access windows (documented copies)
  const void *alloc_ret = nullptr;  // the allocation's caller, resolved to file:line in diagnoses
  size_t elem_size = 0;  // from a tensor label ("tensor float[7] on mlu"), 0 if unknown
};
// Sorted snapshot of the live buffers, read without locks while a launch runs.
const GdramBuf *find_gdram(uintptr_t a);
void mark_written(const GdramBuf *b, uintptr_t lo, uintptr_t hi);
void gdram_begin_launch();
void gdram_end_launch();  // merges the launch's written bytes into the call's provenance marks
std::vector<GdramBuf *> gdram_live();
// Host access to device memory: all of it during a launch; a window for a documented copy otherwise.
void device_protect_for_launch(bool launching);
std::string describe_near(uintptr_t lo, size_t n);  // "N B past the end of buffer ..." or ""
std::string buffer_desc(const GdramBuf *b);         // label, size and where it was allocated
std::string task_position(const GdramBuf *b, uintptr_t a);  // "; task 1 of 4 starts at element 4096 of it"

// ---------------------------------------------------------------- on-chip arenas
struct OnchipVar {
  uintptr_t lo, hi;
  std::string tag;  // "name@file:line"
  mutable uint64_t epoch = 0;  // last launch that touched it (peak on-chip usage of a launch)
};
extern std::atomic<uint64_t> g_launch_epoch;
struct Arena {
  int space = kNram;
  uintptr_t base = 0;
  size_t reserve = 0, cursor = 0, used = 0;
  std::vector<OnchipVar> vars;  // sorted by lo (append-only, increasing addresses)
  mutable std::mutex mu;        // SRAM arenas are shared by the cluster's threads
  std::unordered_map<std::string, uintptr_t> by_tag;
  std::mutex data_mu;           // SRAM: held while a DMA reads the cluster's data or a barrier lands writes in it
  void init(int s, size_t reserve_bytes);
  uintptr_t alloc(size_t bytes, const std::string &tag);
  bool contains(uintptr_t a) const { return a >= base && a < base + reserve; }
  const OnchipVar *var_at(uintptr_t a) const;
};
size_t arena_touched_bytes(const Arena &a);
struct CoreMem {
  Arena nram, wram;
  Arena *sram = nullptr;  // the cluster slot's SRAM
};
CoreMem *thread_core_mem();
void bind_thread_core_mem(CoreMem *m);

// ---------------------------------------------------------------- per-task execution context
struct PendingCopy {
  uintptr_t dst_lo, dst_hi, src_lo, src_hi;
  int queue;  // 0 = IO-DMA, 1 = Move-DMA
  // the data movement itself, deferred to the sync that completes it
  void *dst;
  const void *src;
  int size, dst_stride0, src_stride0, seg0, dst_stride1, src_stride1, seg1;
  int dir;
  const GdramBuf *dst_buf;
  double start = 0, end = 0;  // modelled cycles of the transfer (SRAM ordering, sram.cpp)
  const void *ret = nullptr;  // the issuing call, for diagnostics
};

// Cluster-shared SRAM in UNIONn jobs (sram.cpp): a DMA write into SRAM is held in its core's log, data
// snapshotted when the copy completes, and lands in the arena when a barrier its core takes part in releases.
struct SramWrite {
  PendingCopy copy;        // geometry and modelled timing
  std::vector<char> data;  // the segments, packed
  int core = 0;            // thread index in the job
  bool published = false;  // already in the arena (its core touched SRAM directly, sram_publish_own)
};

struct LaunchState;

struct CoreCtx {
  LaunchState *launch = nullptr;
  CoreMem *mem = nullptr;
  bool is_mpu = false;
  int cluster = 0;   // cluster index inside the job (UNIONn), 0 for BLOCK
  uintptr_t stack_lo = 0, stack_hi = 0;  // the worker thread's stack (host/stack space)
  // strict confinement (replay): kernel code may store into the stack only below this (the stack pointer where
  // the runtime called into the kernel), and never over a live frame's saved frame pointer and return address
  uintptr_t stack_boundary = 0;
  // scalar-access fast path: the last classified range (hit_*), and the few classified before it (recent), each
  // exactly as access_slow left it: a loop that reads two buffers and writes a third (a scalar matmul) finds its
  // ranges here instead of classifying every access again
  uintptr_t hit_lo = 1, hit_hi = 0;
  int hit_space = kOther;
  const GdramBuf *hit_buf = nullptr;
  struct HitRange {
    uintptr_t lo = 1, hi = 0;
    int space = kOther;
    const GdramBuf *buf = nullptr;
  };
  static constexpr int kRecentHits = 3;
  HitRange recent[kRecentHits];
  void forget_hits(int space = -1);  // every cached range, or only those of one space
  // scalar access counts since the last flush into the timeline
  uint64_t loads[kSpaces] = {0}, stores[kSpaces] = {0};
  uint64_t total_loads[kSpaces] = {0}, total_stores[kSpaces] = {0};
  uint64_t load_bytes[kSpaces] = {0}, store_bytes[kSpaces] = {0};  // counted work (trace "work")
  // timeline (cycles)
  double t = 0, io_free = 0, move_free = 0, compute_free = 0;  // issue stream and queue horizons
  SplitTimes split{};  // cycles by TimeSplit
  double io_bw_cycles = 0, io_sync_bw_cycles = 0;  // bandwidth-bound part of GDRAM DMA (all / blocking)
  std::vector<PendingCopy> pending;
  bool sram_shared = false;              // a UNIONn task: SRAM shared with the cluster, ordered by barriers
  int slot = 0;                          // thread index in the UNIONn job (SRAM ordering)
  std::vector<SramWrite> sram_writes;    // this barrier interval's DMA writes into SRAM, not yet landed
  std::vector<PendingCopy> sram_reads;   // and its DMA reads of SRAM (the race check)
  std::unordered_map<const char *, uint64_t> builtins;
  std::unordered_map<const char *, uint64_t> elements;  // destination elements per vector/activation builtin
  uint64_t tensor_macs = 0;
  std::map<std::string, uint64_t> bytes_moved;
  uint64_t mpu_skipped = 0;
  bool record_timeline = false;  // this launch's tasks keep their events (the first launches of a call)
  std::vector<TimelineEvent> events;
  int last_event[kLanes] = {-1, -1, -1, -1};  // index of each lane's latest event (touching ones merge)
  void reset();
  void event(TimelineLane lane, TimelineKind kind, double start, double end);
  void flush_scalar();
  void charge_compute(TimeSplit unit, double cycles);  // kSplitVector or kSplitTensor
};
extern thread_local CoreCtx *t_core;

// Called by checks: records the diagnostic, aborts the launch and throws KernelAbort.
[[noreturn]] void kernel_error(const std::string &kind, const std::string &message, const void *ret_addr);
void kernel_warning(const std::string &kind, const std::string &message, const void *ret_addr);
void check_abort();  // throws KernelAbort when another task of the launch failed

// scalar access slow path (classification + checks); `frame`: the instrumented caller's frame pointer
void access_slow(CoreCtx *c, uintptr_t a, size_t n, bool store, const void *ret, uintptr_t frame);
// Strict confinement (a replay process, replay.cpp): kernel stores only into device memory, on-chip arrays,
// the kernel's own stack frames (never their links) and the device module's own writable data.
bool strict_confinement();
void strict_check_local_range(CoreCtx *c, uintptr_t lo, size_t n, const char *what, const void *ret,
                              uintptr_t frame);
void check_pending_access(CoreCtx *c, uintptr_t lo, uintptr_t hi, bool store, const void *ret,
                          const char *what, int same_queue = -1);

// barriers (UNION jobs)
enum BarrierKind { kBarCluster = 0, kBarAll = 1, kBarAllIpu = 2, kBarAllMpu = 3 };
void barrier(BarrierKind kind, const char *name, const void *ret);
void complete_pending(CoreCtx *c, int queue);  // queue -1 = all
void perform_copy(CoreCtx *c, const PendingCopy &p);

// SRAM ordering (sram.cpp). Between two barriers a core's DMA reads of SRAM see the arena as the last barrier
// left it plus the core's own writes; other cores' writes land at the next barrier, in modelled landing order.
bool sram_ordered(const CoreCtx *c);  // a UNIONn task (BLOCK tasks have no shared SRAM)
bool is_sram_dir_src(int dir);
bool is_sram_dir_dst(int dir);
// The source bytes a copy reading SRAM sees (arena + own unlanded writes), in `tmp`; returns the pointer to use
// in place of p.src.
const char *sram_read_source(CoreCtx *c, const PendingCopy &p, std::vector<char> &tmp);
void sram_log_write(CoreCtx *c, const PendingCopy &p, const char *src);
void sram_publish_own(CoreCtx *c);  // before scalar code or a fill touches SRAM directly
// At a barrier's release: the race check over the participants' logs, then their writes land. Returns the
// first race found ("" if none) and the read's call in *ret.
std::string sram_land(const std::vector<CoreCtx *> &participants, const void **ret);
void sram_land_writes(std::vector<SramWrite> &writes, Arena *sram);  // a job's last interval, after it ended

// host-side objects
struct cnrtQueueImpl;
void *gdram_alloc(size_t bytes, const void *ret);  // ret: the caller, for "cnrtMalloc'd at file:line"
bool gdram_free(void *p);
void poison_fill(void *p, size_t bytes);  // BANG_EMU_POISON
// Documented host-side operations on device memory (they open a window and keep the provenance marks right).
int copy_strided(void *dst, const void *src, size_t elem, int ndim, const int64_t *sizes, const int64_t *dst_strides,
                 const int64_t *src_strides);
void memset_device(void *p, int value, size_t n);
void host_window(const void *p, size_t n, bool write, bool open);
int seal_range(const void *p, size_t n, size_t *kernel_written, std::string *sha_hex);
// Fault outside kernel code at addr: if it is device memory, print the host-access error and _exit.
void host_access_fault(uintptr_t addr, bool write);
ssize_t write_all_stderr(const char *s);
bool is_device_ptr(const void *p, size_t bytes);
// Strict mode's launcher frames (memory.cpp): the replay sets the top before a site's invoker runs; the launch
// sets the bottom (its caller's frame). hi = 0 ends it.
void set_launcher_frames(uintptr_t lo, uintptr_t hi);
uintptr_t launcher_frames_top();
size_t gdram_bytes_in_use();
void set_last_error(cnrtRet_t e);
cnrtRet_t last_error(bool clear);
std::string source_line(const void *ret_addr, int *line_out, std::string *file_out);

// Code sites (the WebAssembly host, wasm_host.cpp): a wasm kernel has no native return addresses to symbolise, so
// where the runtime takes one the host gives a token of the statement's code site instead -- t_code_ret, which a
// builtin's caller_ret prefers (set before every builtin a wasm kernel calls), and CodeSites::current for a trap
// or a fault -- and source_line names a token's file:line through CodeSites::line. Unset natively.
struct CodeSites {
  bool (*line)(const void *token, std::string *file, int *line);  // false: not a token
  const void *(*current)();                                       // the running kernel's site, or nullptr
};
void set_code_sites(const CodeSites &sites);
const void *current_code_site();  // CodeSites::current's answer, nullptr natively
extern thread_local const void *t_code_ret;
inline const void *caller_ret(const void *native) { return t_code_ret ? t_code_ret : native; }

// bookkeeping helpers for builtins
void count_builtin(const char *name);

// ---------------------------------------------------------------- signed trace (trace.cpp, sha256.cpp)
struct Sha256 {
  uint32_t h[8];
  uint8_t buf[64];
  size_t fill = 0;
  uint64_t total = 0;
  Sha256();
  void update(const void *data, size_t n);
  void finish(uint8_t out[32]);
  void block(const uint8_t *p);
};
void hmac_sha256(const uint8_t *key, size_t key_len, const void *data, size_t n, uint8_t out[32]);
std::string to_hex(const uint8_t *p, size_t n);
std::string json_escape(const std::string &s);
std::string json_number(double v);
// Appends `<mac> {"record":kind,"call":id,"seq":n,<fields>}` to the call's trace (or BANG_EMU_TRACE).
void trace_record(const char *kind, const std::string &fields);
bool trace_enabled();  // a call is open or BANG_EMU_TRACE is set
uint64_t call_generation();  // bumped by bang_emu_begin_call: provenance marks of older calls are void

}  // namespace bang_emu
