#include "shims_pq.h"
#include <libpq-fe.h>
#include <postgres_ext.h>
int cshim_pg_diag_sqlstate(void) { return PG_DIAG_SQLSTATE; }
int cshim_pg_diag_constraint_name(void) { return PG_DIAG_CONSTRAINT_NAME; }
int cshim_pg_diag_message_primary(void) { return PG_DIAG_MESSAGE_PRIMARY; }
