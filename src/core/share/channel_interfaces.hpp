// Sharing pool memory with other processes: the interfaces between the
// core's sharer (core/share/sharer.hpp) and the operating system's side of
// an export or import (src/ipc/: the status page shared with importers, the
// descriptors of exported handles, sockets, pidfds), and the layout an export
// describes (docs/ipc.md). src/ipc/ implements the two channels and encodes
// the layout into a descriptor; it includes nothing else of the core.
#pragma once

#include <cstdint>
#include <vector>

#include "vpmm.h"

namespace vpmm {

// One physical handle of an export: where it is mapped in the exporter.
// Handle i of an export travels as file descriptor i.
struct IpcHandleSpan {
  uint64_t va = 0;
  uint64_t size = 0;
};

// One allocation (or small-object slab) an export shares: its address in the
// exporter, its size, and where it lies in the handles (`handle` is the index
// of the first one, `offset` its distance from that handle's start).
struct IpcEntry {
  uint64_t ptr = 0;
  uint64_t size = 0;
  uint32_t handle = 0;
  uint64_t offset = 0;
};

// What an export shares, in the exporter's terms; the descriptor is this plus
// the channel's identity and descriptors. Handles are in address order, so
// consecutive ones with adjacent addresses form one span an importer maps
// contiguously (an entry never crosses a span).
struct ExportLayout {
  int32_t backend_kind = 0;
  uint8_t device_id[16] = {};
  std::vector<IpcHandleSpan> handles;
  std::vector<IpcEntry> entries;
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const auto& h : handles) b += h.size;
    return b;
  }
};

// The exporter's half of an export, outside the core: a status page the
// importers read, and the descriptors of the exported handles.
class ExportChannel {
 public:
  virtual ~ExportChannel() = default;
  // Room for n descriptors, so that adopt never fails (may throw bad_alloc).
  virtual void reserve(size_t n) = 0;
  // Takes ownership of the descriptor of the next handle.
  virtual void adopt(int fd) = 0;
  // Publishes a final state (VPMM_EXPORT_PAUSED, _FREED or _CLOSED) to the
  // importers, then closes the handle descriptors: the exporter keeps no
  // reference to memory it released. Idempotent; the first state stays.
  virtual void revoke(int32_t state) = 0;
  // The state importers see now (VPMM_EXPORT_*).
  virtual int32_t state() const = 0;
  // Processes holding an import of this export now (best effort: 0 where
  // the platform cannot tell).
  virtual uint32_t live_importers() const = 0;
};

// The importer's half: the status page, mapped, and its place among the
// importers. Released when the import closes.
class ImportChannel {
 public:
  virtual ~ImportChannel() = default;
  // What the exporter published, or VPMM_EXPORT_EXITED when its process is
  // gone without closing the export.
  virtual int32_t state() const = 0;
  // True while the exporter's state word is what it was when the import
  // began: nothing was paused, freed or closed since.
  virtual bool unchanged() const = 0;
  // Takes a place among the importers (the exporter counts them); called
  // once the import is mapped.
  virtual void attach() = 0;
  // Gives it back and forgets the page; state() answers CLOSED afterwards.
  virtual void detach() = 0;
};

// What vpmm_pool_import asks of the core: the descriptor, decoded.
struct ImportRequest {
  int32_t backend_kind = 0;
  uint8_t device_id[16] = {};
  uint64_t nonce = 0;  // names the export: one import of it per pool
  std::vector<IpcHandleSpan> handles;
  std::vector<IpcEntry> entries;
  std::vector<int> fds;  // one per handle, the caller's
};

}  // namespace vpmm
