// SmallAllocator: size classes over slabs (see small.hpp).
#include "core/alloc/small.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "common/status.hpp"

namespace vpmm {

struct SmallAllocator::Slab {
  uint64_t va = 0;
  uint64_t bytes = 0;
  uint64_t block = 0;
  uint32_t cls = 0;
  uint32_t n_blocks = 0;
  uint32_t n_used = 0;
  uint32_t n_pending = 0;
  uint64_t requested_sum = 0;          // bytes asked for over live blocks
  Stream stream = nullptr;
  Attrs attrs;
  bool paused = false;
  bool retired = false;                // its stream was retired: no new blocks
  bool resuming = false;               // a resume in progress holds it (paused or not)
  bool available = false;              // listed in avail_[stream][cls]
  // Blocks [n_fresh, n_blocks) were never handed out: free without being
  // listed, so a slab of 8192 blocks costs nothing to create.
  uint32_t n_fresh = 0;
  std::vector<uint32_t> free_list;     // handed-out block indexes ready for reuse
  std::vector<uint64_t> requested;     // per block below n_fresh: bytes asked for, 0 = not live
  std::vector<Reservation*> res;       // per block charged reservation (empty until one is)
};

namespace {
constexpr uint64_t kQuantum = kSmallQuantum;
}

SmallAllocator::SmallAllocator(SlabSource& pages, uint64_t small_size) : pages_(pages) {
  spare_slabs_.reserve(kSpareSlabs);  // keeping a retired slab never allocates
  const uint64_t limit = small_size;
  if (limit < kQuantum) return;  // small allocator disabled
  // 256-byte steps up to 1 KiB, then four classes per power of two.
  for (uint64_t sz = kQuantum; sz <= 1024 && sz < limit + kQuantum; sz += kQuantum)
    class_size_.push_back(sz);
  for (uint64_t base = 1024; class_size_.empty() || class_size_.back() < limit; base *= 2)
    for (int q = 1; q <= 4 && class_size_.back() < limit; ++q) {
      uint64_t sz = base + base / 4 * q;
      class_size_.push_back(std::min(sz, (limit + kQuantum - 1) / kQuantum * kQuantum));
    }
}

SmallAllocator::~SmallAllocator() = default;

// The constructor's spacing, computed rather than searched (a binary search
// over ~40 sizes was 4% of a mixed-size churn step): 256-byte steps to 1 KiB,
// then quarters of each power of two; the last class may be cut at the limit.
uint32_t SmallAllocator::class_of(uint64_t size) const {
  uint64_t cls;
  if (size <= 1024) {
    cls = size == 0 ? 0 : (size + kQuantum - 1) / kQuantum - 1;
  } else {
    const unsigned log2_base = 63u - static_cast<unsigned>(__builtin_clzll(size - 1));  // base < size <= 2 base
    const uint64_t quarter = (uint64_t(1) << log2_base) / 4;
    const uint64_t q = (size - (uint64_t(1) << log2_base) + quarter - 1) / quarter;  // 1..4
    cls = 4 + (log2_base - 10) * 4 + (q - 1);
  }
  return static_cast<uint32_t>(std::min<uint64_t>(cls, class_size_.size() - 1));
}

SmallAllocator::Lists& SmallAllocator::lists_for(Stream s, const Attrs& a) {
  // The last untagged stream is remembered (a node's address is stable and
  // avail_ never erases): malloc and free ask for the same one in turn.
  if (a.tag == 0 && last_avail_ && last_avail_key_ == s) return *last_avail_;
  Lists& l = a.tag == 0 ? avail_[s] : tagged_avail_[std::make_tuple(s, a.tag, a.flags)];
  if (a.tag == 0) {
    last_avail_key_ = s;
    last_avail_ = &l;
  }
  if (l.size() < class_size_.size()) l.resize(class_size_.size());
  return l;
}

vpmm_status SmallAllocator::new_slab(uint32_t cls, Stream s, const Attrs& a, Slab** out) {
  const uint64_t page = pages_.page_size();
  const uint64_t block = class_size_[cls];
  uint64_t bytes = (2 * block + page - 1) / page * page;
  if (bytes < page) bytes = page;
  RegionIt r;
  vpmm_status st = pages_.take_slab_pages(bytes, s, a, &r);
  if (st != VPMM_OK) return st;
  SlabMap::node_type node;
  if (!spare_slabs_.empty()) {
    node = std::move(spare_slabs_.back());
    spare_slabs_.pop_back();
    Slab& old = *node.mapped();
    std::vector<uint32_t> free_list = std::move(old.free_list);
    std::vector<uint64_t> requested = std::move(old.requested);
    std::vector<Reservation*> res = std::move(old.res);
    old = Slab();  // every field back to its default; the vectors keep their capacity
    free_list.clear();
    requested.clear();
    res.clear();
    old.free_list = std::move(free_list);
    old.requested = std::move(requested);
    old.res = std::move(res);
  }
  std::unique_ptr<Slab> fresh;
  if (node.empty()) fresh.reset(new Slab);
  Slab* slab = node.empty() ? fresh.get() : node.mapped().get();
  slab->va = r->first;
  slab->bytes = bytes;
  slab->block = block;
  slab->cls = cls;
  slab->n_blocks = static_cast<uint32_t>(bytes / block);
  slab->stream = s;
  slab->attrs = a;
  r->second.owner = slab;
  empty_bytes_ += bytes;  // empty until its first block is handed out
  *out = slab;
  if (node.empty()) {
    slabs_.emplace(slab->va, std::move(fresh));
  } else {
    node.key() = slab->va;
    slabs_.insert(std::move(node));
  }
  return VPMM_OK;
}

void SmallAllocator::make_available(Slab* slab) {
  if (slab->available || slab->paused || slab->retired || !has_free_block(slab)) return;
  lists_for(slab->stream, slab->attrs)[slab->cls].push_back(slab);
  slab->available = true;
}

void SmallAllocator::drain_pending() {
  std::vector<Slab*> became_empty;
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    bool done = false;
    if (pages_.query(pending_[i].event, &done) != VPMM_OK || !done) {
      pending_[kept++] = std::move(pending_[i]);
      continue;
    }
    Slab* slab = pending_[i].slab;
    --slab->n_pending;
    slab->free_list.push_back(pending_[i].block);
    make_available(slab);
    if (is_empty(slab)) became_empty.push_back(slab);
  }
  pending_.resize(kept);
  // Outside the loop above: giving a slab back may retire another one.
  for (Slab* s : became_empty) on_empty(s);
}

