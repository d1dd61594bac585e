/* parse.c: the gpukv command line: global options, the command table, each command's options
 * and operands, all checked before anything connects. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "frame.h"
#include "message.h"
#include "paths.h"
#include "size.h"
#include "version.h"

/* Long options without a short form. */
enum {
    OPT_TOKEN_FILE = 256,
    OPT_VERSION,
    OPT_NX,
    OPT_XX,
    OPT_META,
    OPT_OFFSET,
    OPT_LENGTH,
    OPT_SUFFIX,
    OPT_YES,
    OPT_PROMETHEUS,
    OPT_TTL,
    OPT_GPU,
    OPT_WAIT,
    OPT_WAIT_MS,
    OPT_AFTER,
    OPT_COUNT,
    OPT_FOR,
    OPT_LOCAL,
    OPT_HELP_ALL,
};

/* clang-format off */
#define HELP_OPT {"help", no_argument, NULL, 'h'}
#define RANGE_OPTS                                                                                 \
    {"offset", required_argument, NULL, OPT_OFFSET},                                              \
        {"length", required_argument, NULL, OPT_LENGTH},                                          \
        {"suffix", required_argument, NULL, OPT_SUFFIX}
#define END_OPT {NULL, 0, NULL, 0}
#define WAIT_HELP                                                                                  \
    "  --wait MS    a KEY that does not exist yet is waited for, up to MS milliseconds\n"          \
    "  --after V    with --wait: a value whose version is above V is waited for\n"                \
    "               (a daemon with --key-versions yes, or a cluster node; map prints versions)\n"
#define RANGE_HELP                                                                                 \
    "  --offset N   start at byte N\n"                                                             \
    "  --length N   at most N bytes (default: to the end)\n"                                       \
    "  --suffix N   the last N bytes instead\n"
/* clang-format on */

static const struct option o_plain[] = {HELP_OPT, END_OPT};
static const struct option o_set[] = {HELP_OPT,
                                      {"file", required_argument, NULL, 'f'},
                                      {"nx", no_argument, NULL, OPT_NX},
                                      {"xx", no_argument, NULL, OPT_XX},
                                      {"meta", required_argument, NULL, OPT_META},
                                      {"ttl", required_argument, NULL, OPT_TTL},
                                      {"gpu", required_argument, NULL, OPT_GPU},
                                      END_OPT};
static const struct option o_get[] = {HELP_OPT,
                                      {"output", required_argument, NULL, 'o'},
                                      {"meta", no_argument, NULL, OPT_META},
                                      {"wait", required_argument, NULL, OPT_WAIT_MS},
                                      {"after", required_argument, NULL, OPT_AFTER},
                                      RANGE_OPTS,
                                      END_OPT};
static const struct option o_map[] = {HELP_OPT,
                                      {"wait", required_argument, NULL, OPT_WAIT_MS},
                                      {"after", required_argument, NULL, OPT_AFTER},
                                      RANGE_OPTS,
                                      END_OPT};
static const struct option o_ls[] = {
    HELP_OPT, {"long", no_argument, NULL, 'l'}, {"dir", no_argument, NULL, 'd'}, END_OPT};
static const struct option o_del[] = {HELP_OPT,
                                      {"prefix", required_argument, NULL, 'p'},
                                      {"yes", no_argument, NULL, OPT_YES},
                                      END_OPT};
static const struct option o_size[] = {HELP_OPT, {"prefix", required_argument, NULL, 'p'}, END_OPT};
static const struct option o_info[] = {
    HELP_OPT, {"prometheus", no_argument, NULL, OPT_PROMETHEUS}, END_OPT};
static const struct option o_save[] = {HELP_OPT, {"wait", no_argument, NULL, OPT_WAIT}, END_OPT};
static const struct option o_watch[] = {HELP_OPT,
                                        {"count", required_argument, NULL, OPT_COUNT},
                                        {"for", required_argument, NULL, OPT_FOR},
                                        {"local", no_argument, NULL, OPT_LOCAL},
                                        END_OPT};
static const struct option o_flush[] = {HELP_OPT, {"yes", no_argument, NULL, OPT_YES}, END_OPT};

typedef struct {
    gkv_cli_command_t cmd;
    const char *shortopts; /* ':' first: a missing value is reported as ':' */
    const struct option *longopts;
    const char *options; /* the help's option lines */
} command_t;

