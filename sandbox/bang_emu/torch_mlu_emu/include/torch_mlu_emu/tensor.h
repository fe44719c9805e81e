// bang_emu: emulation of torch_mlu's tensor access for custom ops (getMluTensorImpl, mlu_data_ptr,
// cnnl_contiguous). Header-only so a student extension needs nothing beyond the emulator runtime.
//
// Handing a tensor's pointer to a kernel goes through mlu_data_ptr(); that is where the emulator learns
// the buffer's extent, so kernels get bounds checks and written-bytes accounting against tensor storage.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "bang_emu/external.h"
#include "torch_mlu_emu/export.h"

namespace torch_mlu {
namespace emu_detail {

// One registration made on behalf of a tensor; the weak reference tells when its storage is gone.
struct GdramRegistration {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  void* begin;
  size_t bytes;
};

// Tensor memory is freed by allocators the emulator does not see (CPU tensors), so stale registrations
// are swept here before each new one: an address reused by a later tensor must not keep the old extent.
// An inline function's static is one object per process (GNU unique symbol), shared by all extensions.
struct GdramRegistry {
  std::mutex mutex;
  std::vector<GdramRegistration> live;

  static GdramRegistry& instance() {
    static GdramRegistry registry;
    return registry;
  }

  void sweep_locked() {
    auto dead = std::remove_if(live.begin(), live.end(), [](const GdramRegistration& r) {
      if (!r.storage.expired()) return false;
      bang_emu_unregister_gdram(r.begin);  // removes one registration starting at `begin`
      return true;
    });
    live.erase(dead, live.end());
  }

  void add(const c10::TensorImpl* impl, void* begin, size_t bytes, const std::string& label) {
    std::lock_guard<std::mutex> lock(mutex);
    sweep_locked();
    for (const auto& r : live) {
      if (r.begin == begin && r.bytes == bytes) return;  // the emulator ignores the same range anyway
    }
    bang_emu_register_gdram(begin, bytes, label.c_str());
    live.push_back({impl->storage().getWeakStorageImpl(), begin, bytes});
  }

  // Called by the emulated mlu allocator when it frees [lo, hi): drop every registration inside at once.
  void forget_range(const void* lo, const void* hi) {
    std::lock_guard<std::mutex> lock(mutex);
    auto inside = std::remove_if(live.begin(), live.end(), [&](const GdramRegistration& r) {
      if (r.begin < lo || r.begin >= hi) return false;
      bang_emu_unregister_gdram(r.begin);
      return true;
    });
    live.erase(inside, live.end());
  }
};

// Bytes reachable from the tensor's first element through its sizes and strides (numel*itemsize when
// contiguous): the kernel may touch exactly these, not the rest of a larger shared storage.
inline size_t reachable_bytes(const c10::TensorImpl* impl) {
  if (impl->numel() == 0) return 0;
  int64_t last = 0;
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  for (size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * std::max<int64_t>(strides[d], 0);
  return static_cast<size_t>(last + 1) * impl->itemsize();
}

inline std::string describe(const c10::TensorImpl* impl) {
  std::ostringstream label;
  label << "tensor " << impl->dtype().name() << impl->sizes() << " on "
        << (impl->device_type() == c10::DeviceType::PrivateUse1 ? "mlu" : c10::DeviceTypeName(impl->device_type(), true));
  return label.str();
}

inline void* registered_data_ptr(c10::TensorImpl* impl) {
  void* data = impl->mutable_data();
  const size_t bytes = reachable_bytes(impl);
  if (data != nullptr && bytes > 0) GdramRegistry::instance().add(impl, data, bytes, describe(impl));
  return data;
}

}  // namespace emu_detail

// torch_mlu patches c10::TensorImpl with mlu_data_ptr(); here the same call is offered by a view type
// that adds no state, so `getMluTensorImpl(t)->mlu_data_ptr()` and `c10::TensorImpl* p = ...` both work.
struct MLUTensorImpl : public c10::TensorImpl {
  MLUTensorImpl() = delete;
  void* mlu_data_ptr() { return emu_detail::registered_data_ptr(this); }
  void* cnnlMalloc() { return mlu_data_ptr(); }  // CATCH (PyTorch 1.x) spelling
};

inline MLUTensorImpl* getMluTensorImpl(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.defined(), "getMluTensorImpl: undefined tensor");
  TORCH_CHECK(tensor.layout() == c10::kStrided, "getMluTensorImpl: only strided tensors are supported");
  TORCH_CHECK(tensor.device().is_privateuseone() || tensor.device().is_cpu(),
              "getMluTensorImpl: expected a tensor on mlu (emulated, host memory) or cpu, got ",
              tensor.device());
  return static_cast<MLUTensorImpl*>(tensor.unsafeGetTensorImpl());
}

// kolp323-style free function spelling.
inline void* mlu_data_ptr(c10::TensorImpl* impl) { return static_cast<MLUTensorImpl*>(impl)->mlu_data_ptr(); }

inline at::Tensor cnnl_contiguous(const at::Tensor& input,
                                  c10::MemoryFormat memory_format = c10::MemoryFormat::Contiguous) {
  if (!input.defined()) return input;
  return input.contiguous(memory_format);
}

inline at::MemoryFormat get_channels_last_memory_format(int64_t dim) {
  TORCH_CHECK(dim == 4 || dim == 5, "get_channels_last_memory_format: dim must be 4 or 5, got ", dim);
  return dim == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
}

// Older CATCH spelling: torch_mlu::cnnl::ops::cnnl_contiguous.
namespace cnnl {
namespace ops {
using torch_mlu::cnnl_contiguous;
}  // namespace ops
}  // namespace cnnl

}  // namespace torch_mlu
