/* placement.c: weighted rendezvous hashing and {tag}s (placement.h). */
#include "placement.h"

#include <math.h>
#include <string.h>

#include "hash.h"

/* A fixed key: placement must agree on every node (and across versions), unlike the index's
 * per-process hash key. Changing it moves every key's home. */
static const uint8_t PLACE_KEY[16] = {'g', 'p', 'u', 'k', 'v', '-', 'p', 'l',
                                      'a', 'c', 'e', '-', 'v', '1', 0,   0};

void gkv_place_hashed_part(const void *key, size_t len, size_t *off, size_t *n)
{
    const char *k = key;
    const char *open = memchr(k, '{', len);
    if (open) {
        size_t at = (size_t)(open - k) + 1;
        const char *close = memchr(k + at, '}', len - at);
        if (close && close > k + at) {
            *off = at;
            *n = (size_t)(close - k) - at;
            return;
        }
    }
    *off = 0;
    *n = len;
}

uint64_t gkv_place_key_hash(const void *key, size_t len)
{
    size_t off, n;
    gkv_place_hashed_part(key, len, &off, &n);
    return gkv_siphash((const char *)key + off, n, PLACE_KEY);
}

uint64_t gkv_place_node_hash(const char *name)
{
    return gkv_siphash(name, strlen(name), PLACE_KEY);
}

/* A 64-bit mix of the node's and the key's hashes (splitmix64's finaliser). */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

long gkv_place_home(const gkv_member_t *m, size_t n, uint64_t key_hash)
{
    long best = -1;
    double best_score = 0;
    for (size_t i = 0; i < n; i++) {
        /* u uniform in (0, 1); -w / ln(u) is the weighted score (Schindelhauer and Schomaker):
         * a member's chance to win is its weight's share of the total. */
        uint64_t h = mix(m[i].hash ^ mix(key_hash));
        double u = ((double)(h >> 11) + 0.5) / 9007199254740992.0;
        double score = -(double)(m[i].weight ? m[i].weight : 1) / log(u);
        if (best < 0 || score > best_score ||
            (score == best_score && strcmp(m[i].name, m[best].name) < 0)) {
            best = (long)i;
            best_score = score;
        }
    }
    return best;
}