static const command_t table[] = {
    {{"ping", "ping", "check that the server answers", 0, 0, gkv_cli_ping}, ":h", o_plain, ""},
    {{"set", "set KEY VALUE | set KEY - | set KEY -f FILE",
      "store a value: VALUE as given, - for stdin, or a file's bytes", 1, 2, gkv_cli_set},
     ":hf:",
     o_set,
     "  -f, --file FILE  the value is FILE's contents\n"
     "  --nx             only if KEY does not exist yet\n"
     "  --xx             only if KEY exists\n"
     "  --meta TEXT      metadata stored with the value\n"
     "  --ttl MS         the key expires MS milliseconds after the write\n"
     "  --gpu GPU        on the daemon's GPU GPU (its ordinal, or its UUID)\n"},
    {{"get", "get KEY", "write a value (or a byte range of it) to stdout or a file", 1, 1,
      gkv_cli_get},
     ":ho:",
     o_get,
     "  -o, --output FILE  write to FILE instead of stdout (- is stdout)\n"
     "  --meta             the metadata stored with the value (set --meta) instead\n" WAIT_HELP
         RANGE_HELP},
    {{"del", "del KEY... | del --prefix PREFIX", "delete keys; prints how many existed", 1, -1,
      gkv_cli_del},
     ":hp:",
     o_del,
     "  -p, --prefix PREFIX  every key under PREFIX (\"\" for every key: needs --yes)\n"
     "  --yes                confirm --prefix \"\"\n"},
    {{"exists", "exists KEY...", "count the keys that exist (exit 1: one key, missing)", 1, -1,
      gkv_cli_exists},
     ":h",
     o_plain,
     ""},
    {{"ls", "ls [PREFIX]", "list the keys under PREFIX in byte order", 0, 1, gkv_cli_ls},
     ":hld",
     o_ls,
     "  -l, --long  show each value's size, the milliseconds it has left and its GPU\n"
     "  -d, --dir   fold keys at the next '/' into directories\n"},
    {{"size", "size KEY | size --prefix PREFIX",
      "a value's size, or the bytes and keys under a prefix", 1, 1, gkv_cli_size},
     ":hp:",
     o_size,
     "  -p, --prefix PREFIX  total under PREFIX (\"\" for everything)\n"},
    {{"map", "map KEY", "map a value zero-copy (local only) and checksum it through the mapping", 1,
      1, gkv_cli_map},
     ":h",
     o_map,
     WAIT_HELP RANGE_HELP},
    {{"info", "info [SECTION]",
      "server, memory, clients and keyspace statistics (SECTION: one of them, e.g. memory)", 0, 1,
      gkv_cli_info},
     ":h",
     o_info,
     "  --prometheus  the metrics in the Prometheus text format (what\n"
     "                gpukvd --metrics-listen serves on /metrics)\n"},
    {{"locate", "locate KEY", "the cluster node that owns KEY's value (exit 1: no such key)", 1,
      1, gkv_cli_locate},
     ":h",
     o_plain,
     ""},
    {{"cluster", "cluster",
      "the cluster this daemon is in: its members, etcd's state, keys owned and homed here", 0,
      0, gkv_cli_cluster},
     ":h",
     o_plain,
     ""},
    {{"flush", "flush --yes", "delete every key", 0, 0, gkv_cli_flush},
     ":h",
     o_flush,
     "  --yes  confirm\n"},
    {{"expire", "expire KEY MS", "the key expires MS milliseconds from now (exit 1: no such key)",
      2, 2, gkv_cli_expire},
     ":h",
     o_plain,
     ""},
    {{"ttl", "ttl KEY", "milliseconds the key has left, or \"none\"", 1, 1, gkv_cli_ttl},
     ":h",
     o_plain,
     ""},
    {{"persist", "persist KEY", "take the key's deadline away", 1, 1, gkv_cli_persist},
     ":h",
     o_plain,
     ""},
    {{"save", "save [--wait]", "write a snapshot of every key to the daemon's --snapshot-dir", 0, 0,
      gkv_cli_save},
     ":h",
     o_save,
     "  --wait  until it is written; print the file, keys and bytes\n"},
    {{"watch", "watch [PREFIX]",
      "print each change of the keys under PREFIX as it happens: SEQ EVENT SIZE KEY", 0, 1,
      gkv_cli_watch},
     ":h",
     o_watch,
     "  --count N  stop after N events\n"
     "  --for MS   stop after MS milliseconds (exit 0)\n"
     "  --local    a cluster node's own values only (else every member's)\n"
     "Events: set, delete, expire, evict, flush. SEQ is the daemon's count of changes;\n"
     "SEQ@NODE: a change on another member of the cluster (SEQ is that node's count);\n"
     "on a cluster node SEQ[@NODE]#VERSION: the key's cluster version, in order per key.\n"
     "A watcher that reads too slowly loses its watch (exit 1, OVERFLOW).\n"},
    {{"move", "move KEY GPU",
      "move a value to the daemon's GPU GPU (its ordinal, or its UUID; gpukv info lists them)", 2,
      2, gkv_cli_move},
     ":h",
     o_plain,
     ""},
};
#define NCOMMANDS (sizeof(table) / sizeof(table[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: gpukv [-u URL | -s SOCKET] [--token-file FILE] COMMAND [ARGS]\n"
               "       gpukv COMMAND --help\n"
               "  -u, --url URL        unix:/path or tcp:host:port (default: $GPUKV_URL, else\n"
               "                       the default socket)\n"
               "  -s, --socket PATH    same as -u unix:PATH\n"
               "  --token-file FILE    the token of a gpukvd started with --auth-token-file\n"
               "                       (default: $GPUKV_TOKEN, else the file $GPUKV_TOKEN_FILE)\n"
               "  -h, --help, --help-all, --version\n"
               "Options take \"--opt value\" or \"--opt=value\"; \"--\" ends them.\n"
               "Exit: 0 ok, 1 not found or server error, 2 usage error, 3 cannot connect.\n\n"
               "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-8s %s\n", table[i].cmd.name, table[i].cmd.summary);
    fprintf(f, "\n`gpukv COMMAND --help` shows a command's options, `gpukv --help-all` every one.\n"
               "The wire protocol's other operations (MGET, LIST pages, leases, ...) are for\n"
               "programs: libgpukv (<gpukv/gpukv.h>) and the Python package.\n");
}

