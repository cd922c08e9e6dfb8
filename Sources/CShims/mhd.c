#include "shims_mhd.h"
