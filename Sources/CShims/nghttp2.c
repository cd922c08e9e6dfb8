#include "shims_nghttp2.h"

int cshim_tls_set_host_name(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }
int cshim_tls_ctx_set_min_proto_version(SSL_CTX *ctx, int version) { return (int)SSL_CTX_set_min_proto_version(ctx, version); }
long cshim_tls_ctx_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
int cshim_tls_ctx_add1_chain_cert(SSL_CTX *ctx, X509 *x509) { return (int)SSL_CTX_add1_chain_cert(ctx, x509); }
