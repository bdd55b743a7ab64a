#include "syncmem/error.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <new>
#include <string>
#include <system_error>

#include "backend/backend.hpp"
#include "core/log.hpp"
#include "syncmem/device.hpp"
#include "syncmem/mr/emulated_resource.hpp"
#include "syncmem/mr/limiting_adaptor.hpp"
#include "syncmem/synced_memory.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

namespace syncmem {
namespace {

int failing_cuda_call(int code) { return code; }

TEST(Errors, ExpectsThrowsLogicErrorWithMessageAndLocation) {
  const int given = 7;
  try {
    SYNCMEM_EXPECTS(given < 5, "argument 'count' is " + std::to_string(given) + ": valid range is 0..4");
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("argument 'count' is 7: valid range is 0..4"));
    EXPECT_THAT(e.what(), HasSubstr("tests/error_test.cpp:"));
  }
}

TEST(Errors, ExpectsDoesNotBuildTheMessageWhenTheCheckHolds) {
  int built = 0;
  auto message = [&] {
    ++built;
    return std::string{"never"};
  };
  SYNCMEM_EXPECTS(1 + 1 == 2, message());
  EXPECT_EQ(built, 0);
}

TEST(Errors, LogicErrorIsAStdLogicError) { EXPECT_THROW(SYNCMEM_FAIL("bad"), std::logic_error); }

TEST(Errors, CudaTryCarriesCallFileLineNameAndMessage) {
  try {
    SYNCMEM_CUDA_TRY(failing_cuda_call(2));
    FAIL() << "did not throw";
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.code(), 2);
    EXPECT_EQ(e.call(), "failing_cuda_call(2)");
    EXPECT_EQ(e.file(), "tests/error_test.cpp");
    EXPECT_GT(e.line(), 0);
    EXPECT_FALSE(e.error_name().empty());
    EXPECT_FALSE(e.error_message().empty());
    EXPECT_THAT(e.what(), HasSubstr("failing_cuda_call(2) failed"));
    EXPECT_THAT(e.what(), HasSubstr(e.error_name()));
    EXPECT_THAT(e.what(), HasSubstr(e.error_message()));
    if (detail::cuda_compiled()) {
      EXPECT_EQ(e.error_name(), "cudaErrorMemoryAllocation");
      EXPECT_EQ(e.error_message(), "out of memory");
    }
  }
}

// One handler serves every backend: a failed CUDA call is a device_error naming its backend and code.
TEST(Errors, CudaErrorIsCaughtAsADeviceErrorWithKindBackendAndCode) {
  try {
    SYNCMEM_CUDA_TRY(failing_cuda_call(2));
    FAIL() << "did not throw";
  } catch (const device_error& e) {
    EXPECT_EQ(e.kind(), device_kind::cuda);
    EXPECT_EQ(e.backend(), "cuda");
    EXPECT_EQ(e.code(), 2);
    EXPECT_NE(dynamic_cast<const cuda_error*>(&e), nullptr);
  }
}

TEST(Errors, CudaErrorTextIsAsBeforeAndALibraryOnTopOfCudaNamesItself) {
  const cuda_error e{700, "cudaErrorIllegalAddress", "an illegal memory access", "k<<<>>>", "a.cu", 3};
  EXPECT_STREQ(e.what(),
               "CUDA runtime error at a.cu:3: k<<<>>> failed: code = cudaErrorIllegalAddress (700), message = an "
               "illegal memory access");
  EXPECT_EQ(e.backend(), "cuda");
  const cuda_error nccl{5, "ncclInvalidUsage", "invalid usage", "ncclAllReduce(...)", "b.cpp", 9, "nccl"};
  EXPECT_EQ(nccl.backend(), "nccl");
  EXPECT_EQ(nccl.kind(), device_kind::cuda);
  EXPECT_THROW(throw nccl, std::runtime_error);
}

TEST(Errors, FailAsThrowsTheNamedTypeStampedLikeTheOthers) {
  const int line = __LINE__ + 2;
  try {
    SYNCMEM_FAIL_AS(unsupported_error, "no such thing");
    FAIL() << "did not throw";
  } catch (const unsupported_error& e) {
    EXPECT_EQ(std::string{e.what()}, "syncmem: no such thing [tests/error_test.cpp:" + std::to_string(line) + "]");
  }
  EXPECT_THROW(SYNCMEM_FAIL_AS(logic_error, "bad"), std::logic_error);
}

