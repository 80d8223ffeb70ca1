// kilnd's database URL (server/config.h Config::database_url): from
// --database-url-file or KILN_DATABASE, never a flag of its own, never echoed in errors. And the
// --devices check at parse time, and the sources' precedence.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "server/config.h"

namespace kiln::server {
namespace {

Result<Config> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "kilnd");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return LoadConfig(static_cast<int>(argv.size()), argv.data());
}

class DatabaseConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("KILN_DATABASE");
    ::unsetenv("KILN_DATABASE_URL_FILE");
    file_ = std::filesystem::temp_directory_path() / ("kiln-db-url-" + std::to_string(::getpid()));
  }
  void TearDown() override {
    ::unsetenv("KILN_DATABASE");
    std::filesystem::remove(file_);
  }
  void Write(const std::string& text) { std::ofstream(file_) << text; }
  std::filesystem::path file_;
};

// --devices is checked with the other flags (exit 2, before the data directory is made): the
// scheduler's list syntax and the built-in backends' names.
TEST_F(DatabaseConfigTest, DevicesNameBuiltInBackends) {
  auto ok = Load({"--devices", "tt-emu:2,reference:1"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->devices, "tt-emu:2,reference:1");
  auto gpu = Load({"--devices", "gpu:1"});
  EXPECT_EQ(gpu.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gpu.status().message().find("--devices: unknown backend 'gpu' (known: "), std::string::npos)
      << gpu.status().ToString();
  auto zero = Load({"--devices", "tt-emu:0"});
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("must be in 1..256"), std::string::npos) << zero.status().ToString();
}

// README: flags, then KILN_* variables, then the YAML file, "in that precedence". Only the value
// that wins must be valid: a stale KILN_LISTEN or a bad file key under a flag does not stop kilnd;
// where it wins, it does, named.
TEST_F(DatabaseConfigTest, OnlyTheWinningSourceMustBeValid) {
  const auto yaml = std::filesystem::temp_directory_path() / ("kiln-config-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(yaml) << "listen: bad\nlog_level: info\n";
  ::setenv("KILN_LISTEN", "also-bad", 1);
  ::setenv("KILN_LOG_LEVEL", "loud", 1);
  auto c = Load({"--config", yaml.string(), "--listen", "127.0.0.1:7", "--log-level", "warn"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen, "127.0.0.1:7");
  EXPECT_EQ(c->log_level, "warn");
  // The environment wins over the file, and its bad value is refused.
  auto env = Load({"--config", yaml.string(), "--listen", "127.0.0.1:7"});
  EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(env.status().message().find("environment KILN_LOG_LEVEL: "), std::string::npos) << env.status().ToString();
  ::unsetenv("KILN_LISTEN");
  ::unsetenv("KILN_LOG_LEVEL");
  // The file wins where nothing else is given.
  auto file = Load({"--config", yaml.string()});
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(file.status().message().find("config file " + yaml.string() + ": listen: "), std::string::npos)
      << file.status().ToString();
  // An empty (null) file entry is only refused where it wins.
  std::ofstream(yaml) << "metrics_listen:\n";
  auto null_over = Load({"--config", yaml.string(), "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(null_over.ok()) << null_over.status().ToString();
  auto null_wins = Load({"--config", yaml.string()});
  EXPECT_NE(null_wins.status().message().find(": metrics_listen: must be a scalar"), std::string::npos)
      << null_wins.status().ToString();
  std::filesystem::remove(yaml);
}

// --token and --token-file set one field: the higher source wins across the two settings, as it
// does within one (a flag over a token file named in the environment or the file, the environment
// over the file).
TEST_F(DatabaseConfigTest, TokenFromTheHigherSourceAcrossTokenAndTokenFile) {
  const auto token_file = std::filesystem::temp_directory_path() / ("kiln-token-" + std::to_string(::getpid()));
  const auto yaml = std::filesystem::temp_directory_path() / ("kiln-token-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(token_file) << "FILETOKEN\n";
  std::ofstream(yaml) << "token_file: " << token_file.string() << "\n";
  ::setenv("KILN_TOKEN_FILE", token_file.c_str(), 1);
  auto flag = Load({"--token", "FLAGTOKEN"});
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  EXPECT_EQ(flag->token, "FLAGTOKEN");
  ::unsetenv("KILN_TOKEN_FILE");
  ::setenv("KILN_TOKEN", "ENVTOKEN", 1);
  auto env = Load({"--config", yaml.string()});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->token, "ENVTOKEN");
  ::unsetenv("KILN_TOKEN");
  auto file = Load({"--config", yaml.string()});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->token, "FILETOKEN");
  std::filesystem::remove(token_file);
  std::filesystem::remove(yaml);
}

TEST_F(DatabaseConfigTest, EmbeddedWithoutADatabase) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->database_url, "");
}

TEST_F(DatabaseConfigTest, UrlFromAFileWithoutItsTrailingNewline) {
  Write("postgresql://kiln:pw@db:5432/kiln?sslmode=verify-full\n");
  auto c = Load({"--database-url-file", file_.string()});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->database_url, "postgresql://kiln:pw@db:5432/kiln?sslmode=verify-full");
}

TEST_F(DatabaseConfigTest, UrlFromTheEnvironment) {
  ::setenv("KILN_DATABASE", "postgres://db/kiln", 1);
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->database_url, "postgres://db/kiln");
}

TEST_F(DatabaseConfigTest, RefusesBothSourcesBadUrlsAndAUrlFlag) {
  Write("postgresql://kiln:topsecret@db/kiln");
  ::setenv("KILN_DATABASE", "postgresql://db/kiln", 1);
  EXPECT_EQ(Load({"--database-url-file", file_.string()}).status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("KILN_DATABASE");
  Write("mysql://kiln:topsecret@db/kiln");
  auto bad = Load({"--database-url-file", file_.string()});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().find("topsecret"), std::string::npos) << bad.status().message();
  Write("");
  EXPECT_EQ(Load({"--database-url-file", file_.string()}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Load({"--database-url-file", "/nonexistent/url"}).status().code(), StatusCode::kInvalidArgument);
  // There is no flag that takes the URL itself.
  EXPECT_EQ(Load({"--database", "postgresql://db/kiln"}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::server