vpmm_status SmallAllocator::malloc(uint64_t size, Stream s, const Attrs& a, Reservation* res,
                                   void** out) {
  if (size == 0) return fail(VPMM_ERR_INVALID_ARGUMENT, "size 0 is not allowed");
  if (!pending_.empty()) drain_pending();
  const uint32_t cls = class_of(size);
  auto& list = lists_for(s, a)[cls];
  Slab* slab = nullptr;
  if (!list.empty()) {
    slab = list.back();
  } else {
    vpmm_status st = new_slab(cls, s, a, &slab);
    if (st != VPMM_OK) return st;
    make_available(slab);
  }
  if (is_empty(slab)) {  // a cached empty slab (or a new one) goes back to work
    empty_bytes_ -= slab->bytes;
    // Cleared, not erased: an alloc/free loop would otherwise allocate and
    // free the map node on every pair.
    auto c = cached_empty_.find(slab->stream);
    if (c != cached_empty_.end() && c->second == slab) c->second = nullptr;
  }
  // Reused blocks first (the newest), then never-used ones, lowest first.
  uint32_t b;
  if (!slab->free_list.empty()) {
    b = slab->free_list.back();
    slab->free_list.pop_back();
  } else {
    slab->requested.push_back(0);  // first: a bad_alloc here changes nothing
    b = slab->n_fresh++;
  }
  slab->requested[b] = size;
  slab->requested_sum += size;
  if (res || !slab->res.empty()) {
    if (slab->res.empty()) slab->res.assign(slab->n_blocks, nullptr);
    slab->res[b] = res;
  }
  ++slab->n_used;
  live_bytes_ += slab->block;
  if (!has_free_block(slab)) {
    list.pop_back();  // the slab we used is always the list's last
    slab->available = false;
  }
  *out = reinterpret_cast<void*>(slab->va + b * slab->block);
  return VPMM_OK;
}

