/* error.c: strerror and names for the GKV_E* list, generated from the one X-macro. */
#include "error.h"

const char *gkv_strerror(int err)
{
    switch (err) {
    case GKV_OK:
        return "success";
#define GKV_ERR_TEXT(name, num, text)                                                              \
    case GKV_E##name:                                                                              \
        return text;
        GKV_ERRNO_MAP(GKV_ERR_TEXT)
#undef GKV_ERR_TEXT
    default:
        return "unknown error";
    }
}

const char *gkv_err_name(int err)
{
    switch (err) {
    case GKV_OK:
        return "OK";
#define GKV_ERR_NAME(name, num, text)                                                              \
    case GKV_E##name:                                                                              \
        return #name;
        GKV_ERRNO_MAP(GKV_ERR_NAME)
#undef GKV_ERR_NAME
    default:
        return "UNKNOWN";
    }
}
