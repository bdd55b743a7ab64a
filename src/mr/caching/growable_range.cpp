#include "mr/caching/growable_range.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::mr::detail::caching {

namespace {
// Without grow_from_idle, growth takes idle pages from elsewhere in the range
// when they are at least this share (1/n) of what is reserved: the work has
// moved on.
constexpr std::size_t release_share_pages = 4;
}  // namespace

growable_range::growable_range(device_id device, settings config, std::string name, stream_pools& pools,
                               reservation& reserved, caching_events& events, const segment_observers& observers)
    : device_{device},
      backend_{syncmem::detail::backend_for(device)},
      vmm_{backend_.virtual_memory()},
      index_{device.index()},
      config_{config},
      name_{std::move(name)},
      pools_{pools},
      reserved_{reserved},
      events_{events},
      observers_{observers} {}

bool growable_range::ready() {
  if (!config_.enabled) return false;
  if (range_ != nullptr) return true;
  if (tried_) return false;
  tried_ = true;
  try {
    return reserve_range();
  } catch (const std::exception& e) {
    syncmem::detail::logger().warn("{}: growable segments are off: {}", name_, e.what());
    return false;
  }
}

bool growable_range::reserve_range() {
  device_guard guard{device_};
  backend_.make_current(index_);  // the driver's virtual memory calls need the context current on this thread
  const std::size_t granularity = vmm_ == nullptr ? 0 : vmm_->granularity(index_);
  if (granularity == 0) {
    syncmem::detail::logger().info("{}: {} has no virtual memory management; growable segments are off", name_,
                                   to_string(device_));
    return false;
  }
  const std::size_t page = round_up(std::max(config_.page_size, granularity), granularity);
  const std::size_t large = config_.large_page_size > page ? round_up(config_.large_page_size, page) / page : 0;
  const std::size_t size = round_up(2 * backend_.memory(index_).total, page);  // twice the memory: room for holes
  auto seg = std::make_unique<segment>();
  std::vector<handle> pages(size / page, 0);
  block* u = pools_.blocks().make();
  void* base = nullptr;
  try {
    base = vmm_->reserve(index_, size);
  } catch (...) {
    pools_.blocks().release(u);
    throw;
  }
  *seg = segment{reinterpret_cast<std::uintptr_t>(base), size, pool_kind::large, true, stream_handle{}, u};
  u->ptr = seg->base;
  u->size = size;
  u->seg = seg.get();
  u->status = block_status::unmapped;
  unmapped_.insert(u);
  large_.assign(pages.size(), false);
  pages_ = std::move(pages);
  page_size_ = page;
  large_pages_ = large;
  range_ = std::move(seg);
  in_use_.store(true, std::memory_order_relaxed);
  pools_.serve_oversize_freely();
  return true;
}

// Where: after a free block of this pool, growing it; else at the start of
// the hole that needs the fewest pages (the smallest, among equals). With
// `join_after`, a hole too small for that also counts when mapping it whole
// joins the pool's free blocks on both sides into enough.
growable_range::placement growable_range::choose(std::size_t key, const stream_pool& pool, bool join_after) const {
  auto ours = [&pool](const block* b) { return b != nullptr && b->status == block_status::free && b->owner == &pool; };
  placement best;
  for (block* u : unmapped_) {
    block* const before = ours(u->prev) ? u->prev : nullptr;
    const std::size_t have = before != nullptr ? before->size : 0;
    if (have >= key) return placement{before};  // fits already (missed by the index's bounded scan)
    std::size_t n = round_up(key - have, page_size_);
    block* joined = nullptr;
    if (n > u->size && join_after && ours(u->next) && have + u->size + u->next->size >= key) {
      n = u->size;
      joined = u->next;
    }
    if (n > u->size) continue;
    if (best.hole == nullptr || n < best.need) best = placement{nullptr, u, before, joined, n};
  }
  return best;
}

block* growable_range::grow(std::size_t key, stream_pool& pool) {
  (void)settle(/*device_idle=*/false);
  placement where = choose(key, pool, /*join_after=*/false);
  if (where.fits == nullptr && make_room(where, key, pool)) release_spares();
  if (where.fits != nullptr) return pools_.take_whole(where.fits, key, pool);
  if (where.hole == nullptr) {
    release_spares();
    return nullptr;  // the address range is full of holes: handled as out of memory
  }
  block* const b = map_hole(where, pool);
  return b == nullptr ? nullptr : pools_.take_whole(b, key, pool);
}

