// The operating-system halves of an export and an import (the interfaces of
// core/share/channel_interfaces.hpp): the status page and the exported handles' descriptors.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/share/channel_interfaces.hpp"
#include "ipc/fd_table.hpp"
#include "ipc/status_page.hpp"

namespace vpmm {
namespace ipc {

// File descriptors closed when the last holder lets go: the export, and a
// send in flight (which must never find them closed, nor their numbers
// reused, under it).
struct FdSet {
  std::vector<int> fds;
  FdSet() = default;
  FdSet(const FdSet&) = delete;
  FdSet& operator=(const FdSet&) = delete;
  ~FdSet();
};

class Exporter final : public ExportChannel {
 public:
  explicit Exporter(std::unique_ptr<StatusPage> page) : page_(std::move(page)), handles_(new FdSet) {}
  ~Exporter() override;

  // The table's room too: each handle may hold a kept descriptor and this one.
  void reserve(size_t n) override {
    handles_->fds.reserve(n);
    make_descriptor_room(2 * n);
  }
  void adopt(int fd) override { handles_->fds.push_back(fd); }
  void revoke(int32_t state) override;
  int32_t state() const override;
  uint32_t live_importers() const override;
  uint64_t imports() const;  // imports made so far, as importers report them

  // Calls f(descriptor bytes, file descriptors: status page first) for
  // `layout`. The lock revoke takes is held only to read the state and copy
  // references: f runs without it, so a send blocked on a peer that does not
  // read stalls no pause or free, and the descriptors it sends stay open
  // until it returns (an importer receiving them after a pause or free
  // sees the new state). WRONG_STATE when no longer ACTIVE.
  template <typename F>
  vpmm_status with_descriptor(const char* who, const ExportLayout& layout, F&& f);

 private:
  struct Snapshot {
    std::string bytes;
    std::vector<int> fds;
    std::shared_ptr<StatusPage> page;  // keep the descriptors open
    std::shared_ptr<FdSet> handles;
  };
  vpmm_status snapshot(const char* who, const ExportLayout& layout, Snapshot* out) const;
  mutable std::mutex mu_;
  std::shared_ptr<StatusPage> page_;  // null once closed
  std::shared_ptr<FdSet> handles_;    // null once revoked
  int32_t state_ = VPMM_EXPORT_ACTIVE;
  uint64_t imports_at_close_ = 0;
};

template <typename F>
vpmm_status Exporter::with_descriptor(const char* who, const ExportLayout& layout, F&& f) {
  Snapshot s;
  vpmm_status st = snapshot(who, layout, &s);
  return st == VPMM_OK ? f(s.bytes, s.fds) : st;
}

class Importer final : public ImportChannel {
 public:
  explicit Importer(std::unique_ptr<StatusPage> page) : page_(std::move(page)), start_(page_->word()) {}

  int32_t state() const override;
  bool unchanged() const override;
  void attach() override { page_->attach(); }
  void detach() override;

 private:
  mutable std::mutex mu_;
  std::unique_ptr<StatusPage> page_;
  uint64_t start_;
  bool detached_ = false;
};

}  // namespace ipc
}  // namespace vpmm
