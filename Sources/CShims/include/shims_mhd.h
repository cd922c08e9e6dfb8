#ifndef SHIMS_MHD_H
#define SHIMS_MHD_H
// Shims for libmicrohttpd (see CShims.h): the variadic MHD_start_daemon and
// MHD_get_connection_info cannot be called from Swift, and binding the listening socket
// ourselves gives precise bind errors (errno) and the ephemeral port.
#include <stddef.h>
#include <stdint.h>
#include <microhttpd.h>

/// Creates a TCP IPv4 listening socket bound to `host` (dotted quad or a name resolved with
/// getaddrinfo(AF_INET), e.g. "localhost") and `port` (0 = ephemeral), SO_REUSEADDR set,
/// non-blocking, close-on-exec, listening with `backlog`.
/// Returns the file descriptor, or -1 with `*error_out` set to an errno value, or to
/// -(getaddrinfo error) when the name does not resolve. `*bound_port_out` receives the port.
int lr_mhd_listen_ipv4(const char *host, int port, int backlog, int *bound_port_out, int *error_out);

/// Message text for a negative `lr_mhd_listen_ipv4` error (getaddrinfo's gai_strerror).
const char *lr_mhd_gai_strerror(int negative_error);

/// The callbacks of a daemon started by `lr_mhd_start`; every one gets `cls` as its first
/// argument. `notify_fn(cls, connection, socket_context, started)` is called with `started` = 1
/// when a connection opens and 0 when it closes (before its socket is closed). Every message
/// libmicrohttpd logs is formatted (≤ 1023 bytes, trailing newline removed) and handed to
/// `log_fn(cls, message)`.
struct lr_mhd_callbacks {
    MHD_AccessHandlerCallback access_handler;
    MHD_RequestCompletedCallback completed;
    void *(*uri_log)(void *cls, const char *uri, struct MHD_Connection *connection);
    void (*notify_fn)(void *cls, struct MHD_Connection *connection, void **socket_context, int started);
    void (*log_fn)(void *cls, const char *message);
    void *cls;
};

/// Starts a daemon on the already-listening `listen_fd`: one internal polling thread on epoll,
/// suspend/resume allowed (handlers run elsewhere), inter-thread communication (needed by
/// MHD_quiesce_daemon) and error logging; at most `connection_limit` connections in all and
/// `per_address_limit` per client address (0 = no per-address limit; beyond either,
/// libmicrohttpd closes the new connection at once), an idle `connection_timeout_seconds`,
/// and `callbacks` (copied; the pointer need not outlive the call). `*log_state_out` receives
/// state to free with `lr_mhd_free_log_state` after MHD_stop_daemon. Returns NULL on failure
/// (nothing to free then).
struct MHD_Daemon *lr_mhd_start(int listen_fd, unsigned int connection_limit, unsigned int per_address_limit,
                                unsigned int connection_timeout_seconds, const struct lr_mhd_callbacks *callbacks,
                                void **log_state_out);

/// Frees the logging state `lr_mhd_start` returned through `log_state_out`; call only after
/// MHD_stop_daemon returned (no more log calls can happen).
void lr_mhd_free_log_state(void *log_state);

/// Writes the client's numeric address ("127.0.0.1" or an IPv6 literal) into `buffer`.
/// Returns 0 on success, -1 when unknown.
int lr_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t buffer_size);

/// The `*socket_context` stored by the connection-notification callback; NULL when none.
void *lr_mhd_socket_context(struct MHD_Connection *connection);

/// The connection's socket descriptor, -1 when unknown.
int lr_mhd_connection_fd(struct MHD_Connection *connection);

/// Bytes the kernel has received on TCP socket `fd` so far (Linux TCP_INFO
/// `tcpi_bytes_received`) into `*out`. Returns 0 on success, -1 with errno set otherwise.
int lr_tcp_bytes_received(int fd, unsigned long long *out);
#endif
