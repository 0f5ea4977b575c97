// FaultHostServices (see fault_host_services.hpp).
#include "support/fault_host_services.hpp"

#include <cstdio>
#include <utility>

namespace vpmm {

FaultHostServices::FaultHostServices(std::shared_ptr<HostServices> inner, std::shared_ptr<FaultControl> control)
    : inner_(std::move(inner)), ctl_(control ? std::move(control) : std::make_shared<FaultControl>()) {}

vpmm_status FaultHostServices::do_host_alloc_pageable(uint64_t size, void** out) {
  VPMM_FAULT_FORWARD(Op::pageable_alloc, host_alloc_pageable(size, out));
}
vpmm_status FaultHostServices::do_host_free_pageable(void* p, uint64_t size) {
  VPMM_FAULT_FORWARD(Op::pageable_free, host_free_pageable(p, size));
}
vpmm_status FaultHostServices::do_dir_open(const std::string& path, DirHandle* out) {
  VPMM_FAULT_FORWARD(Op::dir_open, dir_open(path, out));
}
vpmm_status FaultHostServices::do_dir_close(DirHandle d) { VPMM_FAULT_FORWARD(Op::dir_close, dir_close(d)); }
vpmm_status FaultHostServices::do_dir_check(DirHandle d, bool* removed) {
  VPMM_FAULT_FORWARD(Op::dir_check, dir_check(d, removed));
}
vpmm_status FaultHostServices::do_file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out) {
  VPMM_FAULT_FORWARD(Op::file_create, file_create(dir, size, ref, out));
}
vpmm_status FaultHostServices::do_file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset) {
  VPMM_FAULT_FORWARD(Op::file_write, file_write(f, src, size, offset));
}
vpmm_status FaultHostServices::do_file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset) {
  VPMM_FAULT_FORWARD(Op::file_read, file_read(f, dst, size, offset));
}
vpmm_status FaultHostServices::do_file_close(FileHandle f) { VPMM_FAULT_FORWARD(Op::file_close, file_close(f)); }
vpmm_status FaultHostServices::do_file_remove(const FileRef& ref, FileHandle f) {
  VPMM_FAULT_FORWARD(Op::file_remove, file_remove(ref, f));
}

bool live_counts_zero(const HostCounters& c) {
  return c.live_pageable.load() == 0 && c.live_files.load() == 0 && c.live_file_handles.load() == 0 &&
         c.live_dir_handles.load() == 0;
}

std::string live_counts(const HostCounters& c) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "pageable %lld, files %lld, open_files %lld, open_dirs %lld",
                static_cast<long long>(c.live_pageable.load()), static_cast<long long>(c.live_files.load()),
                static_cast<long long>(c.live_file_handles.load()), static_cast<long long>(c.live_dir_handles.load()));
  return buf;
}

}  // namespace vpmm
