#ifndef SHIMS_SSL_H
#define SHIMS_SSL_H
// Shims for ssl (see CShims.h).
#endif
