// The collectives on CUDA devices: NCCL's calls, on the syncmem stream's
// cudaStream_t, under a device_guard for the rank's device.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm_backend.hpp"
#include "core/ignored_failure.hpp"
#include "nccl_check.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"

namespace syncmem::nccl::detail {
namespace {

// NVLink SHARP needs multicast objects (cuMulticastCreate), which syncmem
// never uses: off unless the user's environment asks for it.
void keep_nvls_off() { ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

ncclDataType_t nccl_type(dtype type) {
  switch (type) {
    case dtype::int8:
      return ncclInt8;
    case dtype::uint8:
      return ncclUint8;
    case dtype::int32:
      return ncclInt32;
    case dtype::int64:
      return ncclInt64;
    case dtype::float16:
      return ncclFloat16;
    case dtype::bfloat16:
      return ncclBfloat16;
    case dtype::float32:
      return ncclFloat32;
    case dtype::float64:
      return ncclFloat64;
    case dtype::bool_:
    case dtype::int16:
      break;
  }
  SYNCMEM_FAIL("nccl: NCCL has no type for dtype " + syncmem::to_string(type));
}

ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return ncclSum;
    case reduce_op::prod:
      return ncclProd;
    case reduce_op::min:
      return ncclMin;
    case reduce_op::max:
      return ncclMax;
    case reduce_op::avg:
      return ncclAvg;
  }
  return ncclSum;
}

class nccl_comm final : public comm_backend {
 public:
  nccl_comm(ncclComm_t comm, device_id device) : comm_{comm}, device_{device} {}
  ~nccl_comm() override {
    try {
      device_guard guard{device_};
      SYNCMEM_NCCL_CHECK_NOEXCEPT(ncclCommDestroy(comm_));
    } catch (...) {
      // the device is gone, and the communicator with it
      syncmem::detail::log_ignored("destroying an NCCL communicator");
    }
  }
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;

  // In a group, NCCL is called when the group ends, after the check of its
  // calls (see thread_group); NCCL's own group is still open then.
  void enqueue(const call& c, stream_view s) override {
    launch_grouped([comm = comm_, device = device_, c, s] { enqueue_now(comm, device, c, s); });
  }

  static void enqueue_now(ncclComm_t comm, device_id device, const call& c, stream_view s) {
    device_guard guard{device};
    auto* const stream = reinterpret_cast<cudaStream_t>(s.native_handle());
    // Reductions need NCCL's type; the rest move bytes, so every dtype goes as bytes.
    const std::size_t bytes = c.count * size_of(c.type);
    switch (c.kind) {
      case collective::all_reduce:
        SYNCMEM_NCCL_TRY(ncclAllReduce(c.send, c.recv, c.count, nccl_type(c.type), nccl_op(c.op), comm, stream));
        return;
      case collective::reduce_scatter:
        SYNCMEM_NCCL_TRY(ncclReduceScatter(c.send, c.recv, c.count, nccl_type(c.type), nccl_op(c.op), comm, stream));
        return;
      case collective::broadcast:
        SYNCMEM_NCCL_TRY(ncclBroadcast(c.send, c.recv, bytes, ncclUint8, c.peer, comm, stream));
        return;
      case collective::all_gather:
        SYNCMEM_NCCL_TRY(ncclAllGather(c.send, c.recv, bytes, ncclUint8, comm, stream));
        return;
      case collective::send:
        SYNCMEM_NCCL_TRY(ncclSend(c.send, bytes, ncclUint8, c.peer, comm, stream));
        return;
      case collective::recv:
        SYNCMEM_NCCL_TRY(ncclRecv(c.recv, bytes, ncclUint8, c.peer, comm, stream));
        return;
    }
  }

  void* register_buffer(void* base, std::size_t bytes, std::string& why) noexcept override {
    try {
      device_guard guard{device_};
      void* handle = nullptr;
      const ncclResult_t r = ncclCommRegister(comm_, base, bytes, &handle);
      if (r != ncclSuccess) {
        why = fmt::format("ncclCommRegister: {} ({})", ncclGetErrorString(r), ncclGetLastError(comm_));
        return nullptr;
      }
      return handle;
    } catch (const std::exception& e) {
      why = e.what();
      return nullptr;
    }
  }

  void deregister_buffer(void* handle) noexcept override {
    try {
      device_guard guard{device_};
      // Freed blocks of the segment may still be read by work enqueued before their frees.
      SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaDeviceSynchronize());
      SYNCMEM_NCCL_CHECK_NOEXCEPT(ncclCommDeregister(comm_, handle));
    } catch (...) {
      // the device is gone
      syncmem::detail::log_ignored("deregistering a buffer from an NCCL communicator");
    }
  }

 private:
  ncclComm_t comm_;
  device_id device_;
};

}  // namespace

std::vector<std::unique_ptr<comm_backend>> make_nccl_all(std::span<const device_id> devices) {
  keep_nvls_off();
  std::vector<int> ordinals;
  for (const auto d : devices) ordinals.push_back(d.index());
  std::vector<ncclComm_t> comms(devices.size());
  SYNCMEM_NCCL_TRY(ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), ordinals.data()));
  std::vector<std::unique_ptr<comm_backend>> ranks;
  try {
    for (std::size_t r = 0; r < devices.size(); ++r) ranks.push_back(std::make_unique<nccl_comm>(comms[r], devices[r]));
  } catch (...) {
    for (std::size_t r = ranks.size(); r < comms.size(); ++r) (void)ncclCommDestroy(comms[r]);
    throw;
  }
  return ranks;
}

std::unique_ptr<comm_backend> make_nccl_rank(const unique_id& id, int nranks, int rank, device_id device) {
  keep_nvls_off();
  static_assert(sizeof(ncclUniqueId) == sizeof(id.bytes));
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes.data(), sizeof nid);
  device_guard guard{device};
  ncclComm_t comm = nullptr;
  SYNCMEM_NCCL_TRY(ncclCommInitRank(&comm, nranks, nid, rank));
  try {
    return std::make_unique<nccl_comm>(comm, device);
  } catch (...) {
    (void)ncclCommDestroy(comm);
    throw;
  }
}

unique_id make_nccl_id() {
  keep_nvls_off();
  ncclUniqueId nid;
  SYNCMEM_NCCL_TRY(ncclGetUniqueId(&nid));
  unique_id id;
  std::memcpy(id.bytes.data(), &nid, sizeof nid);
  return id;
}

void nccl_group_start() { SYNCMEM_NCCL_TRY(ncclGroupStart()); }

std::string nccl_group_end() noexcept {
  const ncclResult_t r = ncclGroupEnd();
  if (r == ncclSuccess) return {};
  return fmt::format("ncclGroupEnd: {} ({})", ncclGetErrorString(r), static_cast<int>(r));
}

}  // namespace syncmem::nccl::detail
