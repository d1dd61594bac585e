/* common.c: what the CLI's commands share: reporting an error the way every command does, and
 * naming a GPU by ordinal or UUID. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int gkv_cli_fail(gkv_client_t *c, const char *what, int rc)
{
    const char *msg = c ? gkv_client_errmsg(c) : "";
    if (strcmp(msg, gkv_strerror(rc)) == 0)
        msg = "";
    fprintf(stderr, "gpukv: %s: %s (%s)%s%s\n", what, gkv_strerror(rc), gkv_err_name(rc),
            *msg ? ": " : "", msg);
    if (rc == GKV_ECONNECT)
        return EXIT_CONNECT;
    return EXIT_SERVER;
}

/* The daemon's ordinal of the GPU name gives (an ordinal, or a UUID of gkv_client_info's
 * list), or -1 with the reason on stderr. */
int gkv_cli_gpu_ordinal(gkv_client_t *c, const char *cmd, const char *name)
{
    const gkv_server_info_t *in = gkv_client_info(c);
    char *end;
    unsigned long n = strtoul(name, &end, 10);
    if (*name >= '0' && *name <= '9' && !*end && n < in->gpus)
        return (int)n;
    for (uint32_t i = 0; i < in->gpus; i++)
        if (strcmp(in->gpu_uuids[i], name) == 0)
            return (int)i;
    fprintf(stderr, "gpukv %s: the server has no GPU '%s' (it has %u: gpukv info lists them)\n",
            cmd, name, in->gpus);
    return -1;
}