vpmm_status SmallAllocator::free(RegionIt slab_region, uint64_t va, Stream s, uint64_t* requested,
                                 Reservation** res) {
  Slab* slab = static_cast<Slab*>(slab_region->second.owner);
  uint64_t off = va - slab->va;
  if (off % slab->block != 0 || off / slab->block >= slab->n_blocks)
    return fail(VPMM_ERR_UNKNOWN_POINTER,
                "pointer 0x%" PRIx64 " is inside a small block (class %" PRIu64 " bytes), not its start",
                va, slab->block);
  uint32_t b = static_cast<uint32_t>(off / slab->block);
  if (b >= slab->requested.size() || slab->requested[b] == 0)
    return fail(VPMM_ERR_UNKNOWN_POINTER, "pointer 0x%" PRIx64 " is not allocated (already freed?)", va);
  EventRef ev;
  if (s != slab->stream && !slab->paused) {
    // Another stream may still use the block: reuse waits for its event.
    vpmm_status st = pages_.record_event(s, &ev);
    if (st != VPMM_OK) return st;
  }
  *requested = slab->requested[b];
  *res = slab->res.empty() ? nullptr : slab->res[b];
  if (!slab->res.empty()) slab->res[b] = nullptr;
  slab->requested_sum -= slab->requested[b];
  slab->requested[b] = 0;
  --slab->n_used;
  live_bytes_ -= slab->block;
  if (ev) {
    ++slab->n_pending;
    pending_.push_back({slab, b, std::move(ev)});
    return VPMM_OK;
  }
  slab->free_list.push_back(b);
  make_available(slab);
  if (is_empty(slab)) on_empty(slab);
  return VPMM_OK;
}

uint64_t SmallAllocator::empty_bytes_if_settled() {
  if (pending_.empty()) return empty_bytes_;
  std::unordered_map<const Slab*, uint32_t> done;  // per slab: pending blocks whose event completed
  for (const Pending& pd : pending_) {
    bool d = false;
    if (pages_.query(pd.event, &d) == VPMM_OK && d) ++done[pd.slab];
  }
  uint64_t bytes = empty_bytes_;
  // A paused slab's bytes are paused, not small: none of them is cached.
  for (const auto& kv : done)
    if (!kv.first->paused && kv.first->n_used == 0 && kv.first->n_pending == kv.second)
      bytes += kv.first->bytes;
  return bytes;
}

void SmallAllocator::on_empty(Slab* slab) {
  empty_bytes_ += slab->bytes;
  if (slab->resuming) return;  // end_resume decides
  if (slab->paused || slab->retired) {  // nothing left to resume or to serve
    retire_slab(slab);
    return;
  }
  // Only a tagged slab can have a backup: untagged frees stay off the map.
  if (slab->attrs.tag) pages_.slab_emptied(slab->va);
  // Keep one empty slab per stream, the most recent: alloc/free loops reuse
  // it without touching the page level, and the cache stays bounded.
  Slab*& cached = cached_empty_[slab->stream];
  Slab* old = cached;
  cached = slab;
  if (old && old != slab) retire_slab(old);
}

