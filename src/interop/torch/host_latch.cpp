#include "host_latch.hpp"

#include <condition_variable>
#include <mutex>

#include "syncmem/error.hpp"

namespace syncmem::interop {

struct host_latch::state {
  std::mutex mutex;
  std::condition_variable released_cv;
  bool released = false;
  bool reached = false;
};

namespace {

// Runs on CUDA's callback thread; owns one reference to the state.
void wait_for_release(void* arg) {
  std::unique_ptr<std::shared_ptr<host_latch::state>> held{static_cast<std::shared_ptr<host_latch::state>*>(arg)};
  auto& s = **held;
  std::unique_lock lock{s.mutex};
  s.reached = true;
  s.released_cv.wait(lock, [&] { return s.released; });
}

}  // namespace

host_latch::host_latch(cudaStream_t stream) : state_{std::make_shared<state>()} {
  auto ref = std::make_unique<std::shared_ptr<state>>(state_);
  SYNCMEM_CUDA_TRY(cudaLaunchHostFunc(stream, &wait_for_release, ref.get()));
  (void)ref.release();  // the host function owns it now
}

host_latch::~host_latch() { release(); }

void host_latch::release() noexcept {
  {
    std::lock_guard lock{state_->mutex};
    state_->released = true;
  }
  state_->released_cv.notify_all();
}

bool host_latch::reached() const noexcept {
  std::lock_guard lock{state_->mutex};
  return state_->reached;
}

}  // namespace syncmem::interop
