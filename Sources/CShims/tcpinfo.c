// TCP_INFO from the kernel's own header (glibc's <netinet/tcp.h> lacks tcpi_bytes_received);
// kept apart from the other shims so the two tcp.h headers never meet.
#include <stddef.h>
#include <sys/socket.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <string.h>

int lr_tcp_bytes_received(int fd, unsigned long long *out) {
    struct tcp_info info;
    socklen_t len = sizeof info;
    memset(&info, 0, sizeof info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return -1;
    if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received) return -1;
    *out = (unsigned long long)info.tcpi_bytes_received;
    return 0;
}
