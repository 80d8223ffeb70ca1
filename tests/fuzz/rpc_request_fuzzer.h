// What rpc_request_fuzzer.cc exposes besides LLVMFuzzerTestOneInput (for rpc_fuzz_replay).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

// Full names of the fuzzed request messages, in dispatch order: input byte 0 (mod 16) picks one,
// indexes past the end go to the first (kiln.v1.RunConvLayersRequest).
std::vector<std::string> KilnFuzzedRequestMessages();

// How many inputs each of the 16 dispatch indexes received in this process.
extern std::vector<uint64_t> g_kiln_fuzz_row_inputs;
