// See descriptor.hpp.
#include "ipc/descriptor.hpp"

#include <cstring>

#include "common/status.hpp"

namespace vpmm {
namespace ipc {

namespace {

constexpr uint64_t kMagic = 0x314353444d4d5056ull;  // "VPMMDSC1"
constexpr uint32_t kVersion = 2;
constexpr uint32_t kHeaderBytes = 64, kHandleBytes = 24, kEntryBytes = 32;
// Far beyond any pool (a handle is at least a page) and small enough that
// sizes computed from the counts never overflow.
constexpr uint32_t kMaxRecords = 1u << 24;

void put(std::string* s, const void* p, size_t n) { s->append(static_cast<const char*>(p), n); }
template <typename T>
void put(std::string* s, T v) {
  put(s, &v, sizeof v);
}
template <typename T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::string encode(const ExportLayout& layout, int32_t pid, uint64_t nonce, int status_fd, int counter_fd,
                   const std::vector<int>& handle_fds) {
  std::string s;
  s.reserve(kHeaderBytes + layout.handles.size() * kHandleBytes + layout.entries.size() * kEntryBytes);
  put(&s, kMagic);
  put(&s, kVersion);
  put(&s, kHeaderBytes);
  put(&s, layout.backend_kind);
  put(&s, pid);
  put(&s, nonce);
  put(&s, layout.device_id, 16);
  put(&s, static_cast<uint32_t>(layout.handles.size()));
  put(&s, static_cast<uint32_t>(layout.entries.size()));
  put(&s, static_cast<int32_t>(status_fd));
  put(&s, static_cast<int32_t>(counter_fd));
  for (size_t i = 0; i < layout.handles.size(); ++i) {
    put(&s, layout.handles[i].va);
    put(&s, layout.handles[i].size);
    put(&s, static_cast<int32_t>(i < handle_fds.size() ? handle_fds[i] : -1));
    put(&s, uint32_t(0));
  }
  for (const IpcEntry& e : layout.entries) {
    put(&s, e.ptr);
    put(&s, e.size);
    put(&s, e.handle);
    put(&s, uint32_t(0));
    put(&s, e.offset);
  }
  return s;
}

vpmm_status decode(const char* who, const void* bytes, size_t size, Descriptor* out) {
  const unsigned char* p = static_cast<const unsigned char*>(bytes);
  if (size < kHeaderBytes || get<uint64_t>(p) != kMagic)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: the %zu bytes given are not an export's descriptor", who, size);
  if (get<uint32_t>(p + 8) != kVersion || get<uint32_t>(p + 12) != kHeaderBytes)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: the descriptor is of version %u, this library reads version %u (mixed libvpmm versions?)",
                who, get<uint32_t>(p + 8), kVersion);
  Descriptor d;
  d.request.backend_kind = get<int32_t>(p + 16);
  d.pid = get<int32_t>(p + 20);
  d.request.nonce = get<uint64_t>(p + 24);
  std::memcpy(d.request.device_id, p + 32, 16);
  const uint32_t n_handles = get<uint32_t>(p + 48), n_entries = get<uint32_t>(p + 52);
  d.status_fd = get<int32_t>(p + 56);
  d.counter_fd = get<int32_t>(p + 60);
  if (n_handles == 0 || n_entries == 0 || n_handles > kMaxRecords || n_entries > kMaxRecords)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: the descriptor has %u handles and %u entries", who, n_handles,
                n_entries);
  const uint64_t want = kHeaderBytes + uint64_t(n_handles) * kHandleBytes + uint64_t(n_entries) * kEntryBytes;
  if (size != want)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: the descriptor is %zu bytes, its counts say %llu (truncated?)",
                who, size, static_cast<unsigned long long>(want));
  const unsigned char* h = p + kHeaderBytes;
  std::vector<uint64_t> span_end(n_handles);  // end of the span each handle belongs to
  for (uint32_t i = 0; i < n_handles; ++i, h += kHandleBytes) {
    IpcHandleSpan s{get<uint64_t>(h), get<uint64_t>(h + 8)};
    if (s.size == 0 || s.va > UINT64_MAX - s.size || (i > 0 && s.va < d.request.handles.back().va +
                                                                         d.request.handles.back().size))
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: handle %u of the descriptor is malformed", who, i);
    d.request.handles.push_back(s);
    d.handle_fds.push_back(get<int32_t>(h + 16));
  }
  for (uint32_t i = n_handles; i-- > 0;) {
    const IpcHandleSpan& s = d.request.handles[i];
    const bool joined = i + 1 < n_handles && d.request.handles[i + 1].va == s.va + s.size;
    span_end[i] = joined ? span_end[i + 1] : s.va + s.size;
  }
  const unsigned char* e = h;
  for (uint32_t i = 0; i < n_entries; ++i, e += kEntryBytes) {
    IpcEntry x;
    x.ptr = get<uint64_t>(e);
    x.size = get<uint64_t>(e + 8);
    x.handle = get<uint32_t>(e + 16);
    x.offset = get<uint64_t>(e + 24);
    if (x.handle >= n_handles || x.offset >= d.request.handles[x.handle].size ||
        x.size > span_end[x.handle] - d.request.handles[x.handle].va - x.offset ||
        x.ptr != d.request.handles[x.handle].va + x.offset)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: entry %u of the descriptor lies outside its handles", who, i);
    d.request.entries.push_back(x);
  }
  *out = std::move(d);
  return VPMM_OK;
}

}  // namespace ipc
}  // namespace vpmm
