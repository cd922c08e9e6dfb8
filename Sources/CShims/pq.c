#include "shims_pq.h"
#include <libpq-fe.h>
#include <postgres_ext.h>
int cshim_pg_diag_sqlstate(void) { return PG_DIAG_SQLSTATE; }
