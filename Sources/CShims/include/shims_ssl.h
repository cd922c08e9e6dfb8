#ifndef SHIMS_SSL_H
#define SHIMS_SSL_H
// Shims for OpenSSL 3 (see CShims.h): variadic calls and function-like macros Swift cannot import.
#include <openssl/evp.h>
#include <openssl/bio.h>

/// `EVP_EC_gen("P-256")` (a macro over the variadic `EVP_PKEY_Q_keygen`): a fresh prime256v1
/// key pair, or NULL on failure. The caller owns the result (`EVP_PKEY_free`).
EVP_PKEY *cshim_evp_ec_gen(const char *curve);

/// `EVP_RSA_gen(bits)` (a macro over the variadic `EVP_PKEY_Q_keygen`): a fresh RSA key pair
/// with public exponent 65537, or NULL on failure. The caller owns the result.
EVP_PKEY *cshim_evp_rsa_gen(unsigned int bits);

/// `BIO_get_mem_data(bio, &data)` (a macro over `BIO_ctrl`): the bytes written so far into a
/// memory BIO; `*data` stays owned by the BIO. Returns the length in bytes.
long cshim_bio_get_mem_data(BIO *bio, char **data);
#endif
