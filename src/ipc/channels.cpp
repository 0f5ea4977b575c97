// See channels.hpp.
#include "ipc/channels.hpp"

#include <unistd.h>

#include "common/status.hpp"
#include "ipc/descriptor.hpp"

namespace vpmm {
namespace ipc {

Exporter::~Exporter() { revoke(VPMM_EXPORT_CLOSED); }

void Exporter::revoke(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  page_->publish(state);
  for (int fd : fds_) close(fd);
  fds_.clear();
  // The page itself stays open until the export closes: an importer asking
  // for it then still learns why the export is gone.
  if (state == VPMM_EXPORT_CLOSED) page_->close_locks();
}

int32_t Exporter::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return page_->state();
}

uint32_t Exporter::live_importers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return page_->live_importers();
}

uint64_t Exporter::imports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return page_->imports();
}

vpmm_status Exporter::describe_locked(const char* who, const ExportLayout& layout, std::string* bytes,
                                      std::vector<int>* fds) const {
  const int32_t s = page_->state();
  if (s != VPMM_EXPORT_ACTIVE)
    return fail(VPMM_ERR_WRONG_STATE, "%s: the export is %s: its handles' descriptors are closed", who,
                s == VPMM_EXPORT_PAUSED  ? "paused (its memory was released)"
                : s == VPMM_EXPORT_FREED ? "freed"
                                         : "closed");
  *bytes = encode(layout, page_->pid(), page_->nonce(), page_->fd(), fds_);
  fds->clear();
  fds->push_back(page_->fd());
  fds->insert(fds->end(), fds_.begin(), fds_.end());
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
