// `kiln compile`'s --arch default (api/compile_ai8x.h FactoryFromExportName): the factory an
// ai8x-training export's file name names, checked against the reference exports' own records.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "api/compile_ai8x.h"

namespace kiln::api {
namespace {

TEST(ExportNames, KnownFactoryFromTheFileName) {
  EXPECT_EQ(FactoryFromExportName("mnist-ai85net5.qat.onnx"), "ai85net5");
  EXPECT_EQ(FactoryFromExportName("/data/x/kws20-ai85kws20netv3.float.onnx"), "ai85kws20netv3");
  EXPECT_EQ(FactoryFromExportName("cifar10-ai85net5.simplified"), "ai85net5");  // a stored name
  EXPECT_EQ(FactoryFromExportName("ai85net5.onnx"), "ai85net5");
  EXPECT_EQ(FactoryFromExportName("faceid112-ai85faceidnet_112.qat.onnx"), "ai85faceidnet_112");
  // What the izer would reject as arch: no known factory in the name.
  EXPECT_EQ(FactoryFromExportName("mnist-mynet.qat.onnx"), "");
  EXPECT_EQ(FactoryFromExportName("first.v1.qat.onnx"), "");
  EXPECT_EQ(FactoryFromExportName("model.onnx"), "");
  EXPECT_EQ(FactoryFromExportName("mnist-ai85net5x.qat.onnx"), "");
}

// Every factory of tests/data/ai8x/models/{manifest,factories}.json is known, and each export's
// file name gives its own factory or none, never another one.
TEST(ExportNames, EveryReferenceExportsFactoryIsKnown) {
  const auto& known = KnownAi8xFactories();
  EXPECT_TRUE(std::is_sorted(known.begin(), known.end()));
  size_t inferred = 0, entries = 0;
  for (const char* list : {"manifest.json", "factories.json"}) {
    std::ifstream in(std::string(KILN_TEST_DATA) + "/ai8x/models/" + list);
    ASSERT_TRUE(in) << list;
    for (const auto& e : nlohmann::json::parse(in)) {
      ++entries;
      const std::string factory = e["factory"], file = e["file"];
      EXPECT_TRUE(std::binary_search(known.begin(), known.end(), factory)) << factory << " (" << list << ")";
      std::string got = FactoryFromExportName(file);
      EXPECT_TRUE(got.empty() || got == factory) << file << " -> " << got;
      if (file.find("-" + factory + ".") != std::string::npos) {
        EXPECT_EQ(got, factory) << file;
        ++inferred;
      }
    }
  }
  EXPECT_GT(entries, 50u);
  EXPECT_GT(inferred, entries * 3 / 4);
}

}  // namespace
}  // namespace kiln::api