// Pages idle elsewhere in the range move here rather than new memory being
// made: always (grow_from_idle), as many as there are up to what the growth
// needs, or all it needs once there are enough of them that the work has
// moved on. That only widens the holes, so the choice made again is as good.
// With grow_from_idle, which runs this on most growths, the pages come from
// the smallest free blocks first: large free blocks stay whole for the large
// requests that would otherwise grow again (the synthetic replay: a fifth
// fewer pages moved). Returns whether the new choice fits without mapping.
//
// Where there is a hole to map and no stream capture is open, the pages are
// moved without waiting for the device (move_idle), so their old place is not
// a hole yet and the choice stands. Otherwise they are unmapped after a device
// synchronisation, which widens the holes, and the choice is made again.
bool growable_range::make_room(placement& where, std::size_t key, const stream_pool& pool) {
  const std::size_t page = page_size_;
  const std::size_t spare = (spare_pages_.size() + spare_large_.size() * large_pages_) * page;
  if (!config_.release_before_grow) return false;
  const bool join_after = config_.grow_from_idle && join_if_cheaper(where, key, pool, spare);
  const std::size_t wanted = where.hole != nullptr ? where.need : round_up(key, page);
  if (spare >= wanted) return false;
  const bool captures = syncmem::detail::captures_open();
  const bool move = where.hole != nullptr && !captures;
  const std::size_t idle = idle_pages(&where, /*across=*/!move && !captures);
  const std::size_t enough = config_.grow_from_idle ? page : std::max(page, reserved_.bytes() / release_share_pages);
  if (idle < enough) return false;
  const victims order = config_.grow_from_idle ? victims::smallest_first : victims::top_down;
  if (move) {
    move_idle(std::min(idle, wanted - spare), where, order, pool);
    return false;
  }
  unmap_idle(std::min(idle, wanted - spare), /*keep_handles=*/true, &where, order);
  where = choose(key, pool, join_after);
  return where.fits != nullptr;
}

// Mapping a hole whole, to join the pool's free blocks on both sides, may
// need fewer pages than extending the one before it; taken unless it would
// make more new memory, as its neighbours are then not moved (the synthetic
// replay: a sixth fewer pages placed, the ratios no higher).
bool growable_range::join_if_cheaper(placement& where, std::size_t key, const stream_pool& pool,
                                     std::size_t spare) const {
  if (where.hole == nullptr) return false;
  placement joined = choose(key, pool, /*join_after=*/true);
  if (joined.hole == nullptr || joined.need >= where.need) return false;
  auto fresh = [spare](std::size_t need, std::size_t idle) { return need - std::min(need, spare + idle); };
  if (fresh(joined.need, idle_pages(&joined, false)) > fresh(where.need, idle_pages(&where, false))) return false;
  where = joined;
  return true;
}

// Maps the pages `where` needs (spare handles first) and returns the pool's
// free block that now spans them; nullptr when the limit or the device refuses.
block* growable_range::map_hole(const placement& where, stream_pool& pool) {
  block* m = nullptr;
  bool mapped = false;
  try {
    m = pools_.blocks().make();
    mapped = map_stretch(where.hole->ptr, where.need / page_size_);
  } catch (...) {
    release_spares();
    if (m != nullptr) pools_.blocks().release(m);
    throw;
  }
  if (!mapped) {
    release_spares();
    pools_.blocks().release(m);
    return nullptr;
  }
  place(m, where.hole, where.need);
  release_spares();
  reserved_.count_growth();
  return pools_.free_block(m, pool);  // joins the free block of this pool before it
}

// Maps `count` pages at `at`: large pages where whole ones fit (aligned to
// their size from the range's base), pages elsewhere, spare handles first.
// False when the limit or the device refuses; nothing stays mapped then, nor
// if it throws, and the handles it took or made are spares.
bool growable_range::map_stretch(std::uintptr_t at, std::size_t count) {
  spare_pages_.reserve(spare_pages_.size() + count);  // room to give every handle back without allocating
  spare_large_.reserve(spare_large_.size() + (large_pages_ == 0 ? 0 : count / large_pages_ + 1));
  std::vector<unit> units = plan_units(at, count);
  std::size_t fresh = 0;
  for (const unit& u : units) fresh += u.h == 0 ? (u.large ? large_pages_ : 1) * page_size_ : 0;
  if (!reserved_.admits(fresh)) {
    give_back_handles(units);
    return false;
  }
  device_guard guard{device_};
  backend_.make_current(index_);
  try {
    for (unit& u : units) {
      if (u.h != 0) continue;
      const std::size_t bytes = (u.large ? large_pages_ : 1) * page_size_;
      u.h = vmm_->create(index_, bytes);
      if (u.h == 0) {
        give_back_handles(units);
        return false;
      }
      reserved_.add(bytes);
    }
    map_units(units);
  } catch (...) {
    give_back_handles(units);
    throw;
  }
  for (const unit& u : units) {
    const std::size_t first = slot_of(u.at);
    const std::size_t n = u.large ? large_pages_ : 1;
    for (std::size_t i = first; i < first + n; ++i) {
      pages_[i] = u.h;
      large_[i] = u.large;
    }
  }
  mapped_pages_ += count;
  observers_.mapped(at, count * page_size_);
  return true;
}

