#include "api/version.h"

namespace kiln::api {

const char* KilnVersion() { return KILN_VERSION; }

}  // namespace kiln::api
