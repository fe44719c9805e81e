// Device profiles: the parameters of the cost model, from the one device table (../devices.json, compiled in
// as devices_gen.h by toolchain.py). Sources and calibration are in ../README.md; every figure derived from
// them is reported as "modelled (<device>)".
//
// The profile is fixed once per process: BANG_EMU_DEVICE is captured by the runtime's constructor
// (trace.cpp) and later environment changes have no effect. Under the harness (a trace key was handed
// over) the profile is resolved in the constructor itself, before any student code exists.
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "devices_gen.h"
#include "runtime.h"

namespace bang_emu {

namespace {

// Every key of devices.json must land somewhere: an unknown or missing key is a build/packaging error.
Profile from_table(const DeviceEntry &e) {
  Profile p{};
  p.name = e.name;
  for (int i = 0; i < e.count; ++i) p.figures.emplace_back(e.figures[i].key, e.figures[i].value);
  struct Slot {
    std::string key;
    double *dst;
  };
  double arch = 0, clusters = 0, cores_per_cluster = 0, cores = 0, nram = 0, wram = 0, sram = 0;
  std::vector<Slot> slots = {
      {"arch", &arch},
      {"clock_mhz", &p.clock_mhz},
      {"clusters", &clusters},
      {"cores_per_cluster", &cores_per_cluster},
      {"cores", &cores},
      {"nram_bytes", &nram},
      {"wram_bytes", &wram},
      {"sram_bytes", &sram},
      {"gdram_gbps", &p.gdram_gbps},
      {"dma_efficiency", &p.dma_efficiency},
      {"cluster_gbps", &p.cluster_gbps},
      {"core_io_bytes_per_cycle", &p.core_io_bytes_per_cycle},
      {"move_bytes_per_cycle", &p.move_bytes_per_cycle},
      {"io_latency_cycles", &p.io_latency_cycles},
      {"move_latency_cycles", &p.move_latency_cycles},
      {"segment_cycles", &p.segment_cycles},
      {"vector_bytes_per_cycle", &p.vector_bytes_per_cycle},
      {"vector_overhead_cycles", &p.vector_overhead_cycles},
      {"tensor_ops_per_cycle_fp32", &p.tensor_ops_per_cycle_fp32},
      {"tensor_ops_per_cycle_fp16", &p.tensor_ops_per_cycle_fp16},
      {"tensor_ops_per_cycle_int", &p.tensor_ops_per_cycle_int},
      {"tensor_overhead_cycles", &p.tensor_overhead_cycles},
      {"barrier_cycles", &p.barrier_cycles},
      {"launch_overhead_us", &p.launch_overhead_us},
  };
  // one scalar access cost per memory space and direction, keyed as the trace is (spaces_gen.h, from spaces.py)
  for (int s = 0; s < kSpaces; ++s) {
    slots.push_back({std::string("scalar_load_") + kSpaceKeys[s], &p.scalar_load[s]});
    slots.push_back({std::string("scalar_store_") + kSpaceKeys[s], &p.scalar_store[s]});
  }
  const size_t nslots = slots.size();
  std::vector<bool> seen(nslots, false);
  for (int i = 0; i < e.count; ++i) {
    size_t j = 0;
    while (j < nslots && slots[j].key != e.figures[i].key) ++j;
    if (j == nslots) {
      fprintf(stderr, "bang-emu: fatal: devices.json key '%s' (%s) is unknown to the runtime\n", e.figures[i].key, e.name);
      abort();
    }
    *slots[j].dst = e.figures[i].value;
    seen[j] = true;
  }
  for (size_t j = 0; j < nslots; ++j) {
    if (!seen[j]) {
      fprintf(stderr, "bang-emu: fatal: devices.json entry %s lacks '%s'\n", e.name, slots[j].key.c_str());
      abort();
    }
  }
  p.arch = (int)arch;
  p.clusters = (int)clusters;
  p.cores_per_cluster = (int)cores_per_cluster;
  p.nram = (size_t)nram;
  p.wram = (size_t)wram;
  p.sram = (size_t)sram;
  return p;
}

const std::vector<Profile> &profiles() {
  static const std::vector<Profile> v = [] {
    std::vector<Profile> r;
    for (int i = 0; i < kDeviceCount; ++i) r.push_back(from_table(kDevices[i]));
    return r;
  }();
  return v;
}

std::string &default_device() {
  static std::string d = BANG_EMU_DEFAULT_DEVICE;
  return d;
}

// BANG_EMU_DEVICE as the constructor saw it (capture_device_env); later setenv calls are ignored.
std::string &env_device() {
  static std::string d;
  return d;
}

std::atomic<bool> g_profile_fixed{false};

}  // namespace

const Profile *find_profile(const std::string &name) {
  for (const Profile &p : profiles())
    if (p.name == name) return &p;
  return nullptr;
}

std::string profile_names() {
  std::string s;
  for (const Profile &p : profiles()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

void capture_device_env() {
  const char *env = getenv("BANG_EMU_DEVICE");
  env_device() = env ? env : "";
}

// The default baked in by `cncc-emu --emu-device=` (a static initializer of the program); ignored once the
// profile is fixed (always the case under the harness).
void set_default_device(const char *name) {
  if (name && *name && !g_profile_fixed.load()) default_device() = name;
}

const Profile &profile() {
  static const Profile *chosen = [] {
    std::string want = !env_device().empty() ? env_device() : default_device();
    const Profile *p = find_profile(want);
    if (!p) {
      fprintf(stderr, "bang-emu: warning: unknown device '%s' (known: %s); using %s\n", want.c_str(),
              profile_names().c_str(), BANG_EMU_DEFAULT_DEVICE);
      p = find_profile(BANG_EMU_DEFAULT_DEVICE);
    }
    g_profile_fixed.store(true);
    return p;
  }();
  return *chosen;
}

}  // namespace bang_emu
