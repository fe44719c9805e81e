// bang_emu: emulation of torch_mlu's MLUStream API. There is one emulated device with one queue: the
// emulator's default queue, on which modelled kernel times accumulate for notifiers/Events.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <ostream>

#include "bang_emu/external.h"
#include "cnrt.h"
#include "torch_mlu_emu/export.h"

namespace torch_mlu {

using c10::DeviceIndex;
using c10::StreamId;

class MLUStream {
 public:
  enum Unchecked { UNCHECKED };

  MLUStream() : queue_(bang_emu_default_queue()) {}
  explicit MLUStream(c10::Stream stream) : queue_(bang_emu_default_queue()) {
    TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
                "MLUStream: expected an mlu stream, got ", stream);
  }
  MLUStream(Unchecked, c10::Stream /*stream*/) : queue_(bang_emu_default_queue()) {}

  bool operator==(const MLUStream& other) const noexcept { return queue_ == other.queue_; }
  bool operator!=(const MLUStream& other) const noexcept { return !(*this == other); }

  // Lets `cnrtQueue_t q = getCurrentMLUStream();` compile as it does with torch_mlu.
  operator cnrtQueue_t() const { return queue_; }
  operator c10::Stream() const { return unwrap(); }

  cnrtQueue_t stream() const { return queue_; }
  cnrtQueue_t queue() const { return queue_; }
  DeviceIndex device_index() const { return 0; }
  c10::Device device() const { return c10::Device(c10::DeviceType::PrivateUse1, 0); }
  StreamId id() const { return 0; }
  int priority() const { return 0; }
  c10::Stream unwrap() const { return c10::Stream(c10::Stream::DEFAULT, device()); }

  bool query() const { return cnrtQueueQuery(queue_) == cnrtSuccess; }
  void synchronize() const {
    const cnrtRet_t status = cnrtQueueSync(queue_);
    TORCH_CHECK(status == cnrtSuccess, "MLU queue synchronize failed: ", cnrtGetErrorStr(status),
                " (bang_emu: see the 'bang-emu: error:' lines above for the kernel diagnostic)");
  }

 private:
  cnrtQueue_t queue_;
};

inline MLUStream getDefaultMLUStream(DeviceIndex /*device_index*/ = -1) { return MLUStream(); }
inline MLUStream getCurrentMLUStream(DeviceIndex /*device_index*/ = -1) { return MLUStream(); }
inline MLUStream getStreamFromPool(bool /*isHighPriority*/ = false, DeviceIndex /*device_index*/ = -1) {
  return MLUStream();
}
inline MLUStream getStreamFromExternal(cnrtQueue_t /*ext_queue*/, DeviceIndex /*device_index*/) {
  return MLUStream();
}
inline void setCurrentMLUStream(MLUStream /*stream*/) {}

// torch_mlu 2.x: the current queue as a raw cnrtQueue_t.
inline cnrtQueue_t getCurMLUStream(DeviceIndex /*device_index*/ = -1) { return bang_emu_default_queue(); }
// CATCH (PyTorch 1.x) spelling.
inline cnrtQueue_t getCurQueue(DeviceIndex /*device_index*/ = -1) { return bang_emu_default_queue(); }

inline std::ostream& operator<<(std::ostream& stream, const MLUStream& s) {
  return stream << "MLUStream(bang_emu default queue, device mlu:0)";
}

}  // namespace torch_mlu
