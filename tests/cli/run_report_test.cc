// The run report's formatting in process (cli/run_report.h, cli/html_report.h): names cut in the
// middle stay distinct, and the HTML page of a 300-layer network stays bounded however long the
// model's names and notes are. What the reports say about real runs is tested through a live kilnd
// (tests/cli/cli_run_e2e_test.cc) and in a browser (tests/cli/html_report_browser_test.sh).
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/html_report.h"
#include "cli/run_report.h"

namespace kiln::cli {
namespace {

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(CutMiddle, KeepsBothEndsSoMobileNetNamesStayDistinct) {
  // Cut at 28 from the start, these three were all "/features/features.17/conv/~".
  const std::vector<std::string> names = {"/features/features.17/conv/conv.0/conv.0.0/Conv",
                                          "/features/features.17/conv/conv.1/conv.1.0/Conv",
                                          "/features/features.17/conv/conv.2/Conv"};
  std::set<std::string> cut;
  for (const auto& n : names) {
    const std::string c = CutMiddle(n, 28);
    EXPECT_EQ(c.size(), 28u) << c;
    EXPECT_EQ(c.substr(0, 9), "/features") << c;
    EXPECT_EQ(c.substr(c.size() - 5), "/Conv") << c;
    cut.insert(c);
  }
  EXPECT_EQ(cut.size(), 3u);
  EXPECT_EQ(CutMiddle("short", 28), "short");
}

// "0 compared" says why: a model with no layer ran nothing, a run without the reference checked
// nothing.
TEST(RunReportVerdict, ZeroComparedSaysWhy) {
  std::vector<RunConfiguration> runs(1);
  runs[0].response.set_backend("tt-emu");
  EXPECT_NE(RunReportTable(runs, {}).find(": 0 compared (the model has no layers: nothing ran)\n"), std::string::npos)
      << RunReportTable(runs, {});
  auto* l = runs[0].response.add_layers();
  l->set_name("conv");
  l->set_op("conv2d");
  EXPECT_NE(RunReportTable(runs, {}).find(": 0 compared (no reference: nothing checked)\n"), std::string::npos)
      << RunReportTable(runs, {});
}

// An output path may be what a shell hands over (a device, a pipe), never a directory.
TEST(CheckWritableFile, TakesDevicesAndPipesNotDirectories) {
  EXPECT_TRUE(CheckWritableFile("-o", "/dev/null").ok());
  EXPECT_TRUE(CheckWritableFile("--report-file", "/dev/stdout").ok());
  const Status dir = CheckWritableFile("-o", "/tmp");
  EXPECT_EQ(dir.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dir.message(), "-o /tmp: is a directory");
  EXPECT_EQ(CheckWritableFile("-o", "/no/such/dir/x.yaml").message(), "-o /no/such/dir/x.yaml: no such directory");
}

// The fp32 reference ignores the device precision: the JSON says null for it in both forms, as
// the table says "fp32" (the response still carries the request's resolved string).
TEST(RunReportJson, ReferencePrecisionIsNull) {
  std::vector<RunConfiguration> runs(2);
  for (int i = 0; i < 2; ++i) {
    runs[i].response.set_backend(i == 0 ? "reference" : "tt-emu");
    runs[i].response.set_resolved_precision("LoFi w=bfloat4_b");
    runs[i].response.mutable_precision()->set_math_fidelity(kiln::v1::LOFI);
  }
  const auto doc = nlohmann::json::parse(RunReportJson(runs, {}));
  EXPECT_TRUE(doc["configurations"][0]["resolved_precision"].is_null()) << doc.dump();
  EXPECT_TRUE(doc["configurations"][0]["precision"].is_null()) << doc.dump();
  EXPECT_EQ(doc["configurations"][1]["resolved_precision"], "LoFi w=bfloat4_b");
  EXPECT_EQ(doc["configurations"][1]["precision"]["math_fidelity"], "LoFi");
}

// 300 layers in two modes with 400-character names, long details and 10 program notes each.
TEST(RunReportHtml, ThreeHundredLayersStayBounded) {
  std::vector<RunConfiguration> runs(2);
  for (int m = 0; m < 2; ++m) {
    auto& r = runs[m].response;
    r.set_model_id(std::string(64, 'a'));
    r.set_backend("tt-emu");
    r.set_mode(m == 0 ? kiln::v1::CHAINED : kiln::v1::PER_LAYER);
    for (int i = 0; i < 300; ++i) {
      auto* l = r.add_layers();
      l->set_name("/" + std::string(400, 'n') + "/layer" + std::to_string(i) + "/Conv");
      l->set_op("conv2d");
      for (int64_t d : {1, 512, 128, 128}) l->add_output_shape(d);
      l->set_compared(true);
      l->set_pcc(i == 17 ? 0.9 : 0.9999);
      l->set_pcc_threshold(0.999);
      l->set_pass(i != 17);
      l->set_max_abs_error(0.01 * (i + 1));
      l->set_device_seconds(0.001);
      l->set_detail(std::string(2000, 'd'));
      auto* p = l->mutable_program();
      p->set_path("conv2d");
      for (int k = 0; k < 10; ++k) p->add_notes(std::string(500, 'x'));
    }
  }
  const std::string html = RunReportHtml(runs, ReportOptions{});
  EXPECT_EQ(Count(html, "<tr class=\"layer"), 300u);  // one section: the two modes side by side
  EXPECT_EQ(Count(html, "<tr class=\"layer fail\""), 1u);
  EXPECT_EQ(Count(html, "<svg class=\"chart pcc\""), 1u);
  EXPECT_EQ(Count(html, "<svg class=\"chart error\""), 1u);
  // Per layer: name, detail and 4 notes cut at kMaxHtmlText, the cells, the chart points.
  EXPECT_LT(html.size(), 300u * 1536u + 16384u) << html.size();
  std::printf("300 layers x 2 modes: %zu bytes\n", html.size());
  EXPECT_EQ(html.find("<script"), std::string::npos);
  for (const char* fetch : {"src=", "href=", "url(", "@import"}) EXPECT_EQ(html.find(fetch), std::string::npos) << fetch;
}

TEST(RunReportHtml, EscapesModelText) {
  std::vector<RunConfiguration> runs(1);
  auto* l = runs[0].response.add_layers();
  l->set_name("<img src=x onerror=alert(1)>");
  const std::string html = RunReportHtml(runs, ReportOptions{});
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;img src=x onerror=alert(1)&gt;"), std::string::npos);
}

}  // namespace
}  // namespace kiln::cli
