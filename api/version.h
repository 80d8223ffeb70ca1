// Kiln's version (the CMake project version), the one string kilnd, kiln and every response
// report (kiln_version fields, kiln_build_info{version}).
#pragma once

namespace kiln::api {

const char* KilnVersion();

}  // namespace kiln::api
