// Bit-exact golden-vector tests (docs/specs/tt-numerics.md §10-§11): one test per vector file; a failure
// prints the first mismatching case in hex.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "device/numerics/vectors.h"

namespace kiln::numerics {
namespace {

const std::string kDir = std::string(KILN_TEST_DATA) + "/tt-vectors";

void ExpectFileBitExact(const std::string& name, size_t expected_lines) {
  auto rep = CheckVectorFile(kDir + "/" + name);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->failed, 0u) << name << ": " << rep->failed << " failed; first failure: " << rep->first_failure;
  EXPECT_EQ(rep->passed, expected_lines) << name;
}

// Line counts from tests/data/tt-vectors/README.md ("Counts (shared ...)").
TEST(TtVectors, Fp32ToBf16) { ExpectFileBitExact("fp32_to_bf16.jsonl", 2993); }
TEST(TtVectors, BfpPack) { ExpectFileBitExact("bfp_pack.jsonl", 600); }
TEST(TtVectors, UnpackBfp) { ExpectFileBitExact("unpack_bfp.jsonl", 589); }
TEST(TtVectors, Mvmul) { ExpectFileBitExact("mvmul.jsonl", 1354); }
TEST(TtVectors, Kacc32) { ExpectFileBitExact("kacc32.jsonl", 48); }
TEST(TtVectors, Elwadd) { ExpectFileBitExact("elwadd.jsonl", 1200); }
TEST(TtVectors, L1Acc) { ExpectFileBitExact("l1acc.jsonl", 2000); }

TEST(RunVectorDirectory, SharedVectorsAllPass) {
  std::ostringstream out;
  int rc = RunVectorDirectory(kDir, out);
  EXPECT_EQ(rc, 0) << out.str();
  EXPECT_NE(out.str().find("mvmul.jsonl: 1354 passed, 0 failed\n"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("l1acc.jsonl: 2000 passed, 0 failed\n"), std::string::npos) << out.str();
  // One line per file, nothing else when everything passes.
  size_t lines = 0;
  for (char c : out.str()) lines += c == '\n';
  EXPECT_EQ(lines, 7u) << out.str();
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_vectors_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
             std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

TEST(RunVectorDirectory, CorruptedCopyReportsFirstFailureInHex) {
  TempDir tmp;
  // A renamed copy of l1acc.jsonl with line 10's result flipped in its last hex digit, plus a
  // good copy of unpack_bfp.jsonl: kinds are recognised from fields, not file names.
  std::ifstream in(kDir + "/l1acc.jsonl");
  ASSERT_TRUE(in);
  std::ofstream bad(tmp.path() / "a_corrupt.jsonl");
  std::string line, corrupted_line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 10 || n == 12) {
      size_t p = line.rfind("\"out\":\"");
      ASSERT_NE(p, std::string::npos);
      size_t last = line.find('"', p + 7) - 1;
      line[last] = line[last] == '0' ? '1' : '0';
      if (n == 10) corrupted_line = line;
    }
    bad << line << "\n";
  }
  bad.close();
  std::filesystem::copy_file(kDir + "/unpack_bfp.jsonl", tmp.path() / "b_good.jsonl");
  std::ostringstream out;
  int rc = RunVectorDirectory(tmp.path().string(), out);
  EXPECT_EQ(rc, 1);
  const std::string s = out.str();
  EXPECT_NE(s.find("a_corrupt.jsonl: 1998 passed, 2 failed\n"), std::string::npos) << s;
  EXPECT_NE(s.find("  first failure: line 10: field out: expected "), std::string::npos) << s;
  EXPECT_NE(s.find("input: fmt=\"fp32\" old=\"3e4f65f7\" new=\"3f01981b\""), std::string::npos) << s;
  EXPECT_NE(s.find("b_good.jsonl: 589 passed, 0 failed\n"), std::string::npos) << s;
}

TEST(RunVectorDirectory, MalformedLineAndMissingDirFail) {
  TempDir tmp;
  {
    std::ofstream f(tmp.path() / "x.jsonl");
    f << "{\"fmt\":\"fp32\",\"old\":\"3f800000\",\"new\":\"3f800000\",\"out\":\"40000000\"}\n";
    f << "{\"fmt\":\"fp32\",\"old\":\n";
    f << "{\"mystery\":1}\n";
  }
  std::ostringstream out;
  EXPECT_EQ(RunVectorDirectory(tmp.path().string(), out), 1);
  EXPECT_NE(out.str().find("x.jsonl: 1 passed, 2 failed\n"), std::string::npos) << out.str();
  std::ostringstream out2;
  EXPECT_EQ(RunVectorDirectory((tmp.path() / "nope").string(), out2), 1);
  EXPECT_NE(out2.str().find("cannot read directory"), std::string::npos) << out2.str();
}

// Reader edge cases (the line reader is nlohmann::json): every malformed or suspicious line is one
// failed case, never an exception or an abort; well-formed lines still pass around them.
TEST(CheckVectorFile, MalformedLinesCountAsFailures) {
  TempDir tmp;
  const std::string good = "{\"fmt\":\"fp32\",\"old\":\"3f800000\",\"new\":\"3f800000\",\"out\":\"40000000\"}";
  std::string deep = "{\"fmt\":\"fp32\",\"old\":\"3f800000\",\"new\":\"3f800000\",\"out\":\"40000000\",\"id\":";
  deep += std::string(65, '[') + "1" + std::string(65, ']') + "}";
  std::string shallow = "{\"fmt\":\"fp32\",\"old\":\"3f800000\",\"new\":\"3f800000\",\"out\":\"40000000\",\"id\":";
  shallow += std::string(63, '[') + "1" + std::string(63, ']') + "}";
  {
    std::ofstream f(tmp.path() / "x.jsonl");
    f << "\xEF\xBB\xBF" << good << "\n";  // byte order mark: not JSON Lines
    f << good << "\r\n";  // CRLF is fine
    f << "   \n";  // blank: not a case
    f << "{\"fmt\":\"fp32\",\"old\":\n";  // truncated
    f << "[1,2]\n";  // not an object
    f << "{\"fmt\":\"bfp8_b\",\"code\":\"00\",\"exp\":1e400,\"unpack_bf16\":\"0000\"}\n";  // number beyond double range
    f << "{\"fmt\":\"fp32\",\"old\":\"3f800000\",\"new\":\"3f800000\",\"out\":\"40000000\",\"extra\":1}\n";
    f << deep << "\n";  // a value 65 levels deep
    f << shallow << "\n";  // 64 levels deep: fine
    f << "{\"fmt\":\"bfp8_b\",\"code\":\"80\",\"exp\":0,\"unpack_bf16\":\"ff80\",\"id\":\"\\u00e9\"}\n";
  }
  auto rep = CheckVectorFile((tmp.path() / "x.jsonl").string());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->passed, 3u);
  EXPECT_EQ(rep->failed, 6u);
  EXPECT_EQ(rep->first_failure.rfind("line 1: JSON: ", 0), 0u) << rep->first_failure;

  // First failure of each kind, one file per line.
  auto first_failure = [&](const std::string& line) {
    std::ofstream(tmp.path() / "y.jsonl") << line << "\n";
    auto r = CheckVectorFile((tmp.path() / "y.jsonl").string());
    if (!r.ok()) return r.status().ToString();
    EXPECT_EQ(r->failed, 1u) << line;
    return r->first_failure;
  };
  EXPECT_EQ(first_failure("[1,2]"), "line 1: not a JSON object");
  EXPECT_EQ(first_failure(good.substr(0, good.size() - 1) + ",\"extra\":1}"),
            "line 1: unknown field extra; input: fmt=\"fp32\" old=\"3f800000\" new=\"3f800000\"");
  EXPECT_EQ(first_failure(deep), "line 1: JSON: nesting too deep");
  EXPECT_EQ(first_failure("{\"fmt\":\"bfp8_b\",\"code\":\"00\",\"exp\":7,\"unpack_bf16\":\"ffff\",\"id\":12}"),
            "line 1: field unpack_bf16: expected ffff, got 0000; input: id=12 fmt=\"bfp8_b\" exp=7 code=\"00\"");
}

}  // namespace
}  // namespace kiln::numerics
