#ifndef SHIMS_NGHTTP2_H
#define SHIMS_NGHTTP2_H
// Shims for the HTTP2 module (see CShims.h): OpenSSL function-like macros used for HTTP/2 over
// TLS that Swift cannot import. Prefixed `cshim_tls_` (ssl.c holds the Crypto module's shims).
#include <openssl/ssl.h>

/// `SSL_set_tlsext_host_name(ssl, name)`: sets the SNI host name (RFC 6066 §3) sent in the
/// ClientHello. Returns 1 on success, 0 on failure.
int cshim_tls_set_host_name(SSL *ssl, const char *name);

/// `SSL_CTX_set_min_proto_version(ctx, version)`, e.g. `TLS1_2_VERSION`. Returns 1 on success.
int cshim_tls_ctx_set_min_proto_version(SSL_CTX *ctx, int version);

/// `SSL_CTX_set_mode(ctx, mode)`: ORs `mode` (e.g. `SSL_MODE_ENABLE_PARTIAL_WRITE`) into the
/// context's mode bits; returns the new mode bits.
long cshim_tls_ctx_set_mode(SSL_CTX *ctx, long mode);

/// `SSL_CTX_add1_chain_cert(ctx, x509)`: appends an intermediate certificate to the chain the
/// server sends (the context takes its own reference). Returns 1 on success.
int cshim_tls_ctx_add1_chain_cert(SSL_CTX *ctx, X509 *x509);
#endif
