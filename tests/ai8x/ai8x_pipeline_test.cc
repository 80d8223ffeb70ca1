// The ai8x pipeline and rule registry against the documents that describe them: the README's pass
// table is the pipeline, every diagnostic code is decided by exactly the one rule file codes.h
// names, and docs/ai8x-diagnostics.md lists every registered code and no other.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "compiler/ai8x/codes.h"
#include "compiler/ai8x/pipeline.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = KILN_SOURCE_DIR;

std::string ReadFile(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// compiler/ai8x sources by path relative to compiler/ai8x ("rules/pad.cc").
std::map<std::string, std::string> Sources() {
  std::map<std::string, std::string> out;
  const fs::path dir = kRoot / "compiler/ai8x";
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cc" && ext != ".h") continue;
    out[fs::relative(e.path(), dir).generic_string()] = ReadFile(e.path());
  }
  return out;
}

TEST(Ai8xPipeline, ReadmeTableIsThePipeline) {
  const std::string readme = ReadFile(kRoot / "compiler/ai8x/README.md");
  const std::string begin = "<!-- pass table: PipelineMarkdownTable() -->\n";
  const std::string end = "<!-- end of pass table -->";
  size_t b = readme.find(begin);
  size_t e = readme.find(end);
  ASSERT_NE(b, std::string::npos) << "README has no generated pass table";
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(readme.substr(b + begin.size(), e - b - begin.size()), PipelineMarkdownTable())
      << "regenerate with: ai8x_compile_tool --print-pipeline";
}

TEST(Ai8xPipeline, PassNamesAreUniqueAndRunnableByName) {
  std::set<std::string_view> names;
  for (const Pass& p : Ai8xPipeline()) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_TRUE(fs::exists(kRoot / "compiler/ai8x" / p.file)) << p.file;
  }
  EXPECT_EQ(Ai8xPipeline().front().name, "BuildLayers");
  EXPECT_EQ(Ai8xPipeline().back().name, "Report");
  Network net;
  Ai8xOptions o;
  EXPECT_EQ(RunPasses(net, o, "NoSuchPass", "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RunPasses(net, o, "PlanDataMemory", "FuseActivation").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(RunPasses(net, o, "FuseActivation", "PlanDataMemory").ok());
}

TEST(Ai8xRuleRegistry, EachCodeIsDecidedByExactlyItsRuleFile) {
  const std::map<std::string, std::string> sources = Sources();
  std::set<std::string_view> codes;
  for (const DiagnosticCode& c : kDiagnosticCodes) {
    EXPECT_TRUE(codes.insert(c.code).second) << "duplicate code " << c.code;
    EXPECT_EQ(c.file.substr(0, 6), "rules/") << c.code;
    const std::regex use("\\bcode::" + std::string(c.constant) + "\\b");
    std::vector<std::string> users;
    for (const auto& [path, text] : sources) {
      if (path != "codes.h" && std::regex_search(text, use)) users.push_back(path);
    }
    EXPECT_EQ(users, std::vector<std::string>{std::string(c.file)}) << c.code << " (code::" << c.constant << ")";
  }
  // No code as a string literal outside codes.h.
  for (const auto& [path, text] : sources) {
    if (path == "codes.h") continue;
    EXPECT_EQ(text.find("\"AI8X_"), std::string::npos) << path << " spells a code as a literal";
  }
  // Every registered check lives in a rule file.
  for (const rules::Rule& r : rules::Registry()) {
    EXPECT_TRUE(sources.count(std::string(r.file))) << r.name << ": " << r.file;
  }
}

TEST(Ai8xRuleRegistry, CatalogueListsEveryCodeAndNoOther) {
  const std::string doc = ReadFile(kRoot / "docs/ai8x-diagnostics.md");
  std::multiset<std::string> listed;
  const std::regex row("^\\| (AI8X_[A-Z0-9_]+) \\[");
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) listed.insert(m[1]);
  }
  std::multiset<std::string> registered;
  for (const DiagnosticCode& c : kDiagnosticCodes) registered.insert(std::string(c.code));
  EXPECT_EQ(listed, registered);
}

}  // namespace
}  // namespace kiln::ai8x
