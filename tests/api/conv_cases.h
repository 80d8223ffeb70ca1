// The bytes of a model in tests/data/onnx/conv-cases (KILN_TEST_DATA/conv-cases), for the api
// tests; empty when the file is missing (the test's load then fails and names it).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace kiln::api::testing {

inline std::string ReadCase(const std::string& name) {
  std::ifstream in(std::string(KILN_TEST_DATA) + "/conv-cases/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kiln::api::testing