void SmallAllocator::retire_slab(Slab* slab) {
  if (is_empty(slab)) empty_bytes_ -= slab->bytes;
  auto c = cached_empty_.find(slab->stream);
  if (c != cached_empty_.end() && c->second == slab) cached_empty_.erase(c);
  if (slab->available) {
    auto& list = lists_for(slab->stream, slab->attrs)[slab->cls];
    list.erase(std::find(list.begin(), list.end(), slab));
  }
  const uint64_t va = slab->va;
  Stream s = slab->stream;
  bool paused = slab->paused;
  SlabMap::node_type node = slabs_.extract(va);
  if (spare_slabs_.size() < kSpareSlabs) spare_slabs_.push_back(std::move(node));
  pages_.return_slab_pages(va, s, paused);
}

void SmallAllocator::retire_stream(Stream old, Stream key) {
  std::vector<Slab*> empties;
  for (auto& kv : slabs_) {
    Slab* slab = kv.second.get();
    if (slab->stream != old) continue;
    if (slab->available) {
      auto& list = lists_for(old, slab->attrs)[slab->cls];
      list.erase(std::find(list.begin(), list.end(), slab));
      slab->available = false;
    }
    slab->stream = key;
    slab->retired = true;
    if (is_empty(slab)) empties.push_back(slab);
  }
  cached_empty_.erase(old);
  avail_.erase(old);
  for (auto it = tagged_avail_.begin(); it != tagged_avail_.end();)
    it = std::get<0>(it->first) == old ? tagged_avail_.erase(it) : std::next(it);
  if (last_avail_key_ == old) last_avail_ = nullptr;
  std::sort(empties.begin(), empties.end(), [](const Slab* a, const Slab* b) { return a->va < b->va; });
  for (Slab* s : empties) retire_slab(s);
}

void SmallAllocator::release_empty_slabs() {
  if (!pending_.empty()) drain_pending();
  std::vector<Slab*> empties;
  for (auto& kv : slabs_)
    if (kv.second->n_used == 0 && kv.second->n_pending == 0 && !kv.second->resuming)
      empties.push_back(kv.second.get());
  // In VA order, not the hash map's (VAs move with ASLR): the order decides
  // the ids of the free regions they become, and so later placements.
  std::sort(empties.begin(), empties.end(), [](const Slab* a, const Slab* b) { return a->va < b->va; });
  for (Slab* s : empties) retire_slab(s);
}

uint64_t SmallAllocator::forget_reservation(Reservation* res) {
  uint64_t bytes = 0;
  for (auto& kv : slabs_)
    for (size_t b = 0; b < kv.second->res.size(); ++b)
      if (kv.second->res[b] == res) {
        kv.second->res[b] = nullptr;
        if (!kv.second->paused) bytes += small_charge(kv.second->requested[b]);
      }
  return bytes;
}

void SmallAllocator::wait_pending() {
  for (Pending& pd : pending_)
    pages_.wait(pd.event);
}

bool SmallAllocator::is_empty(const Slab* s) { return s->n_used == 0 && s->n_pending == 0; }
uint32_t SmallAllocator::slab_blocks(const Slab* s) { return s->n_blocks; }
uint64_t SmallAllocator::slab_requested(const Slab* s, uint32_t b) {
  return b < s->requested.size() ? s->requested[b] : 0;
}
bool SmallAllocator::has_free_block(const Slab* s) { return !s->free_list.empty() || s->n_fresh < s->n_blocks; }
Reservation* SmallAllocator::slab_res(const Slab* s, uint32_t b) {
  return s->res.empty() ? nullptr : s->res[b];
}

bool SmallAllocator::has_pending(const void* slab) const {
  return static_cast<const Slab*>(slab)->n_pending != 0;
}

bool SmallAllocator::waits_on_event(const void* slab) const {
  if (!has_pending(slab)) return false;
  for (const Pending& pd : pending_)
    if (pd.slab == slab && pd.event && !pd.event->done_cached()) return true;
  return false;
}

