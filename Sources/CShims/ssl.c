#include "shims_ssl.h"
#include <openssl/ec.h>
#include <openssl/rsa.h>

EVP_PKEY *cshim_evp_ec_gen(const char *curve) { return EVP_EC_gen(curve); }
EVP_PKEY *cshim_evp_rsa_gen(unsigned int bits) { return EVP_RSA_gen(bits); }
long cshim_bio_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
