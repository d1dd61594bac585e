/* fdreserve.c: the descriptor table grown at start (fdreserve.h). */
#include "fdreserve.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

uint64_t gkv_fd_reserve(uint64_t want, uint64_t *limit)
{
    struct rlimit rl;
    *limit = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return 0;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want &&
        (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > rl.rlim_cur)) {
        struct rlimit up = rl;
        up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    uint64_t n = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > want ? want : rl.rlim_cur;
    *limit = rl.rlim_cur == RLIM_INFINITY ? 0 : rl.rlim_cur;
    if (n < 2)
        return 0;
    /* A descriptor placed at n - 1 makes the kernel size the table for it (a power of two at
     * least n); the table stays when the descriptor goes. */
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, (int)(n - 1));
    close(fd);
    if (high < 0)
        return 0;
    close(high);
    return n;
}
