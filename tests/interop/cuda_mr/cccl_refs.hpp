#pragma once

// The stream-ordered, non-owning ref of whichever CCCL the test is built
// with: cuda::mr::async_resource_ref up to CCCL 3.0, resource_ref from 3.1
// (CCCL PR 5313 renamed the concepts and refs).

#include "syncmem/cuda/cccl.hpp"

namespace syncmem::test {

#if CCCL_VERSION >= 3001000
template <class... Properties>
using stream_ordered_ref = ::cuda::mr::resource_ref<Properties...>;
template <class R, class... Properties>
inline constexpr bool is_stream_ordered_with = ::cuda::mr::resource_with<R, Properties...>;
#else
template <class... Properties>
using stream_ordered_ref = ::cuda::mr::async_resource_ref<Properties...>;
template <class R, class... Properties>
inline constexpr bool is_stream_ordered_with = ::cuda::mr::async_resource_with<R, Properties...>;
#endif

}  // namespace syncmem::test
