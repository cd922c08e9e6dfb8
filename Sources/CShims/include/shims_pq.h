#ifndef SHIMS_PQ_H
#define SHIMS_PQ_H
// Shims for libpq (see CShims.h).
/// libpq's `PG_DIAG_SQLSTATE` is a char macro ('C'); Swift cannot import it.
int cshim_pg_diag_sqlstate(void);
#endif
