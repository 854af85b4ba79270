// The umbrella header: #include <snug/snug.h>
#pragma once
#include "core/error.h"
#include "core/device.h"
#include "memory/allocator.h"
