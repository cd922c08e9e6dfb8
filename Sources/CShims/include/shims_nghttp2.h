#ifndef SHIMS_NGHTTP2_H
#define SHIMS_NGHTTP2_H
// Shims for nghttp2 (see CShims.h).
#endif
