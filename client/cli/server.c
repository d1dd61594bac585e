/* server.c: the commands about the server: ping, info (whole, or one section), save (waiting
 * for the snapshot), flush. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "cli.h"
#include "frame.h"
#include "size.h"

int gkv_cli_ping(gkv_client_t *c, const gkv_cli_args_t *a)
{
    (void)a;
    int rc = gkv_ping(c);
    if (rc)
        return gkv_cli_fail(c, "ping", rc);
    puts("PONG");
    return EXIT_OKAY;
}

/* A section's name for comparing: lower case, without spaces, '_' or '-' ("Host copies",
 * "host-copies" and "host_copies" are one). */
static void section_key(const char *name, size_t n, char *key, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        if (name[i] != ' ' && name[i] != '_' && name[i] != '-')
            key[k++] = (char)tolower((unsigned char)name[i]);
    key[k] = 0;
}

/* INFO's text, or one section of it ("# Memory" for "memory", as redis-cli's `info memory`).
 * An unknown section is a usage error that lists the sections there are. */
static int print_section(const char *text, const char *want)
{
    char wkey[64], key[64], names[512] = "";
    section_key(want, strlen(want), wkey, sizeof(wkey));
    if (strcmp(wkey, "all") == 0 || strcmp(wkey, "everything") == 0 || !wkey[0]) {
        fputs(text, stdout);
        return EXIT_OKAY;
    }
    bool found = false, on = false;
    for (const char *l = text; *l;) {
        size_t n = strcspn(l, "\n");
        if (l[0] == '#') {
            size_t h = n > 2 && l[n - 1] == '\r' ? n - 1 : n;
            section_key(l + 2, h > 2 ? h - 2 : 0, key, sizeof(key));
            on = strcmp(key, wkey) == 0;
            found |= on;
            size_t len = strlen(names);
            snprintf(names + len, sizeof(names) - len, "%s%.*s", len ? ", " : "",
                     (int)(h > 2 ? h - 2 : 0), l + 2);
        }
        if (on)
            fwrite(l, 1, n + (l[n] == '\n'), stdout);
        l += n + (l[n] == '\n');
    }
    if (!found) {
        fprintf(stderr, "gpukv info: no section '%s'; the server's sections: %s\n", want, names);
        return EXIT_USAGE;
    }
    return EXIT_OKAY;
}

int gkv_cli_info(gkv_client_t *c, const gkv_cli_args_t *a)
{
    char *text;
    int rc = a->prometheus ? gkv_metrics(c, &text) : gkv_info(c, &text);
    if (rc)
        return gkv_cli_fail(c, "info", rc);
    int ex = EXIT_OKAY;
    if (a->noperands && !a->prometheus)
        ex = print_section(text, a->operands[0]);
    else
        fputs(text, stdout);
    gkv_free(text);
    return ex;
}

int gkv_cli_cluster(gkv_client_t *c, const gkv_cli_args_t *a)
{
    (void)a;
    char *text;
    int rc = gkv_info(c, &text);
    if (rc)
        return gkv_cli_fail(c, "cluster", rc);
    int ex = print_section(text, "cluster");
    gkv_free(text);
    return ex;
}

/* The value of INFO's "name:" line into buf (cap bytes); false when there is none. */
static bool info_field(const char *text, const char *name, char *buf, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\n%s:", name);
    const char *p = strstr(text, pat);
    if (!p)
        return false;
    p += strlen(pat);
    size_t n = strcspn(p, "\r\n");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return true;
}

int gkv_cli_save(gkv_client_t *c, const gkv_cli_args_t *a)
{
    int rc = gkv_save(c);
    if (rc)
        return gkv_cli_fail(c, "save", rc);
    if (!a->wait) {
        puts("saving");
        return EXIT_OKAY;
    }
    for (;;) {
        char *text, saving[8] = "", status[8] = "", file[160] = "", keys[32] = "", bytes[32] = "",
                    err[200] = "";
        if ((rc = gkv_info(c, &text)))
            return gkv_cli_fail(c, "save", rc);
        bool found = info_field(text, "saving", saving, sizeof(saving));
        info_field(text, "last_save_status", status, sizeof(status));
        info_field(text, "last_save_file", file, sizeof(file));
        info_field(text, "last_save_keys", keys, sizeof(keys));
        info_field(text, "last_save_bytes", bytes, sizeof(bytes));
        info_field(text, "last_save_error", err, sizeof(err));
        gkv_free(text);
        if (!found) {
            fprintf(stderr, "gpukv save: the server's INFO has no # Persistence\n");
            return EXIT_SERVER;
        }
        if (strcmp(saving, "0") == 0) {
            if (strcmp(status, "ok") != 0) {
                fprintf(stderr, "gpukv save: failed: %s\n", err);
                return EXIT_SERVER;
            }
            printf("saved %s: %s keys, %s bytes\n", file, keys, bytes);
            return EXIT_OKAY;
        }
        usleep(100 * 1000);
    }
}

int gkv_cli_flush(gkv_client_t *c, const gkv_cli_args_t *a)
{
    (void)a;
    int rc = gkv_flush(c);
    if (rc)
        return gkv_cli_fail(c, "flush", rc);
    puts("OK");
    return EXIT_OKAY;
}
