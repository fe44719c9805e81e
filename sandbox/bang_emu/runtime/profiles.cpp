// Device profiles: the parameters of the cost model. Sources and calibration are in ../README.md;
// every figure derived from them is reported as "modelled (<device>)".
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "runtime.h"

namespace bang_emu {

namespace {

Profile mlu370(const char *name, double clock_mhz, double gdram_gbps) {
  Profile p;
  p.name = name;
  p.arch = 372;
  p.clock_mhz = clock_mhz;
  p.clusters = 4;  // DEVGUIDE 5.3.1: 4 clusters x (4 MLU cores + 1 memory core)
  p.cores_per_cluster = 4;
  p.nram = 768 * 1024;
  p.wram = 1024 * 1024;
  p.sram = 4096 * 1024;
  p.gdram_gbps = gdram_gbps;
  p.dma_efficiency = 0.85;
  p.cluster_gbps = 128.0;  // mlu-ops executor.h: one cluster
  p.core_io_bytes_per_cycle = 64.0;
  p.move_bytes_per_cycle = 128.0;
  p.io_latency_cycles = 700;
  p.move_latency_cycles = 150;
  p.segment_cycles = 4;
  for (int s = 0; s < kSpaces; ++s) p.scalar_load[s] = p.scalar_store[s] = 1;
  // Scalar costs absorb the surrounding scalar ALU work of a typical loop (fitted, README "calibration").
  p.scalar_load[kGdram] = 300;
  p.scalar_store[kGdram] = 300;
  p.scalar_load[kLdram] = p.scalar_store[kLdram] = 300;
  p.scalar_load[kNram] = 15;
  p.scalar_store[kNram] = 15;
  p.scalar_load[kSram] = p.scalar_store[kSram] = 20;
  p.scalar_load[kOther] = p.scalar_store[kOther] = 2;  // stack (NRAM-resident on the MLU), task registers
  p.vector_bytes_per_cycle = 128;  // DEVGUIDE 5.3.4
  p.vector_overhead_cycles = 20;
  p.tensor_ops_per_cycle_fp32 = 2 * 384;  // mlu-ops executor.h (ref 1V_User_Guide)
  p.tensor_ops_per_cycle_fp16 = 2 * 1536;
  p.tensor_ops_per_cycle_int = 2 * 2048;
  p.tensor_overhead_cycles = 100;
  p.barrier_cycles = 600;
  p.launch_overhead_us = 30;
  return p;
}

std::vector<Profile> make_profiles() {
  std::vector<Profile> v;
  Profile x8 = mlu370("mlu370-x8", 1000, 307.2);  // lab ran the X8 at 1000 MHz
  v.push_back(x8);
  Profile x4 = mlu370("mlu370-x4", 1000, 307.2);
  x4.scalar_load[kGdram] = x4.scalar_store[kGdram] = 360;
  x4.launch_overhead_us = 50;
  x4.dma_efficiency = 0.95;
  v.push_back(x4);
  Profile m8 = mlu370("mlu370-m8", 1300, 409.6);  // assumed: see README
  v.push_back(m8);
  Profile m270 = mlu370("mlu270", 1000, 102.4);
  m270.arch = 270;
  m270.nram = 512 * 1024;
  m270.wram = 1024 * 1024;
  m270.sram = 2048 * 1024;
  m270.cluster_gbps = 102.4 / 4 * 2;
  m270.tensor_ops_per_cycle_fp32 = 2 * 256;  // assumed: no fp32 figure published for MLU270
  m270.tensor_ops_per_cycle_fp16 = 2 * 1024;
  v.push_back(m270);
  return v;
}

const std::vector<Profile> &profiles() {
  static const std::vector<Profile> v = make_profiles();
  return v;
}

std::string &default_device() {
  static std::string d = "mlu370-x8";
  return d;
}

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

void set_default_device(const char *name) {
  if (name && *name) default_device() = name;
}

const Profile &profile() {
  static const Profile *chosen = [] {
    const char *env = getenv("BANG_EMU_DEVICE");
    std::string want = (env && *env) ? env : default_device();
    const Profile *p = find_profile(want);
    if (!p) {
      fprintf(stderr, "bang-emu: warning: unknown device '%s' (known: %s); using mlu370-x8\n", want.c_str(),
              profile_names().c_str());
      p = find_profile("mlu370-x8");
    }
    return p;
  }();
  return *chosen;
}

}  // namespace bang_emu
