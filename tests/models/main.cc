// models_test main: gtest, plus `--regenerate` which records every observed status and rewrites
// the expected-status tables (tests/models/status_table.h) when the run ends.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/models/status_table.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--regenerate") == 0) kiln::models::SetRegenerating(true);
  }
  const int rc = RUN_ALL_TESTS();
  if (kiln::models::Regenerating()) {
    kiln::Status s = kiln::models::WriteRecordedTables();
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  return rc;
}
