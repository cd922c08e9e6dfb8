#ifndef SHIMS_PQ_H
#define SHIMS_PQ_H
// Shims for libpq (see CShims.h).
/// libpq's `PG_DIAG_SQLSTATE` is a char macro ('C'); Swift cannot import it.
int cshim_pg_diag_sqlstate(void);
/// libpq's `PG_DIAG_CONSTRAINT_NAME` char macro ('n'): the violated constraint's name.
int cshim_pg_diag_constraint_name(void);
/// libpq's `PG_DIAG_MESSAGE_PRIMARY` char macro ('M'): the one-line primary message.
int cshim_pg_diag_message_primary(void);
#endif
