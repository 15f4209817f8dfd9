#include "tools/report/sites.h"

#include "gtest/gtest.h"
#include "tools/trace/frame_table.h"

namespace gpumem::report {
namespace {

TEST(IsLibraryFrame, TorchAndStdlibAreLibraries) {
  EXPECT_TRUE(IsLibraryFrame({"site-packages/torch/nn/modules/linear.py", 125, "forward"}));
  EXPECT_TRUE(IsLibraryFrame({"/usr/lib/python3.11/contextlib.py", 81, "inner"}));
  EXPECT_TRUE(IsLibraryFrame({"<frozen runpy>", 88, "_run_code"}));
  EXPECT_TRUE(IsLibraryFrame({"/src/c10/cuda/CUDACachingAllocator.cpp", 1200, "malloc"}));
  EXPECT_FALSE(IsLibraryFrame({"capture.py", 78, "leaky_mlp"}));
  EXPECT_FALSE(IsLibraryFrame({"project/model/attention.py", 12, "forward"}));
}

TEST(SiteTable, InnermostUserFrameNamesTheSite) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  const std::uint32_t lib = frames.Intern({"site-packages/torch/nn/modules/linear.py", 125, "forward"});
  const std::uint32_t user = frames.Intern({"train.py", 42, "step"});
  const std::uint32_t top = frames.Intern({"train.py", 90, "<module>"});
  const std::uint32_t s1 = frames.InternStack({lib, user, top});
  const std::uint32_t s2 = frames.InternStack({user, top});
  const std::uint32_t only_lib = frames.InternStack({lib});
  SiteTable sites(t);
  EXPECT_EQ(sites.site_of_stack(s1), sites.site_of_stack(s2));
  EXPECT_EQ(sites.name(sites.site_of_stack(s1)), "train.py:42 step");
  EXPECT_EQ(sites.name(sites.site_of_stack(only_lib)), "site-packages/torch/nn/modules/linear.py:125 forward");
  EXPECT_EQ(sites.site_of_stack(0), 0u);
}

}  // namespace
}  // namespace gpumem::report