// A refused system call is an environment failure: a std::system_error carrying errno, not a logic_error.
TEST(Errors, SystemFailThrowsASystemErrorCarryingErrno) {
  const int line = __LINE__ + 2;
  try {
    SYNCMEM_SYSTEM_FAIL(EMFILE, "memfd_create of 4096 bytes");
    FAIL() << "did not throw";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::error_code(EMFILE, std::generic_category()));
    EXPECT_EQ(std::string{e.what()}, "syncmem: memfd_create of 4096 bytes: " + e.code().message() +
                                         " [tests/error_test.cpp:" + std::to_string(line) + "]");
    EXPECT_NE(dynamic_cast<const system_error*>(&e), nullptr);
    EXPECT_EQ(dynamic_cast<const std::logic_error*>(&e), nullptr);
  }
}

// The emulated backend's mmap of address space fails for a size no machine has.
TEST(Errors, AnEmulatedReservationTheSystemRefusesIsASystemError) {
  auto& emulated = detail::emulated_backend();
  const std::size_t huge = std::size_t{1} << 62;
  try {
    (void)emulated.virtual_memory()->reserve(0, huge);
    FAIL() << "reserved 2^62 bytes";
  } catch (const system_error& e) {
    EXPECT_EQ(e.code().value(), ENOMEM);
    EXPECT_THAT(e.what(), HasSubstr("vmm_reserve: cannot reserve"));
    EXPECT_THAT(e.what(), HasSubstr("src/backend/emulated/emulated_vmm.cpp:"));
  }
}

TEST(Errors, CudaTryIsSilentOnSuccess) { EXPECT_NO_THROW(SYNCMEM_CUDA_TRY(failing_cuda_call(0))); }

TEST(Errors, OutOfMemoryIsABadAllocCarryingEverything) {
  oom_info info;
  info.requested = 3 << 20;
  info.device = device_id::emulated(1);
  info.label = "activations";
  info.resource = "caching_resource";
  info.device_free = 1 << 20;
  info.device_total = std::size_t{8} << 30;
  info.reserved = 5 << 20;
  info.in_use = 4 << 20;
  info.largest_free_block = 512 << 10;
  info.hint = "fragmented: try empty_cache()";
  try {
    throw out_of_memory{info};
  } catch (const std::bad_alloc& e) {
    const std::string text = e.what();
    EXPECT_THAT(text, HasSubstr("3.00 MiB (3145728 bytes)"));
    EXPECT_THAT(text, HasSubstr("emulated:1"));
    EXPECT_THAT(text, HasSubstr("'activations'"));
    EXPECT_THAT(text, HasSubstr("caching_resource"));
    EXPECT_THAT(text, HasSubstr("device free 1.00 MiB"));
    EXPECT_THAT(text, HasSubstr("of total 8.00 GiB"));
    EXPECT_THAT(text, HasSubstr("reserved by the allocator 5.00 MiB"));
    EXPECT_THAT(text, HasSubstr("in use 4.00 MiB"));
    EXPECT_THAT(text, HasSubstr("largest free block 512.00 KiB"));
    EXPECT_THAT(text, HasSubstr("fragmented: try empty_cache()"));
    const auto* oom = dynamic_cast<const out_of_memory*>(&e);
    ASSERT_NE(oom, nullptr);
    EXPECT_EQ(oom->info().requested, info.requested);
    EXPECT_EQ(oom->info().device, info.device);
  }
}

TEST(Errors, OutOfMemoryOfHostMemorySaysSoAndLabelCanBeAdded) {
  oom_info info;
  info.requested = 100;
  const out_of_memory e{info};
  EXPECT_THAT(e.what(), HasSubstr("100 B of host memory"));
  const auto labelled = e.with_label("weights");
  EXPECT_THAT(labelled.what(), HasSubstr("'weights'"));
  EXPECT_EQ(labelled.info().label, "weights");
  EXPECT_EQ(e.info().label, "");
}

// SYNCMEM_OUT_OF_MEMORY formats like SYNCMEM_FAIL: the prefix, the text, the place.
TEST(Errors, OutOfMemoryCarriesThePrefixAndThePlaceLikeTheOthers) {
  oom_info info;
  info.requested = 100;
  info.resource = "test_resource";
  const int line = __LINE__ + 2;
  try {
    SYNCMEM_OUT_OF_MEMORY(info);
  } catch (const out_of_memory& e) {
    const std::string place = " [tests/error_test.cpp:" + std::to_string(line) + "]";
    EXPECT_EQ(std::string{e.what()},
              "syncmem: out of memory: test_resource failed to allocate 100 B of host memory" + place);
    EXPECT_EQ(e.file(), "tests/error_test.cpp");
    EXPECT_EQ(e.line(), line);
    const auto labelled = e.with_label("weights");
    EXPECT_EQ(std::string{labelled.what()},
              "syncmem: out of memory: test_resource failed to allocate 100 B of host memory for 'weights'" + place);
  }
}

