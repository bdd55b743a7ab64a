// SYNCMEM_ALLOC_CONF and caching_options: every good form, every kind of bad.
#include "syncmem/mr/caching_options.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "syncmem/error.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(CachingOptions, DefaultsAreUnlimitedAndNotExpandable) {
  const mr::caching_options o;
  EXPECT_EQ(o.max_split_size, std::numeric_limits<std::size_t>::max());
  EXPECT_FALSE(o.expandable);
  EXPECT_FALSE(o.limit.has_value());
  EXPECT_EQ(o.thread_cache_size, 256 * MiB);
  EXPECT_TRUE(o.release_before_grow);
  EXPECT_FALSE(o.grow_from_idle);
  EXPECT_EQ(o.expandable_page_size, 0U);
  EXPECT_EQ(o.expandable_large_page_size, 20 * MiB);
  EXPECT_TRUE(o.compact_under_pressure);
  EXPECT_EQ(o.to_string(),
            "max_split_mb:unlimited,expandable:0,limit_mb:unlimited,thread_cache_mb:256,release_before_grow:1,"
            "grow_from_idle:0,expandable_page_mb:0,expandable_large_page_mb:20,compact:1");
  EXPECT_EQ(mr::caching_options::parse(""), o);
  EXPECT_EQ(mr::caching_options::parse("   "), o);
}

TEST(CachingOptions, ParsesEveryKey) {
  const auto o = mr::caching_options::parse("max_split_mb:256,expandable:1,limit_mb:4096");
  EXPECT_EQ(o.max_split_size, 256 * MiB);
  EXPECT_TRUE(o.expandable);
  EXPECT_EQ(o.limit, 4096 * MiB);
  EXPECT_EQ(o.thread_cache_size, 256 * MiB);
  const auto p = mr::caching_options::parse(" thread_cache_mb : 0 , expandable:false,limit_mb:unlimited ");
  EXPECT_EQ(p.thread_cache_size, 0U);
  EXPECT_FALSE(p.expandable);
  EXPECT_FALSE(p.limit.has_value());
  EXPECT_TRUE(mr::caching_options::parse("expandable:true").expandable);
  EXPECT_FALSE(mr::caching_options::parse("release_before_grow:0").release_before_grow);
  EXPECT_TRUE(mr::caching_options::parse("grow_from_idle:1").grow_from_idle);
  EXPECT_FALSE(mr::caching_options::parse("compact:0").compact_under_pressure);
  EXPECT_EQ(mr::caching_options::parse("expandable_page_mb:20").expandable_page_size, 20 * MiB);
  EXPECT_EQ(mr::caching_options::parse("expandable_page_mb:0").expandable_page_size, 0U);
  EXPECT_EQ(mr::caching_options::parse("expandable_large_page_mb:64").expandable_large_page_size, 64 * MiB);
  EXPECT_EQ(mr::caching_options::parse("expandable_large_page_mb:0").expandable_large_page_size, 0U);
  EXPECT_FALSE(mr::caching_options::parse("expandable:0").expandable);
  EXPECT_EQ(mr::caching_options::parse("max_split_mb:unlimited").max_split_size,
            std::numeric_limits<std::size_t>::max());
}

TEST(CachingOptions, ToStringReadsBack) {
  for (const char* text :
       {"max_split_mb:20,expandable:1,limit_mb:1,thread_cache_mb:64", "expandable:0", "release_before_grow:false",
        "grow_from_idle:1", "limit_mb:1073741824,max_split_mb:16777216", "thread_cache_mb:65536",
        "expandable:1,expandable_page_mb:1024", "expandable:1,expandable_large_page_mb:0", "compact:0"}) {
    const auto o = mr::caching_options::parse(text);
    EXPECT_EQ(mr::caching_options::parse(o.to_string()), o) << text << " -> " << o.to_string();
  }
}

struct bad_case {
  const char* text;
  const char* names;  // what the message must name
};

