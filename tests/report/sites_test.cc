#include "tools/report/sites.h"

#include <string>

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
  // gpumem's package from a checkout, whose wrapper a graph capture runs through.
  EXPECT_TRUE(IsLibraryFrame({"/src/gpumem/python/gpumem/_graph_pools.py", 118, "capture_begin"}));
  EXPECT_FALSE(IsLibraryFrame({"project/model/attention.py", 12, "forward"}));
}

// A native stack runs through the interpreter's own binary between the library and the
// Python frames: /usr/bin/python3.11 or conda's python is no user's code, wherever it lives.
TEST(IsLibraryFrame, ThePythonInterpreterIsALibrary) {
  EXPECT_TRUE(IsLibraryFrame({"/usr/bin/python3.11", 0, "_PyEval_EvalFrameDefault+0xadf"}));
  EXPECT_TRUE(IsLibraryFrame({"conda/bin/python", 0, "Py_RunMain+0x3b5"}));
  EXPECT_TRUE(IsLibraryFrame({".venv/bin/python3", 0, "_start+0x25"}));
  EXPECT_FALSE(IsLibraryFrame({"python_utils.py", 3, "pad"}));
  EXPECT_FALSE(IsLibraryFrame({"pythonic/train.py", 3, "main"}));
  EXPECT_FALSE(IsLibraryFrame({"build/trainer", 0, "main+0x10"}));  // a C++ program
  EXPECT_TRUE(IsLibraryFrame({"/usr/local/bin/python3.13t", 0, "Py_BytesMain+0x2d"}));
  EXPECT_TRUE(IsLibraryFrame({"/usr/bin/python3.11-dbg", 0, "_PyEval_EvalFrameDefault"}));
  EXPECT_FALSE(IsLibraryFrame({"build/python_sim", 0, "main+0x10"}));  // named so, not it
  EXPECT_FALSE(IsLibraryFrame({"bin/pythonic_trainer", 0, "Step+0x44"}));
}

TEST(IsLibraryFrame, WhatAUserTypedIsTheUsers) {
  EXPECT_FALSE(IsLibraryFrame({"<ipython-input-3-5d3c2a1b9f>", 4, "<module>"}));
  EXPECT_FALSE(IsLibraryFrame({"ipykernel_4242/2912345678.py", 4, "<module>"}));
  EXPECT_FALSE(IsLibraryFrame({"<stdin>", 9, "train_step"}));
  EXPECT_TRUE(IsLibraryFrame({"<eval_with_key>.3", 7, "forward"}));
  EXPECT_TRUE(IsLibraryFrame({"<string>", 2, "__init__"}));
}

TEST(IsLibraryFrame, CodeThatTorchCompileGeneratesIsALibrary) {
  constexpr char kHash[] = "csrhcuqpfrk2brwkr2qbtvsvpuod3scmqgrjlbkyxd6ymtktlaqj";
  for (const std::string folder : {"torchinductor_me/sr/", "scratch/cache/sr/"}) {
    EXPECT_TRUE(IsLibraryFrame({folder + kHash + ".py", 183, "Runner.call"})) << folder;
  }
  // A user's file of that shape in another folder, or a short name, is the user's.
  EXPECT_FALSE(IsLibraryFrame({std::string("cache/ab/") + kHash + ".py", 1, "f"}));
  EXPECT_FALSE(IsLibraryFrame({"project/sr/csr.py", 1, "f"}));
  EXPECT_FALSE(IsLibraryFrame({std::string("project/sr/") + kHash + "x.py", 1, "f"}));
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
  // Installed packages are shown from the package on, as PyTorch's memory_viz does.
  EXPECT_EQ(sites.name(sites.site_of_stack(only_lib)), "torch/nn/modules/linear.py:125 forward");
  EXPECT_EQ(sites.site_of_stack(0), 0u);
  EXPECT_EQ(sites.common_dir(), "");  // no absolute paths
}

TEST(SiteTable, AbsoluteSitesAreShownRelativeToTheirCommonFolder) {
  trace::Trace t;
  trace::FrameTable frames(&t);
  const std::uint32_t lib =
      frames.Intern({"/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward"});
  const std::uint32_t model = frames.Intern({"/data/project/model/mlp.py", 12, "forward"});
  const std::uint32_t train = frames.Intern({"/data/project/train.py", 42, "step"});
  const std::uint32_t a = frames.InternStack({lib, model, train});
  const std::uint32_t b = frames.InternStack({lib, train});
  SiteTable sites(t);
  EXPECT_EQ(sites.common_dir(), "/data/project/");
  EXPECT_EQ(sites.name(sites.site_of_stack(a)), "model/mlp.py:12 forward");
  EXPECT_EQ(sites.name(sites.site_of_stack(b)), "train.py:42 step");
  // The frames themselves keep their full paths (stacks are shown whole).
  EXPECT_EQ(t.frames[train].filename, "/data/project/train.py");
}

TEST(DisplayPath, PackagesFromThePackageOnOthersRelativeToTheFolder) {
  EXPECT_EQ(DisplayPath("/usr/lib/python3/dist-packages/numpy/core/x.py", "/a/"), "numpy/core/x.py");
  EXPECT_EQ(DisplayPath("/a/b/c.py", "/a/"), "b/c.py");
  EXPECT_EQ(DisplayPath("/elsewhere/c.py", "/a/"), "/elsewhere/c.py");
  EXPECT_EQ(DisplayPath("rel/c.py", ""), "rel/c.py");
}

TEST(CommonDir, DeepestSharedFolderNeverTheRoot) {
  EXPECT_EQ(CommonDir({"/data/repo/tests/gpu/capture.py"}), "/data/repo/tests/gpu/");
  EXPECT_EQ(CommonDir({"/data/repo/tests/gpu/capture.py", "/data/repo/tools/x.py"}), "/data/repo/");
  EXPECT_EQ(CommonDir({"/srv/a.py", "/var/b.py"}), "");  // only "/" in common
  EXPECT_EQ(CommonDir({"rel.py", "/x/y/site-packages/torch/a.py"}), "");
  EXPECT_EQ(CommonDir({"/ab/c.py", "/abc/d.py"}), "");  // "/ab" is not a folder of both
}

}  // namespace
}  // namespace gpumem::report
