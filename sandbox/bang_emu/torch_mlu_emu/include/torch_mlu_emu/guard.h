// bang_emu: emulation of torch_mlu's device guards. The emulator has exactly one device (mlu:0), so a
// guard only validates the device it is given.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include "torch_mlu_emu/export.h"

namespace torch_mlu {
namespace mlu {

namespace emu_detail {
inline void check_device(c10::Device device) {
  // A CPU device is accepted: under emulation students may bind kernels on CPU tensors.
  TORCH_CHECK(device.is_cpu() || (device.is_privateuseone() && device.index() <= 0),
              "MLUGuard: the emulator has one device (mlu:0), got ", device);
}
}  // namespace emu_detail

struct MLUGuard {
  explicit MLUGuard() = delete;
  explicit MLUGuard(c10::DeviceIndex device_index) : original_(c10::DeviceType::PrivateUse1, 0) {
    TORCH_CHECK(device_index <= 0, "MLUGuard: the emulator has one device (mlu:0), got index ", device_index);
  }
  explicit MLUGuard(c10::Device device) : original_(c10::DeviceType::PrivateUse1, 0) {
    emu_detail::check_device(device);
  }
  MLUGuard(const MLUGuard&) = delete;
  MLUGuard& operator=(const MLUGuard&) = delete;

  void set_device(c10::Device device) { emu_detail::check_device(device); }
  void reset_device(c10::Device device) { emu_detail::check_device(device); }
  void set_index(c10::DeviceIndex device_index) { set_device(c10::Device(c10::DeviceType::PrivateUse1, device_index)); }
  c10::Device original_device() const { return original_; }
  c10::Device current_device() const { return original_; }

 private:
  c10::Device original_;
};

struct OptionalMLUGuard {
  explicit OptionalMLUGuard() = default;
  explicit OptionalMLUGuard(std::optional<c10::Device> device_opt) {
    if (device_opt.has_value()) set_device(*device_opt);
  }
  explicit OptionalMLUGuard(std::optional<c10::DeviceIndex> device_index_opt) {
    if (device_index_opt.has_value()) set_index(*device_index_opt);
  }
  OptionalMLUGuard(const OptionalMLUGuard&) = delete;
  OptionalMLUGuard& operator=(const OptionalMLUGuard&) = delete;

  void set_device(c10::Device device) {
    emu_detail::check_device(device);
    set_ = true;
  }
  void reset_device(c10::Device device) { set_device(device); }
  void set_index(c10::DeviceIndex device_index) { set_device(c10::Device(c10::DeviceType::PrivateUse1, device_index)); }
  std::optional<c10::Device> original_device() const {
    return set_ ? std::optional<c10::Device>(c10::Device(c10::DeviceType::PrivateUse1, 0)) : std::nullopt;
  }
  std::optional<c10::Device> current_device() const { return original_device(); }
  void reset() { set_ = false; }

 private:
  bool set_ = false;
};

}  // namespace mlu
}  // namespace torch_mlu
