// The operating-system halves of an export and an import (the interfaces of
// core/ipc.hpp): the status page and the exported handles' descriptors.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/ipc.hpp"
#include "ipc/status_page.hpp"

namespace vpmm {
namespace ipc {

class Exporter final : public ExportChannel {
 public:
  explicit Exporter(std::unique_ptr<StatusPage> page) : page_(std::move(page)) {}
  ~Exporter() override;

  void reserve(size_t n) override { fds_.reserve(n); }
  void adopt(int fd) override { fds_.push_back(fd); }
  void revoke(int32_t state) override;
  int32_t state() const override;
  uint32_t live_importers() const override;
  uint64_t imports() const;  // imports made so far

  // The descriptor of `layout` and the descriptors that go with it (status
  // page first), read under the lock revoke takes: while `f` runs with them,
  // no pause or free can close them. WRONG_STATE when no longer ACTIVE.
  template <typename F>
  vpmm_status with_descriptor(const char* who, const ExportLayout& layout, F&& f);

 private:
  vpmm_status describe_locked(const char* who, const ExportLayout& layout, std::string* bytes,
                              std::vector<int>* fds) const;
  mutable std::mutex mu_;
  std::unique_ptr<StatusPage> page_;
  std::vector<int> fds_;
};

template <typename F>
vpmm_status Exporter::with_descriptor(const char* who, const ExportLayout& layout, F&& f) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string bytes;
  std::vector<int> fds;
  vpmm_status st = describe_locked(who, layout, &bytes, &fds);
  return st == VPMM_OK ? f(bytes, fds) : st;
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
