#ifndef SHIMS_MHD_H
#define SHIMS_MHD_H
// Shims for mhd (see CShims.h).
#endif