TEST(CachingOptions, RejectsEveryKindOfMalformedText) {
  const bad_case cases[] = {
      {"max_split:256", "unknown key 'max_split'"},
      {"expandable", "'expandable' has no value"},
      {"expandable:", "'expandable' has no value"},
      {":1", "has no key"},
      {"max_split_mb:abc", "'abc' of max_split_mb"},
      {"max_split_mb:0", "'0' of max_split_mb"},
      {"max_split_mb:-1", "'-1' of max_split_mb"},
      {"max_split_mb:1.5", "'1.5' of max_split_mb"},
      {"max_split_mb:16777217", "16777217"},
      {"limit_mb:99999999999999999999", "limit_mb"},
      {"limit_mb:0", "'0' of limit_mb"},
      {"limit_mb:4096MB", "'4096MB' of limit_mb"},
      {"thread_cache_mb:unlimited", "'unlimited' of thread_cache_mb"},
      {"thread_cache_mb:65537", "thread_cache_mb"},
      {"expandable:2", "'2' of expandable"},
      {"expandable:yes", "'yes' of expandable"},
      {"release_before_grow:maybe", "'maybe' of release_before_grow"},
      {"grow_from_idle:2", "'2' of grow_from_idle"},
      {"expandable_page_mb:1025", "'1025' of expandable_page_mb"},
      {"expandable_page_mb:unlimited", "'unlimited' of expandable_page_mb"},
      {"expandable_large_page_mb:1025", "'1025' of expandable_large_page_mb"},
      {"expandable:1,expandable:0", "'expandable' is given twice"},
      {"expandable:1,,limit_mb:5", "empty entry"},
      {"expandable:1,", "empty entry"},
      {",expandable:1", "empty entry"},
      {"limit_mb:5:6", "'5:6' of limit_mb"},
  };
  for (const auto& c : cases) {
    try {
      (void)mr::caching_options::parse(c.text, "SYNCMEM_ALLOC_CONF");
      ADD_FAILURE() << "accepted '" << c.text << "'";
    } catch (const logic_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.names)) << c.text;
      EXPECT_THAT(e.what(), HasSubstr("SYNCMEM_ALLOC_CONF")) << c.text;
    }
  }
}

TEST(CachingOptions, ComeFromTheEnvironment) {
  const char* saved = std::getenv("SYNCMEM_ALLOC_CONF");
  const std::string previous = saved != nullptr ? saved : "";
  ::unsetenv("SYNCMEM_ALLOC_CONF");
  EXPECT_EQ(mr::caching_options::from_environment(), mr::caching_options{});
  EXPECT_FALSE(mr::caching_options::environment_text().has_value());
  ::setenv("SYNCMEM_ALLOC_CONF", "expandable:1,limit_mb:100", 1);
  const auto o = mr::caching_options::from_environment();
  EXPECT_TRUE(o.expandable);
  EXPECT_EQ(o.limit, 100 * MiB);
  EXPECT_EQ(mr::caching_options::environment_text(), "expandable:1,limit_mb:100");
  // Over a base, only the keys the variable names change.
  mr::caching_options base;
  base.grow_from_idle = true;
  base.thread_cache_size = (1 + test::rng()() % 64) * MiB;
  ::setenv("SYNCMEM_ALLOC_CONF", "limit_mb:100,grow_from_idle:0", 1);
  mr::caching_options layered = base;
  layered.limit = 100 * MiB;
  layered.grow_from_idle = false;
  EXPECT_EQ(mr::caching_options::from_environment(base), layered);
  ::setenv("SYNCMEM_ALLOC_CONF", "limit_mb:lots", 1);
  EXPECT_THROW((void)mr::caching_options::from_environment(), logic_error);
  EXPECT_THROW((void)mr::caching_options::from_environment(base), logic_error);
  ::unsetenv("SYNCMEM_ALLOC_CONF");
  EXPECT_EQ(mr::caching_options::from_environment(base), base);
  if (saved != nullptr) {
    ::setenv("SYNCMEM_ALLOC_CONF", previous.c_str(), 1);
  } else {
    ::unsetenv("SYNCMEM_ALLOC_CONF");
  }
}

}  // namespace
}  // namespace syncmem
