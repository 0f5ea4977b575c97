// FaultHostServices: a HostServices adaptor (backend/host_services/host_services.hpp) that
// forwards every call to inner host services and fails a chosen one, as
// FaultBackend does for the device's calls: how the tests prove that a full
// disk, a failed write or read, or no pageable memory leaves every
// allocation paused with a whole backup or active and intact. Give it the
// FaultBackend's FaultControl and both number their calls in one sequence
// (a plan's nth call is then the nth of the pool's, device or host).
//
// Counting: every call is numbered, of its Op kind, except host_copy: a
// memcpy cannot fail, so it is forwarded (and counted by the inner
// services), never failed. Ownership as FaultBackend's: the inner services
// are shared, so a leak test reads their counters after the pool is gone.
// Test code only.
#pragma once

#include <memory>
#include <string>

#include "backend/host_services/host_services.hpp"
#include "support/fault_backend.hpp"

namespace vpmm {

class FaultHostServices final : public HostServices {
 public:
  // control may be null: the adaptor then makes its own.
  explicit FaultHostServices(std::shared_ptr<HostServices> inner, std::shared_ptr<FaultControl> control = nullptr);

  FaultControl& control() { return *ctl_; }
  HostServices& inner() { return *inner_; }

 protected:
  vpmm_status do_host_alloc_pageable(uint64_t size, void** out) override;
  vpmm_status do_host_free_pageable(void* p, uint64_t size) override;
  vpmm_status do_dir_open(const std::string& path, DirHandle* out) override;
  vpmm_status do_dir_close(DirHandle d) override;
  vpmm_status do_dir_check(DirHandle d, bool* removed) override;
  vpmm_status do_file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out) override;
  vpmm_status do_file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset) override;
  vpmm_status do_file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset) override;
  vpmm_status do_file_close(FileHandle f) override;
  vpmm_status do_file_remove(const FileRef& ref, FileHandle f) override;
  vpmm_status do_host_copy(void* dst, const void* src, uint64_t size) override {
    return inner_->host_copy(dst, src, size);
  }

 private:
  std::shared_ptr<HostServices> inner_;
  std::shared_ptr<FaultControl> ctl_;
};

// True when every live-object counter of `c` is zero (nothing leaked).
bool live_counts_zero(const HostCounters& c);
// "pageable 0, files 0, open_files 0, open_dirs 0".
std::string live_counts(const HostCounters& c);

}  // namespace vpmm
