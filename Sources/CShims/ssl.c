#include "shims_ssl.h"