// A real allocator's failure, reached through a synced_memory, reads the same way.
TEST(Errors, OutOfMemoryFromAnAllocatorHasThePrefixAndThePlace) {
  const device_id dev = device_id::emulated(0);
  mr::emulated_resource source{dev};
  mr::limiting_adaptor limited{source, 1000};
  synced_memory m{4096, dev, {.label = "ten", .device_resource = &limited}};
  try {
    (void)m.mutable_device_data(default_stream(dev));
    FAIL() << "4096 bytes under a limit of 1000";
  } catch (const out_of_memory& e) {
    EXPECT_THAT(e.what(), StartsWith("syncmem: out of memory: "));
    EXPECT_THAT(e.what(), HasSubstr("4.00 KiB (4096 bytes) on emulated:0"));
    EXPECT_THAT(e.what(), HasSubstr("limit 1000 B"));
    EXPECT_THAT(e.what(), MatchesRegex(".* \\[src/mr/limiting_adaptor\\.cpp:[0-9]+\\]"));
  }
  EXPECT_EQ(m.state(), sync_state::uninitialized);
}

// The span check of synced_memory goes through SYNCMEM_FAIL too.
TEST(Errors, ASpanOfTheWrongSizeHasThePrefixAndThePlace) {
  synced_memory m{10, device_id::emulated(0), {.label = "ten"}};
  EXPECT_THAT(test::error_of([&] { (void)m.host_span<std::uint64_t>(); }),
              MatchesRegex("syncmem: synced_memory 'ten' \\(emulated:0\\): host_span<T>: its size of 10 bytes is not "
                           "a multiple of sizeof\\(T\\) = 8 \\[src/memory/synced_memory\\.cpp:[0-9]+\\]"));
  EXPECT_THAT(test::error_of([&] { (void)m.mutable_device_span<std::uint32_t>(); }),
              HasSubstr("mutable_device_span<T>: its size of 10 bytes is not a multiple of sizeof(T) = 4 ["));
}

TEST(Errors, ExceptionsCopyWithoutLosingDetails) {
  const cuda_error original{700, "cudaErrorIllegalAddress", "an illegal memory access", "k<<<>>>", "a.cu", 3};
  const cuda_error copy = original;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.error_name(), "cudaErrorIllegalAddress");
  EXPECT_STREQ(copy.what(), original.what());
}

TEST(Errors, UnsupportedErrorIsARuntimeError) { EXPECT_THROW(SYNCMEM_UNSUPPORTED("not here"), std::runtime_error); }

TEST(Errors, DeviceAccessWithoutDevicesOfAKindIsUnsupported) {
  if (device_count(device_kind::cuda) > 0) GTEST_SKIP() << "this machine has CUDA devices";
  try {
    check_device(device_id::cuda(0));
    FAIL() << "did not throw";
  } catch (const unsupported_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no cuda devices"));
  }
}

TEST(Errors, NoexceptReportIsSilentWhileTheRuntimeUnloads) {
  if (!detail::cuda_compiled()) GTEST_SKIP() << "no CUDA in this build";
  ::testing::internal::CaptureStderr();
  detail::report_noexcept_failure(4 /* cudaErrorCudartUnloading */, "cudaFree(p)", __FILE__, __LINE__);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ::testing::internal::CaptureStderr();
  detail::report_noexcept_failure(700, "cudaFree(p)", __FILE__, __LINE__);
  const auto logged = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged, HasSubstr("cudaFree(p) failed"));
  EXPECT_THAT(logged, HasSubstr("cudaErrorIllegalAddress"));
}

// Log lines (a bad environment variable, a failure in a destructor) start
// like the exceptions' messages, with "syncmem: ", then the level.
TEST(Errors, LogLinesStartWithTheSyncmemPrefix) {
  ::testing::internal::CaptureStderr();
  detail::logger().error("emulated devices are off: {}", "SYNCMEM_EMULATED_DEVICES='lots' is not a whole number");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "syncmem: error: emulated devices are off: SYNCMEM_EMULATED_DEVICES='lots' is not a whole number\n");
}

TEST(Errors, FormatBytes) {
  EXPECT_EQ(detail::format_bytes(0), "0 B");
  EXPECT_EQ(detail::format_bytes(1023), "1023 B");
  EXPECT_EQ(detail::format_bytes(1536), "1.50 KiB (1536 bytes)");
}

}  // namespace
}  // namespace syncmem