static void command_help(const command_t *t)
{
    printf("usage: gpukv [GLOBAL OPTIONS] %s\n  %s\n\noptions:\n%s  -h, --help  this help\n",
           t->cmd.synopsis, t->cmd.summary, t->options);
}

/* --help-all: the usage, then every command's help (the man page is made from it). */
static void help_all(void)
{
    usage(stdout);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        printf("\n");
        command_help(&table[i]);
    }
}

static int bad(const char *cmd, const char *fmt, const char *what)
{
    fprintf(stderr, "gpukv%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    fprintf(stderr, fmt, what);
    fprintf(stderr, " (see gpukv %s%s--help)\n", cmd ? cmd : "", cmd ? " " : "");
    return EXIT_USAGE;
}

/* The option getopt_long just refused (opterr 0): ':' a missing value, '?' an unknown one. */
static int refused(const char *cmd, int c, char **argv)
{
    const char *arg = argv[optind - 1];
    char shortopt[3] = {'-', (char)optopt, 0};
    if (c == ':')
        return bad(cmd, "%s needs a value", arg);
    return bad(cmd, "unknown option %s", optopt && optopt < 256 ? shortopt : arg);
}

static int number(const char *cmd, const char *name, const char *v, uint64_t *out)
{
    if (gkv_size_parse(v, out) != 0) {
        fprintf(stderr, "gpukv %s: --%s needs a number (bytes, K/M/G allowed), not '%s'\n", cmd,
                name, v);
        return EXIT_USAGE;
    }
    return 0;
}

/* --length and --suffix: 0 would read the whole value (the protocol's "to the end"), not the
 * nothing it says; leave the option out for that. */
static int positive(const char *cmd, const char *name, const char *v, uint64_t *out)
{
    int rc = number(cmd, name, v, out);
    if (rc == 0 && *out == 0) {
        fprintf(stderr,
                "gpukv %s: --%s must be at least 1 (leave --length out to read to the end)\n", cmd,
                name);
        return EXIT_USAGE;
    }
    return rc;
}

/* A TTL in milliseconds: decimal digits, at least 1. */
static bool milliseconds(const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno || n == 0)
        return false;
    *out = n;
    return true;
}

