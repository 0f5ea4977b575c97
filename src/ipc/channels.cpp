// See channels.hpp.
#include "ipc/channels.hpp"

#include <unistd.h>

#include "common/status.hpp"
#include "ipc/descriptor.hpp"
#include "ipc/fd_passing.hpp"

namespace vpmm {
namespace ipc {

FdSet::~FdSet() { close_all(fds); }

Exporter::~Exporter() { revoke(VPMM_EXPORT_CLOSED); }

void Exporter::revoke(int32_t state) {
  std::shared_ptr<StatusPage> page;
  std::shared_ptr<FdSet> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == VPMM_EXPORT_ACTIVE && page_) {
      state_ = state;
      page_->publish(state);  // before the descriptors go (docs/ipc.md)
    }
    handles = std::move(handles_);
    // The page stays open until the export closes: an importer asking for
    // it then still learns why the export is gone.
    if (state == VPMM_EXPORT_CLOSED && page_) {
      imports_at_close_ = page_->imports();
      page = std::move(page_);
    }
  }
  // The descriptors (and the exporter's lock on the page) close here, out
  // of the lock, unless a send still holds them: then when it returns.
}

int32_t Exporter::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == VPMM_EXPORT_ACTIVE && !page_ ? VPMM_EXPORT_CLOSED : state_;
}

uint32_t Exporter::live_importers() const {
  std::shared_ptr<StatusPage> page;
  {
    std::lock_guard<std::mutex> lock(mu_);
    page = page_;
  }
  return page ? page->live_importers() : 0;
}

uint64_t Exporter::imports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return page_ ? page_->imports() : imports_at_close_;
}

vpmm_status Exporter::snapshot(const char* who, const ExportLayout& layout, Snapshot* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != VPMM_EXPORT_ACTIVE || !page_ || !handles_)
    return fail(VPMM_ERR_WRONG_STATE, "%s: the export is %s: its handles' descriptors are closed", who,
                state_ == VPMM_EXPORT_PAUSED  ? "paused (its memory was released)"
                : state_ == VPMM_EXPORT_FREED ? "freed"
                                              : "closed");
  out->bytes = encode(layout, page_->pid(), page_->nonce(), page_->fd(), page_->counter_fd(), handles_->fds);
  out->fds.clear();
  out->fds.push_back(page_->fd());
  out->fds.push_back(page_->counter_fd());
  out->fds.insert(out->fds.end(), handles_->fds.begin(), handles_->fds.end());
  out->page = page_;
  out->handles = handles_;
  return VPMM_OK;
}

int32_t Importer::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return detached_ ? VPMM_EXPORT_CLOSED : page_->state();
}

bool Importer::unchanged() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !detached_ && page_->word() == start_ && page_->state() == VPMM_EXPORT_ACTIVE;
}

void Importer::detach() {
  std::lock_guard<std::mutex> lock(mu_);
  detached_ = true;
  page_->close_locks();
}

}  // namespace ipc
}  // namespace vpmm
