// Umbrella header of the C shim target: one header per wrapped library, so each wrapper
// target owns its own file. Holds only wrappers for macros and variadic calls that Swift
// cannot import (ARCHITECTURE.md, "C interop facts").
#ifndef CSHIMS_H
#define CSHIMS_H
#include "shims_pq.h"
#include "shims_ssl.h"
#include "shims_mhd.h"
#include "shims_nghttp2.h"
#endif