/* Applies one of a command's options. Returns 0, GKV_CLI_DONE (help) or EXIT_USAGE. */
static int apply(const command_t *t, int opt, gkv_cli_args_t *a)
{
    const char *cmd = t->cmd.name;
    switch (opt) {
    case 'h':
        command_help(t);
        return GKV_CLI_DONE;
    case 'f':
        a->file = optarg;
        return 0;
    case OPT_NX:
        a->set.flags |= GKV_SET_NX;
        return 0;
    case OPT_XX:
        a->set.flags |= GKV_SET_XX;
        return 0;
    case OPT_META:
        if (strcmp(cmd, "get") == 0) {
            a->meta = true;
            return 0;
        }
        a->set.meta = optarg;
        a->set.meta_len = strlen(optarg);
        return 0;
    case 'o':
        a->output = optarg;
        return 0;
    case OPT_OFFSET:
        return number(cmd, "offset", optarg, &a->range.offset);
    case OPT_LENGTH:
        return positive(cmd, "length", optarg, &a->range.length);
    case OPT_SUFFIX:
        return positive(cmd, "suffix", optarg, &a->range.suffix);
    case 'l':
        a->longfmt = true;
        return 0;
    case 'd':
        a->dir = true;
        return 0;
    case 'p':
        a->prefix = optarg;
        return 0;
    case OPT_YES:
        a->yes = true;
        return 0;
    case OPT_PROMETHEUS:
        a->prometheus = true;
        return 0;
    case OPT_GPU:
        a->gpu = optarg;
        return 0;
    case OPT_WAIT:
        a->wait = true;
        return 0;
    case OPT_WAIT_MS:
        if (!milliseconds(optarg, &a->wait_ms) || a->wait_ms > GKV_MAX_WAIT_MS)
            return bad(cmd, "--wait is a number of milliseconds, 1 to 3600000, not '%s'", optarg);
        return 0;
    case OPT_AFTER: {
        char *end;
        errno = 0;
        a->after = strtoull(optarg, &end, 10);
        if (*optarg < '0' || *optarg > '9' || *end || errno)
            return bad(cmd, "--after is a version, a decimal number, not '%s'", optarg);
        a->has_after = true;
        return 0;
    }
    case OPT_COUNT:
        if (!milliseconds(optarg, &a->count)) /* the same form: decimal, at least 1 */
            return bad(cmd, "--count is a number of events, at least 1, not '%s'", optarg);
        return 0;
    case OPT_FOR:
        if (!milliseconds(optarg, &a->for_ms))
            return bad(cmd, "--for is a number of milliseconds, at least 1, not '%s'", optarg);
        return 0;
    case OPT_LOCAL:
        a->local = true;
        return 0;
    case OPT_TTL:
        if (!milliseconds(optarg, &a->set.ttl_ms))
            return bad(cmd, "--ttl is a number of milliseconds, at least 1, not '%s'", optarg);
        return 0;
    }
    return EXIT_USAGE; /* not reached: getopt_long returns only the table's values */
}

/* True when path could be written: it exists and is writable, or its directory is. */
static bool writable(const char *path)
{
    if (access(path, W_OK) == 0)
        return true;
    if (errno != ENOENT)
        return false;
    char dir[4096];
    gkv_path_dir(path, dir, sizeof(dir));
    return access(dir, W_OK | X_OK) == 0;
}

