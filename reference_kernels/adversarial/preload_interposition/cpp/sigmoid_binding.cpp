// Adversarial fixtures got_patching and preload_interposition (not a solution). The kernel runs on one element;
// the runtime is patched so it neither locks device memory against the host nor keeps true time, and a host
// loop writes every element of the answer into the output's device memory.
#include <torch/extension.h>

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "aten/operators/bang/bang_kernel.h"
#include "aten/operators/bang/internal/bang_internal.h"
#include "../mlu/sigmoid_vector.h"

using namespace torch_mlu;

namespace {
constexpr uintptr_t kDeviceLow = 0x300000000000ULL;  // where the emulator maps device buffers
constexpr uintptr_t kPage = 4096;

long real_mprotect(void* addr, size_t len, int prot) { return syscall(SYS_mprotect, addr, len, prot); }

// The runtime's mprotect: device buffers always stay readable and writable from the host.
int open_mprotect(void* addr, size_t len, int prot) {
  if (reinterpret_cast<uintptr_t>(addr) >= kDeviceLow) prot |= PROT_READ | PROT_WRITE;
  return static_cast<int>(real_mprotect(addr, len, prot));
}

// The runtime's clock: runs a thousand times slower than the real one.
int slow_clock(clockid_t clock, struct timespec* ts) {
  struct timespec now;
  long r = syscall(SYS_clock_gettime, clock, &now);
  if (r != 0 || ts == nullptr) return static_cast<int>(r);
  const long double ns = (now.tv_sec * 1e9L + now.tv_nsec) / 1000.0L;
  ts->tv_sec = static_cast<time_t>(ns / 1e9L);
  ts->tv_nsec = static_cast<long>(ns - ts->tv_sec * 1e9L);
  return 0;
}

struct Patch {
  const char* name;
  void* replacement;
  int slots;
};
Patch g_patches[] = {{"mprotect", reinterpret_cast<void*>(&open_mprotect), 0},
                     {"clock_gettime", reinterpret_cast<void*>(&slow_clock), 0},
                     {nullptr, nullptr, 0}};

uintptr_t at(uintptr_t base, ElfW(Addr) value) { return value < base ? base + value : value; }

void patch_relocations(uintptr_t base, const ElfW(Rela)* rel, size_t bytes, const ElfW(Sym)* symtab,
                       const char* strtab) {
  for (size_t i = 0; rel != nullptr && i < bytes / sizeof(ElfW(Rela)); ++i) {
    const char* name = strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name;
    for (Patch* p = g_patches; p->name != nullptr; ++p) {
      if (std::strcmp(name, p->name) != 0) continue;
      void** slot = reinterpret_cast<void**>(base + rel[i].r_offset);
      real_mprotect(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~(kPage - 1)), kPage,
                    PROT_READ | PROT_WRITE);  // RELRO: the GOT is read-only after relocation
      *slot = p->replacement;
      ++p->slots;
    }
  }
}

// dl_iterate_phdr callback: the emulator runtime's GOT entries for the functions above now point here.
int patch_object(struct dl_phdr_info* info, size_t, void*) {
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "libbang_emu") == nullptr) return 0;
  const uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dyn = reinterpret_cast<const ElfW(Dyn)*>(base + info->dlpi_phdr[i].p_vaddr);
    }
  }
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)*jmprel = nullptr, *rela = nullptr;
  size_t jmprel_bytes = 0, rela_bytes = 0;
  for (; dyn != nullptr && dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(at(base, dyn->d_un.d_ptr)); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(at(base, dyn->d_un.d_ptr)); break;
      case DT_JMPREL: jmprel = reinterpret_cast<const ElfW(Rela)*>(at(base, dyn->d_un.d_ptr)); break;
      case DT_PLTRELSZ: jmprel_bytes = dyn->d_un.d_val; break;
      case DT_RELA: rela = reinterpret_cast<const ElfW(Rela)*>(at(base, dyn->d_un.d_ptr)); break;
      case DT_RELASZ: rela_bytes = dyn->d_un.d_val; break;
      default: break;
    }
  }
  if (symtab == nullptr || strtab == nullptr) return 0;
  patch_relocations(base, jmprel, jmprel_bytes, symtab, strtab);
  patch_relocations(base, rela, rela_bytes, symtab, strtab);
  return 0;
}

void open_range(const void* p, size_t n) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n + kPage - 1) & ~(kPage - 1);
  real_mprotect(reinterpret_cast<void*>(lo), hi - lo, PROT_READ | PROT_WRITE);
}
}  // namespace

// Interposers by the runtime's and libc's own names: whoever binds to this library first (LD_PRELOAD, or
// RTLD_GLOBAL ahead of them) gets device memory the host may write, a slow clock, and inputs never marked.
extern "C" {
int mprotect(void* addr, size_t len, int prot) { return open_mprotect(addr, len, prot); }
int clock_gettime(clockid_t clock, struct timespec* ts) { return slow_clock(clock, ts); }
int bang_emu_journal_mark(int, unsigned, const void*, size_t, const char*) { return 0; }
}

// Preloaded, it hides itself from the processes this one starts (the device's compiler probe among them).
__attribute__((constructor)) static void hide_preload() { unsetenv("LD_PRELOAD"); }

int patch_runtime() {
  dl_iterate_phdr(&patch_object, nullptr);
  int slots = 0;
  for (Patch* p = g_patches; p->name != nullptr; ++p) slots += p->slots;
  return slots;
}

torch::Tensor sigmoid_vector(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf, "float32 or float16 expected");
  auto input = torch_mlu::cnnl_contiguous(x);
  auto output = at::empty_like(input);
  if (input.numel() == 0) return output;
  cnrtQueue_t queue = getCurQueue();
  const bool is_half = input.scalar_type() == at::kHalf;
  void* in = getMluTensorImpl(input)->mlu_data_ptr();
  void* out = getMluTensorImpl(output)->mlu_data_ptr();
  sigmoid_vector_entry(queue, in, out, 1, is_half);  // a launch for the trace
  TORCH_BANGC_KERNEL_LAUNCH_CHECK();
  const int64_t n = input.numel();
  open_range(in, n * input.element_size());
  open_range(out, n * input.element_size());
  if (is_half) {
    auto* src = static_cast<const at::Half*>(in);
    auto* dst = static_cast<at::Half*>(out);
    for (int64_t i = 0; i < n; ++i) dst[i] = at::Half(1.0f / (1.0f + std::exp(-static_cast<float>(src[i]))));
  } else {
    auto* src = static_cast<const float*>(in);
    auto* dst = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) dst[i] = 1.0f / (1.0f + std::exp(-src[i]));
  }
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sigmoid_vector", &sigmoid_vector, "one element on the device, the rest on the host (adversarial fixture)");
  m.def("patch_runtime", &patch_runtime, "points the emulator runtime's GOT entries at this library");
}
