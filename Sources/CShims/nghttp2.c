#include "shims_nghttp2.h"