/* What the options and operands of a command must agree on. */
static int check(const command_t *t, gkv_cli_args_t *a)
{
    const char *cmd = t->cmd.name;
    int n = a->noperands;
    int min = t->cmd.min_operands, max = t->cmd.max_operands;
    if (strcmp(cmd, "size") == 0)
        min = max = a->prefix ? 0 : 1; /* size KEY | size --prefix PREFIX */
    if (strcmp(cmd, "del") == 0 && a->prefix)
        min = max = 0; /* del --prefix PREFIX */
    if (a->has_after && !a->wait_ms) {
        fprintf(stderr, "gpukv %s: --after needs --wait MS\n", cmd);
        return EXIT_USAGE;
    }
    if (n < min || (max >= 0 && n > max)) {
        fprintf(stderr, "gpukv %s: %s; usage: gpukv %s\n", cmd,
                n < min ? "missing operand" : "too many operands", t->cmd.synopsis);
        return EXIT_USAGE;
    }
    if (strcmp(cmd, "set") == 0) {
        if ((n == 2) == (a->file != NULL))
            return bad(cmd, "%s", "needs KEY and one of VALUE, - (stdin) or -f FILE");
        if ((a->set.flags & GKV_SET_NX) && (a->set.flags & GKV_SET_XX))
            return bad(cmd, "%s", "--nx and --xx exclude each other");
        if (a->set.meta_len > GKV_MAX_META)
            return bad(cmd, "%s", "--meta is over 4096 bytes");
    }
    struct stat st;
    if (a->file && strcmp(a->file, "-") != 0) { /* a stream (a FIFO, /dev/stdin) will do too */
        const char *why = stat(a->file, &st) != 0 || access(a->file, R_OK) != 0 ? strerror(errno)
                          : S_ISDIR(st.st_mode)                                 ? "a directory"
                                                                                : NULL;
        if (why) {
            fprintf(stderr, "gpukv set: cannot read %s: %s\n", a->file, why);
            return EXIT_USAGE;
        }
    }
    if (a->output && strcmp(a->output, "-") != 0 && !writable(a->output)) {
        fprintf(stderr, "gpukv get: cannot write %s: %s\n", a->output, strerror(errno));
        return EXIT_USAGE;
    }
    if ((a->range.length || a->range.offset) && a->range.suffix)
        return bad(cmd, "%s", "--suffix excludes --offset and --length");
    if (strcmp(cmd, "expire") == 0 && !milliseconds(a->operands[1], &a->ttl_ms))
        return bad(cmd, "MS is a number of milliseconds, at least 1, not '%s'", a->operands[1]);
    if (strcmp(cmd, "flush") == 0 && !a->yes) {
        fprintf(stderr, "gpukv: flush deletes every key; confirm with: gpukv flush --yes\n");
        return EXIT_USAGE;
    }
    if (strcmp(cmd, "del") == 0 && a->prefix && !a->prefix[0] && !a->yes) {
        fprintf(stderr, "gpukv: del --prefix \"\" deletes every key; confirm with: gpukv del "
                        "--prefix \"\" --yes\n");
        return EXIT_USAGE;
    }
    return GKV_CLI_RUN;
}

static int parse_command(const command_t *t, int argc, char **argv, gkv_cli_args_t *a)
{
    optind = 0; /* glibc: start again, at argv[1] */
    int opt, rc;
    while ((opt = getopt_long(argc, argv, t->shortopts, t->longopts, NULL)) != -1) {
        if (opt == ':' || opt == '?')
            return refused(t->cmd.name, opt, argv);
        if ((rc = apply(t, opt, a)))
            return rc;
    }
    a->operands = argv + optind;
    a->noperands = argc - optind;
    return check(t, a);
}

int gkv_cli_parse(int argc, char **argv, gkv_cli_args_t *a)
{
    static const struct option global[] = {
        {"url", required_argument, NULL, 'u'},
        {"socket", required_argument, NULL, 's'},
        {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {"help-all", no_argument, NULL, OPT_HELP_ALL},
        END_OPT,
    };
    memset(a, 0, sizeof(*a));
    opterr = 0;
    optind = 0;
    int opt;
    /* '+': the first operand (the command) ends the global options. */
    while ((opt = getopt_long(argc, argv, "+:u:s:h", global, NULL)) != -1) {
        switch (opt) {
        case 'u':
            a->url = optarg;
            break;
        case 's':
            snprintf(a->sockurl, sizeof(a->sockurl), "unix:%s", optarg);
            a->url = a->sockurl;
            break;
        case OPT_TOKEN_FILE:
            if (access(optarg, R_OK) != 0) {
                fprintf(stderr, "gpukv: --token-file %s: %s\n", optarg, strerror(errno));
                return EXIT_USAGE;
            }
            a->token_file = optarg;
            break;
        case 'h':
            usage(stdout);
            return GKV_CLI_DONE;
        case OPT_VERSION:
            printf("gpukv %s\n", GKV_VERSION_STRING);
            return GKV_CLI_DONE;
        case OPT_HELP_ALL:
            help_all();
            return GKV_CLI_DONE;
        default:
            return refused(NULL, opt, argv);
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(name, table[i].cmd.name) == 0) {
            a->cmd = &table[i].cmd;
            return parse_command(&table[i], argc - optind, argv + optind, a);
        }
    fprintf(stderr, "gpukv: unknown command '%s' (see gpukv --help)\n", name);
    return EXIT_USAGE;
}
