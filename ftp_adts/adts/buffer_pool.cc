// ftp_adts/adts/buffer_pool.cc — BufferPool and RegistrationCache.
#include "ftp_adts/adts/buffer_pool.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace tierce::adts {

// ---- RegistrationCache ------------------------------------------------------------------------

RegistrationCache::RegistrationCache(Registrar r) : registrar_(std::move(r)) {}
RegistrationCache::~RegistrationCache() = default;

void* RegistrationCache::get(void* addr, size_t len) {
  auto key = std::make_pair(reinterpret_cast<uintptr_t>(addr), len);
  std::lock_guard g(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    ++hits_;
    return it->second.get();
  }
  // Registering under the lock keeps two threads from registering the same buffer twice; it
  // happens once per buffer per domain, so the cost is not on the steady-state path.
  std::shared_ptr<void> reg = registrar_(addr, len);
  ++misses_;
  void* raw = reg.get();
  entries_.emplace(key, std::move(reg));
  return raw;
}

void RegistrationCache::forget(void* addr, size_t len) {
  std::lock_guard g(mu_);
  entries_.erase(std::make_pair(reinterpret_cast<uintptr_t>(addr), len));
}

void RegistrationCache::clear() {
  std::lock_guard g(mu_);
  entries_.clear();
}

uint64_t RegistrationCache::hits() const {
  std::lock_guard g(mu_);
  return hits_;
}
uint64_t RegistrationCache::misses() const {
  std::lock_guard g(mu_);
  return misses_;
}
size_t RegistrationCache::size() const {
  std::lock_guard g(mu_);
  return entries_.size();
}

Registrar noop_registrar() {
  return [](void* addr, size_t) -> std::shared_ptr<void> {
    // A non-owning token: the buffer's own address, nothing to undo.
    return std::shared_ptr<void>(addr, [](void*) {});
  };
}

// ---- BufferPool -------------------------------------------------------------------------------

static size_t page_size() {
  long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? size_t(p) : 4096;
}

static uint8_t* alloc_aligned(size_t size) {
  void* p = std::aligned_alloc(page_size(), size);
  if (!p) throw std::bad_alloc();
  return static_cast<uint8_t*>(p);
}

BufferPool::BufferPool(size_t count, size_t size, size_t max_overflow)
    : max_overflow_(max_overflow), tcp_cache_(noop_registrar()) {
  if (count == 0 || size == 0)
    throw AdtsError(AdtsError::Code::Config, "buffer pool needs count and size > 0");
  size_t ps = page_size();
  size_ = (size + ps - 1) / ps * ps;
  buffers_.reserve(count);
  try {
    for (size_t i = 0; i < count; ++i) buffers_.push_back(alloc_aligned(size_));
  } catch (...) {
    for (auto* b : buffers_) std::free(b);
    throw AdtsError(AdtsError::Code::Config, "cannot allocate " + std::to_string(count) +
                                                 " buffers of " + std::to_string(size_) + " bytes");
  }
  free_ = buffers_;
}

BufferPool::~BufferPool() {
  tcp_cache_.clear();
  for (auto* b : buffers_) std::free(b);
}

std::shared_ptr<BufferPool> BufferPool::shared(size_t size) {
  // Pools live as long as the process: registrations made against them stay valid across
  // sessions, which is the point of the cache.
  static std::mutex mu;
  static std::map<size_t, std::shared_ptr<BufferPool>> pools;
  std::lock_guard g(mu);
  size_t ps = page_size();
  size_t rounded = (size + ps - 1) / ps * ps;
  auto& p = pools[rounded];
  if (!p) p = std::make_shared<BufferPool>(kSharedCount, rounded);
  return p;
}

BufferPool::Lease& BufferPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    pooled_ = std::exchange(o.pooled_, false);
  }
  return *this;
}

void BufferPool::Lease::reset() {
  if (pool_ && data_) pool_->give_back(data_, pooled_);
  pool_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

BufferPool::Lease BufferPool::try_acquire_pooled() {
  Lease l;
  std::lock_guard g(mu_);
  if (free_.empty()) return l;
  l.pool_ = this;
  l.data_ = free_.back();
  free_.pop_back();
  l.size_ = size_;
  l.pooled_ = true;
  return l;
}

BufferPool::Lease BufferPool::acquire(Millis timeout) {
  Lease l;
  std::unique_lock g(mu_);
  bool ok = cv_.wait_for(g, timeout,
                         [&] { return !free_.empty() || overflow_out_ < max_overflow_; });
  if (!ok)
    throw AdtsError(AdtsError::Code::Timeout,
                    "no transfer buffer became free within " + std::to_string(timeout.count()) +
                        " ms");
  l.pool_ = this;
  l.size_ = size_;
  if (!free_.empty()) {
    l.data_ = free_.back();
    free_.pop_back();
    l.pooled_ = true;
    return l;
  }
  ++overflow_out_;
  ++on_demand_;
  g.unlock();
  try {
    l.data_ = alloc_aligned(size_);
  } catch (...) {
    std::lock_guard g2(mu_);
    --overflow_out_;
    l.pool_ = nullptr;
    throw AdtsError(AdtsError::Code::LocalIo, "out of memory for a transfer buffer");
  }
  l.pooled_ = false;
  return l;
}

void BufferPool::give_back(uint8_t* data, bool pooled) {
  if (pooled) {
    std::lock_guard g(mu_);
    free_.push_back(data);
  } else {
    std::vector<std::function<void(void*, size_t)>> hooks;
    {
      std::lock_guard g(mu_);
      hooks = on_free_;
    }
    for (auto& h : hooks) h(data, size_);
    tcp_cache_.forget(data, size_);
    std::free(data);
    std::lock_guard g(mu_);
    --overflow_out_;
  }
  cv_.notify_one();
}

size_t BufferPool::available() const {
  std::lock_guard g(mu_);
  return free_.size();
}

uint64_t BufferPool::on_demand_allocations() const {
  std::lock_guard g(mu_);
  return on_demand_;
}

void BufferPool::on_free(std::function<void(void*, size_t)> f) {
  std::lock_guard g(mu_);
  on_free_.push_back(std::move(f));
}

}  // namespace tierce::adts
