#include "shims_mhd.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int lr_mhd_listen_ipv4(const char *host, int port, int backlog, int *bound_port_out, int *error_out) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(host, NULL, &hints, &res);
        if (rc != 0 || res == NULL) { *error_out = -(rc != 0 ? rc : EAI_NONAME); return -1; }
        addr.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { *error_out = errno; return -1; }
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, backlog) != 0) {
        *error_out = errno;
        close(fd);
        return -1;
    }
    struct sockaddr_in bound;
    socklen_t len = sizeof bound;
    if (getsockname(fd, (struct sockaddr *)&bound, &len) != 0) {
        *error_out = errno;
        close(fd);
        return -1;
    }
    *bound_port_out = ntohs(bound.sin_port);
    *error_out = 0;
    return fd;
}

const char *lr_mhd_gai_strerror(int negative_error) { return gai_strerror(-negative_error); }

struct lr_log_target { void (*fn)(void *, const char *); void *cls; };

static void lr_mhd_logger(void *cls, const char *fm, va_list ap) {
    struct lr_log_target *target = cls;
    if (target == NULL || target->fn == NULL) return;
    char message[1024];
    vsnprintf(message, sizeof message, fm, ap);
    size_t n = strlen(message);
    while (n > 0 && (message[n - 1] == '\n' || message[n - 1] == '\r')) message[--n] = '\0';
    target->fn(target->cls, message);
}

struct lr_notify_target { void (*fn)(void *, struct MHD_Connection *, void **, int); void *cls; };

struct lr_daemon_state { struct lr_log_target log; struct lr_notify_target notify; };

static void lr_mhd_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    struct lr_notify_target *target = cls;
    if (target == NULL || target->fn == NULL) return;
    target->fn(target->cls, connection, socket_context, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : 0);
}

struct MHD_Daemon *lr_mhd_start(int listen_fd, unsigned int connection_limit, unsigned int per_address_limit,
                                unsigned int connection_timeout_seconds, const struct lr_mhd_callbacks *callbacks,
                                void **log_state_out) {
    *log_state_out = NULL;
    struct lr_daemon_state *state = malloc(sizeof *state);
    if (state == NULL) return NULL;
    state->log.fn = callbacks->log_fn;
    state->log.cls = callbacks->cls;
    state->notify.fn = callbacks->notify_fn;
    state->notify.cls = callbacks->cls;
    // One internal polling thread on epoll owns every socket (idle connections cost no
    // thread); requests are suspended while a handler runs on the caller's worker pool and
    // resumed with its response (MHD_suspend_connection / MHD_resume_connection).
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME
                       | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    struct MHD_Daemon *daemon = MHD_start_daemon(flags, 0, NULL, NULL, callbacks->access_handler, callbacks->cls,
                            // The logger must come first, or early messages go to stderr.
                            MHD_OPTION_EXTERNAL_LOGGER, lr_mhd_logger, (void *)&state->log,
                            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
                            MHD_OPTION_NOTIFY_COMPLETED, callbacks->completed, callbacks->cls,
                            MHD_OPTION_NOTIFY_CONNECTION, lr_mhd_notify, (void *)&state->notify,
                            MHD_OPTION_URI_LOG_CALLBACK, callbacks->uri_log, callbacks->cls,
                            MHD_OPTION_END);
    if (daemon == NULL) free(state);
    else *log_state_out = state;
    return daemon;
}

void lr_mhd_free_log_state(void *log_state) { free(log_state); }

int lr_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t buffer_size) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL || buffer_size == 0) return -1;
    const struct sockaddr *sa = info->client_addr;
    const void *src;
    if (sa->sa_family == AF_INET) src = &((const struct sockaddr_in *)sa)->sin_addr;
    else if (sa->sa_family == AF_INET6) src = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    else return -1;
    return inet_ntop(sa->sa_family, src, buffer, (socklen_t)buffer_size) != NULL ? 0 : -1;
}

void *lr_mhd_socket_context(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? NULL : info->socket_context;
}

int lr_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : (int)info->connect_fd;
}