bool SmallAllocator::empty_if_settled(const void* p) {
  const Slab* slab = static_cast<const Slab*>(p);
  if (slab->n_used != 0) return false;
  if (slab->n_pending == 0) return true;
  for (const Pending& pd : pending_) {
    bool done = false;
    if (pd.slab == slab && (pages_.query(pd.event, &done) != VPMM_OK || !done)) return false;
  }
  return true;
}

void SmallAllocator::foreign_uses(const void* slab, std::vector<EventRef>* out) const {
  if (!has_pending(slab)) return;
  for (const Pending& pd : pending_)
    if (pd.slab == slab && pd.event && !pd.event->done_cached()) out->push_back(pd.event);
}

uint64_t SmallAllocator::requested_in(const void* slab) const {
  return static_cast<const Slab*>(slab)->requested_sum;
}

void SmallAllocator::on_pause(void* p) {
  Slab* slab = static_cast<Slab*>(p);
  if (slab->available) {
    auto& list = lists_for(slab->stream, slab->attrs)[slab->cls];
    list.erase(std::find(list.begin(), list.end(), slab));
    slab->available = false;
  }
  slab->paused = true;
}

void SmallAllocator::on_resume(void* p) {
  Slab* slab = static_cast<Slab*>(p);
  slab->paused = false;
  make_available(slab);
}

void SmallAllocator::begin_resume(void* p) { static_cast<Slab*>(p)->resuming = true; }

void SmallAllocator::end_resume(void* p) {
  Slab* slab = static_cast<Slab*>(p);
  slab->resuming = false;
  // Emptied meanwhile: on_empty counted it and left the rest to here.
  if (is_empty(slab)) {
    empty_bytes_ -= slab->bytes;  // on_empty counts it again
    on_empty(slab);
  }
}

bool SmallAllocator::lookup(RegionIt slab_region, uint64_t va, uint64_t* base, uint64_t* size) const {
  const Slab* slab = static_cast<const Slab*>(slab_region->second.owner);
  uint64_t b = (va - slab->va) / slab->block;
  if (b >= slab->requested.size() || slab->requested[b] == 0) return false;
  uint64_t start = slab->va + b * slab->block;
  if (va >= start + slab->requested[b]) return false;
  *base = start;
  *size = slab->requested[b];
  return true;
}

std::string SmallAllocator::check() const {
  char buf[200];
  uint64_t live = 0;
  for (const auto& kv : slabs_) {
    const Slab& s = *kv.second;
    const Region* r = pages_.region_at(s.va);
    Kind want = s.paused ? Kind::Paused : Kind::Small;
    if (!r || r->kind != want || r->size != s.bytes || r->owner != &s) {
      std::snprintf(buf, sizeof buf, "small slab 0x%" PRIx64 " has no matching Small region", s.va);
      return buf;
    }
    uint32_t used = 0;
    for (uint64_t q : s.requested) used += q != 0;
    if (used != s.n_used || s.requested.size() != s.n_fresh ||
        s.free_list.size() + (s.n_blocks - s.n_fresh) + s.n_used + s.n_pending != s.n_blocks) {
      std::snprintf(buf, sizeof buf, "small slab 0x%" PRIx64 " block counts disagree (used %u/%u)",
                    s.va, used, s.n_used);
      return buf;
    }
    live += uint64_t(s.n_used) * s.block;
  }
  const size_t small_regions = pages_.count_small_regions();
  if (small_regions != slabs_.size()) return "small regions and slabs differ in number";
  if (live != live_bytes_) return "small live bytes drifted from the slabs";
  uint64_t empty = 0;
  for (const auto& kv : slabs_)
    if (is_empty(kv.second.get())) empty += kv.second->bytes;
  if (empty != empty_bytes_) return "small empty-slab bytes drifted from the slabs";
  for (const auto& kv : cached_empty_)
    if (kv.second && (!slabs_.count(kv.second->va) || !is_empty(kv.second)))
      return "a cached empty slab is not an empty slab";
  return "";
}

}  // namespace vpmm