// In a growth of at least large_page_growth, large pages take spare large
// handles, or new memory when the spare pages would not fill them (mapping a
// page costs more than making a large one); pages take spare pages first.
std::vector<growable_range::unit> growable_range::plan_units(std::uintptr_t at, std::size_t count) {
  std::vector<unit> units;
  units.reserve(count);
  const std::size_t first = slot_of(at);
  const std::size_t end = first + count;
  const bool use_large = large_pages_ != 0 && count * page_size_ >= large_page_growth;
  for (std::size_t s = first; s < end;) {
    const std::uintptr_t address = range_->base + s * page_size_;
    const bool whole_large = use_large && s % large_pages_ == 0 && s + large_pages_ <= end;
    if (whole_large && (!spare_large_.empty() || spare_pages_.size() < large_pages_)) {
      unit u{address, true, 0};
      if (!spare_large_.empty()) {
        u.h = spare_large_.back();
        spare_large_.pop_back();
      }
      units.push_back(u);
      s += large_pages_;
      continue;
    }
    unit u{address, false, 0};
    if (!spare_pages_.empty()) {
      u.h = spare_pages_.back();
      spare_pages_.pop_back();
    }
    units.push_back(u);
    ++s;
  }
  return units;
}

// Maps every unit: runs of pages in one call each, a large page alone.
// Nothing stays mapped if it throws.
void growable_range::map_units(const std::vector<unit>& units) {
  std::size_t done = 0;  // units mapped
  try {
    std::vector<handle> run;
    for (std::size_t i = 0; i < units.size();) {
      if (units[i].large) {
        vmm_->map(index_, reinterpret_cast<void*>(units[i].at), large_pages_ * page_size_, units[i].h);
        done = ++i;
        continue;
      }
      run.clear();
      std::size_t j = i;
      for (; j < units.size() && !units[j].large; ++j) run.push_back(units[j].h);
      vmm_->map_pages(index_, reinterpret_cast<void*>(units[i].at), page_size_, run.data(), run.size());
      done = i = j;
    }
  } catch (...) {
    for (std::size_t i = 0; i < done; ++i) {
      vmm_->unmap(index_, reinterpret_cast<void*>(units[i].at), (units[i].large ? large_pages_ : 1) * page_size_);
    }
    throw;
  }
}

// The handles of units not mapped go to the spares (room reserved by map_stretch).
void growable_range::give_back_handles(const std::vector<unit>& units) noexcept {
  for (const unit& u : units) {
    if (u.h == 0) continue;
    (u.large ? spare_large_ : spare_pages_).push_back(u.h);
  }
}

// The record `m` takes the first `need` bytes of the unmapped block `hole`.
void growable_range::place(block* m, block* hole, std::size_t need) {
  unmapped_.erase(hole);
  m->ptr = hole->ptr;
  m->size = need;
  m->seg = range_.get();
  link_before(hole, m);
  hole->ptr += need;
  hole->size -= need;
  if (hole->size == 0) {
    unlink_from_segment(hole);
    pools_.blocks().release(hole);
  } else {
    unmapped_.insert(hole);
  }
}

// Pages start at multiples of the page size from the range's base, which the
// device aligns to its granularity only.
std::uintptr_t growable_range::page_boundary_below(std::uintptr_t address) const noexcept {
  return range_->base + round_down(address - range_->base, page_size_);
}

std::uintptr_t growable_range::page_boundary_above(std::uintptr_t address) const noexcept {
  return range_->base + round_up(address - range_->base, page_size_);
}

std::size_t growable_range::slot_of(std::uintptr_t address) const noexcept {
  return (address - range_->base) / page_size_;
}

std::uintptr_t growable_range::large_start(std::size_t slot) const noexcept {
  return range_->base + round_down(slot, large_pages_) * page_size_;
}

growable_range::stretch growable_range::movable(std::uintptr_t from, std::uintptr_t to) const noexcept {
  stretch s{page_boundary_above(from), page_boundary_below(to)};
  if (s.end <= s.start || large_pages_ == 0) return s;
  const std::size_t large = large_pages_ * page_size_;
  // A large page reaching past either end of the block stays.
  if (const std::size_t last = slot_of(s.end) - 1; large_[last] && large_start(last) + large != s.end) {
    s.end = large_start(last);
  }
  if (s.end <= s.start) return s;
  if (const std::size_t first = slot_of(s.start); large_[first] && large_start(first) != s.start) {
    s.start = large_start(first) + large;
  }
  return s;
}

}  // namespace syncmem::mr::detail::caching
