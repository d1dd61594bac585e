/* cli.h: the gpukv command line, parsed whole before anything connects (parse.c), then run
 * (gpukv.c). Options follow getopt_long: "--opt value" or "--opt=value", short options
 * bundled, options and operands in any order, "--" ends the options (for keys that begin with
 * '-'). Exit codes: 0 ok, 1 key not found or server error, 2 usage error, 3 cannot connect. */
#ifndef GKV_CLI_CLI_H
#define GKV_CLI_CLI_H

#include <gpukv/gpukv.h>
#include <stdbool.h>
#include <stdio.h>

enum { EXIT_OKAY = 0, EXIT_SERVER = 1, EXIT_USAGE = 2, EXIT_CONNECT = 3 };

typedef struct gkv_cli_command gkv_cli_command_t;

/* Everything the command line said. Strings borrow from argv. */
typedef struct {
    const char *url; /* -u/--url, or -s/--socket as "unix:PATH" (in sockurl); NULL */
    char sockurl[4200];
    const char *token_file; /* --token-file, checked readable */
    const gkv_cli_command_t *cmd;
    char **operands; /* the command's operands, in order */
    int noperands;
    /* Command options. */
    gkv_set_opts_t set; /* set: --nx, --xx, --meta, --ttl */
    const char *file;   /* set: -f/--file */
    const char *output; /* get: -o/--output */
    bool meta;          /* get: --meta (the metadata, not the value) */
    gkv_range_t range;  /* get, map: --offset, --length, --suffix (length 0: to the end) */
    bool longfmt, dir;  /* ls: -l/--long, -d/--dir */
    const char *prefix; /* size: -p/--prefix */
    bool yes;           /* flush: --yes */
    bool prometheus;    /* info: --prometheus */
    uint64_t ttl_ms;    /* expire: MS */
    const char *gpu;    /* set: --gpu (an ordinal or a UUID, resolved once connected) */
    bool wait;          /* save: --wait */
    uint64_t wait_ms;   /* get, map: --wait MS (0: none) */
    uint64_t after;     /* get, map: --after V (with has_after) */
    bool has_after;
    uint64_t count;     /* watch: --count N (0: no end) */
    uint64_t for_ms;    /* watch: --for MS (0: no end) */
    bool local;         /* watch: --local */
} gkv_cli_args_t;

typedef int (*gkv_cli_run_fn)(gkv_client_t *c, const gkv_cli_args_t *a);

struct gkv_cli_command {
    const char *name, *synopsis, *summary;
    int min_operands, max_operands; /* max -1: no limit */
    gkv_cli_run_fn run;
};

/* The outcome of gkv_cli_parse besides usage errors. */
enum { GKV_CLI_RUN = 0, GKV_CLI_DONE = 1 };

/* Parses argv into *a (zeroed first). Returns GKV_CLI_RUN (connect and run a->cmd),
 * GKV_CLI_DONE (--help or --version was printed to stdout: exit 0) or EXIT_USAGE, with the
 * reason written to stderr. argv is permuted (getopt_long) and borrowed by *a. */
int gkv_cli_parse(int argc, char **argv, gkv_cli_args_t *a);

/* Prints "gpukv: WHAT: error (NAME): the server's message" to stderr; returns the exit code
 * (EXIT_CONNECT or EXIT_SERVER). c may be NULL. */
int gkv_cli_fail(gkv_client_t *c, const char *what, int rc);
/* The ordinal of the GPU name gives (an ordinal, or a UUID among the server's), for cmd; -1
 * (said on stderr) when there is none such (common.c). */
int gkv_cli_gpu_ordinal(gkv_client_t *c, const char *cmd, const char *name);

/* The command runners (gpukv.c, values.c, server.c), named in parse.c's table. */
int gkv_cli_ping(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_set(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_get(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_del(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_exists(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_ls(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_size(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_map(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_info(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_cluster(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_locate(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_flush(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_expire(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_ttl(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_persist(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_move(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_save(gkv_client_t *c, const gkv_cli_args_t *a);
int gkv_cli_watch(gkv_client_t *c, const gkv_cli_args_t *a);

#endif
