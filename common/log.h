/* log.h: the daemon's leveled log to stderr (or --log-file, which stderr then points at). Under
 * systemd (JOURNAL_STREAM set) lines carry "<N>" priority prefixes instead of a timestamp, which
 * journald adds itself. The client library never logs. */
#ifndef GKV_COMMON_LOG_H
#define GKV_COMMON_LOG_H

enum { GKV_LOG_ERROR = 0, GKV_LOG_WARN = 1, GKV_LOG_INFO = 2, GKV_LOG_DEBUG = 3 };

/* Sets the most verbose level that is written. */
void gkv_log_set_level(int level);
/* Parses "error", "warn", "info" or "debug"; returns the level or -1. s is borrowed. */
int gkv_log_parse_level(const char *s);
/* Points stderr at path (appending, created 0640): --log-file, and again on SIGHUP after the
 * file was rotated. Returns 0 or -1 with errno set (stderr unchanged). */
int gkv_log_reopen(const char *path);
/* Writes one line "time level message" to stderr when level is enabled. */
void gkv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define GKV_ERROR(...) gkv_log(GKV_LOG_ERROR, __VA_ARGS__)
#define GKV_WARN(...) gkv_log(GKV_LOG_WARN, __VA_ARGS__)
#define GKV_INFO(...) gkv_log(GKV_LOG_INFO, __VA_ARGS__)
#define GKV_DEBUG(...) gkv_log(GKV_LOG_DEBUG, __VA_ARGS__)

#endif
