// SPDX-License-Identifier: MIT
#include <snug/version.h>

namespace snug {
const char* version() { return SNUG_VERSION_STRING; }
}  // namespace snug
