/* radix.c: the adaptive radix tree of radix.h. A reference (uintptr_t) is 0, a leaf (the
 * caller's pointer with the low bit set) or an inner node. An inner node at depth d stands for
 * the keys that continue with its path: plen bytes from d, of which the first PATH_MAX are kept
 * in the node and the rest read from any leaf below it (all share them). Its children hang
 * under the byte at d + plen; `end` is the leaf whose key stops right after the path.
 * Everything is iterative: a chain of keys ("a", "aa", "aaa", ...) makes the tree as deep as its
 * longest key, which must not become as deep a C stack. */
#include "radix.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define PATH_MAX_STORED 16

enum { N4, N16, N48, N256 };

typedef struct {
    uint8_t type;
    uint8_t unused;
    uint16_t count; /* children, the end leaf not counted */
    uint32_t plen;
    uintptr_t end;
    uint8_t path[PATH_MAX_STORED];
} node_t;

typedef struct {
    node_t h;
    uint8_t keys[4]; /* sorted */
    uintptr_t child[4];
} node4_t;

typedef struct {
    node_t h;
    uint8_t keys[16]; /* sorted */
    uintptr_t child[16];
} node16_t;

typedef struct {
    node_t h;
    uint8_t slot[256]; /* 1 + the index in child, 0 for none */
    uintptr_t child[48];
} node48_t;

typedef struct {
    node_t h;
    uintptr_t child[256];
} node256_t;

static const size_t node_size[] = {sizeof(node4_t), sizeof(node16_t), sizeof(node48_t),
                                   sizeof(node256_t)};
static const unsigned node_cap[] = {4, 16, 48, 256};

static bool is_leaf(uintptr_t r)
{
    return r & 1;
}

static void *leaf_of(uintptr_t r)
{
    return (void *)(r & ~(uintptr_t)1);
}

static const uint8_t *ref_key(const gkv_radix_t *t, uintptr_t r, size_t *len)
{
    return t->key_of(leaf_of(r), len);
}

static node_t *node_new(gkv_radix_t *t, int type)
{
    node_t *n = calloc(1, node_size[type]);
    if (!n)
        return NULL;
    n->type = (uint8_t)type;
    t->bytes += node_size[type];
    t->nodes++;
    return n;
}

static void node_free(gkv_radix_t *t, node_t *n)
{
    t->bytes -= node_size[n->type];
    t->nodes--;
    free(n);
}

/* The slot of the child under byte b, or NULL. */
static uintptr_t *find_child(node_t *n, uint8_t b)
{
    switch (n->type) {
    case N4: {
        node4_t *m = (node4_t *)n;
        for (unsigned i = 0; i < n->count; i++)
            if (m->keys[i] == b)
                return &m->child[i];
        return NULL;
    }
    case N16: {
        node16_t *m = (node16_t *)n;
        for (unsigned i = 0; i < n->count && m->keys[i] <= b; i++)
            if (m->keys[i] == b)
                return &m->child[i];
        return NULL;
    }
    case N48: {
        node48_t *m = (node48_t *)n;
        return m->slot[b] ? &m->child[m->slot[b] - 1] : NULL;
    }
    default: {
        node256_t *m = (node256_t *)n;
        return m->child[b] ? &m->child[b] : NULL;
    }
    }
}

/* The child under the smallest byte > b (any byte when b is -1) and that byte, or 0. */
static uintptr_t child_after(const node_t *n, int b, uint8_t *byte)
{
    switch (n->type) {
    case N4:
    case N16: {
        const uint8_t *keys =
            n->type == N4 ? ((const node4_t *)n)->keys : ((const node16_t *)n)->keys;
        const uintptr_t *child =
            n->type == N4 ? ((const node4_t *)n)->child : ((const node16_t *)n)->child;
        for (unsigned i = 0; i < n->count; i++)
            if ((int)keys[i] > b) {
                *byte = keys[i];
                return child[i];
            }
        return 0;
    }
    case N48: {
        const node48_t *m = (const node48_t *)n;
        for (int c = b + 1; c < 256; c++)
            if (m->slot[c]) {
                *byte = (uint8_t)c;
                return m->child[m->slot[c] - 1];
            }
        return 0;
    }
    default: {
        const node256_t *m = (const node256_t *)n;
        for (int c = b + 1; c < 256; c++)
            if (m->child[c]) {
                *byte = (uint8_t)c;
                return m->child[c];
            }
        return 0;
    }
    }
}

/* The first child, or 0. */
static uintptr_t first_child(const node_t *n)
{
    uint8_t b;
    return child_after(n, -1, &b);
}

/* The slot of the first child, and its byte (n has children). */
static uintptr_t *first_slot(node_t *n, uint8_t *b)
{
    child_after(n, -1, b);
    return find_child(n, *b);
}

/* The leaf with the smallest key under r (r is not 0). */
static uintptr_t min_leaf(uintptr_t r)
{
    while (!is_leaf(r)) {
        const node_t *n = (const node_t *)r;
        r = n->end ? n->end : first_child(n);
    }
    return r;
}

/* Byte i of n's path; n sits at depth. */
static uint8_t path_byte(const gkv_radix_t *t, const node_t *n, size_t depth, size_t i)
{
    if (i < PATH_MAX_STORED)
        return n->path[i];
    size_t len;
    const uint8_t *k = ref_key(t, min_leaf((uintptr_t)n), &len);
    return k[depth + i];
}

/* How many bytes of n's path (n at depth) key continues with. */
static size_t path_match(const gkv_radix_t *t, const node_t *n, size_t depth, const uint8_t *k,
                         size_t len)
{
    size_t m = 0, most = len - depth < n->plen ? len - depth : n->plen;
    while (m < most && m < PATH_MAX_STORED && n->path[m] == k[depth + m])
        m++;
    if (m < most && m == PATH_MAX_STORED) {
        size_t olen;
        const uint8_t *ok = ref_key(t, min_leaf((uintptr_t)n), &olen);
        while (m < most && ok[depth + m] == k[depth + m])
            m++;
    }
    return m;
}

/* Adds child c under byte b (not present) to a node with room. */
static void put_child(node_t *n, uint8_t b, uintptr_t c)
{
    switch (n->type) {
    case N4:
    case N16: {
        uint8_t *keys = n->type == N4 ? ((node4_t *)n)->keys : ((node16_t *)n)->keys;
        uintptr_t *child = n->type == N4 ? ((node4_t *)n)->child : ((node16_t *)n)->child;
        unsigned i = n->count;
        while (i && keys[i - 1] > b) {
            keys[i] = keys[i - 1];
            child[i] = child[i - 1];
            i--;
        }
        keys[i] = b;
        child[i] = c;
        break;
    }
    case N48: {
        node48_t *m = (node48_t *)n;
        unsigned s = 0;
        while (m->child[s])
            s++;
        m->child[s] = c;
        m->slot[b] = (uint8_t)(s + 1);
        break;
    }
    default:
        ((node256_t *)n)->child[b] = c;
    }
    n->count++;
}

/* A copy of n as a node of another kind (header, end and children); NULL when out of memory. */
static node_t *convert(gkv_radix_t *t, node_t *n, int type)
{
    node_t *m = node_new(t, type);
    if (!m)
        return NULL;
    m->plen = n->plen;
    m->end = n->end;
    memcpy(m->path, n->path, sizeof(m->path));
    uint8_t b;
    for (uintptr_t c = child_after(n, -1, &b); c; c = child_after(n, b, &b))
        put_child(m, b, c);
    return m;
}

/* Adds child c under byte b to the node at *ref, growing it when full. */
static int add_child(gkv_radix_t *t, uintptr_t *ref, uint8_t b, uintptr_t c)
{
    node_t *n = (node_t *)*ref;
    if (n->count == node_cap[n->type]) {
        node_t *m = convert(t, n, n->type + 1);
        if (!m)
            return GKV_ENOMEM;
        node_free(t, n);
        *ref = (uintptr_t)m;
        n = m;
    }
    put_child(n, b, c);
    return 0;
}

/* Puts leaf r (key k of len bytes) in node n whose path ends at depth: as its end leaf or as a
 * child. */
static void place(node_t *n, uintptr_t r, const uint8_t *k, size_t len, size_t depth)
{
    if (len == depth)
        n->end = r;
    else
        put_child(n, k[depth], r);
}

void gkv_radix_init(gkv_radix_t *t, gkv_radix_key_fn key_of)
{
    memset(t, 0, sizeof(*t));
    t->key_of = key_of;
}

int gkv_radix_insert(gkv_radix_t *t, void *leaf)
{
    size_t len;
    const uint8_t *k = t->key_of(leaf, &len);
    uintptr_t lr = (uintptr_t)leaf | 1, *ref = &t->root;
    size_t depth = 0;
    for (;;) {
        uintptr_t r = *ref;
        if (!r) {
            *ref = lr;
            return 0;
        }
        if (is_leaf(r)) { /* two leaves under a new node at the first byte they differ */
            size_t olen;
            const uint8_t *ok = ref_key(t, r, &olen);
            size_t p = depth;
            while (p < len && p < olen && k[p] == ok[p])
                p++;
            assert(p < len || p < olen); /* the key is not in the tree */
            node_t *n = node_new(t, N4);
            if (!n)
                return GKV_ENOMEM;
            n->plen = (uint32_t)(p - depth);
            memcpy(n->path, k + depth, n->plen < PATH_MAX_STORED ? n->plen : PATH_MAX_STORED);
            place(n, r, ok, olen, p);
            place(n, lr, k, len, p);
            *ref = (uintptr_t)n;
            return 0;
        }
        node_t *n = (node_t *)r;
        size_t m = path_match(t, n, depth, k, len);
        if (m < n->plen) { /* the key leaves the path at m: a new node there */
            node_t *s = node_new(t, N4);
            if (!s)
                return GKV_ENOMEM;
            uint8_t rest[PATH_MAX_STORED + 1];
            size_t keep = n->plen - m < sizeof(rest) ? n->plen - m : sizeof(rest);
            for (size_t i = 0; i < keep; i++)
                rest[i] = path_byte(t, n, depth, m + i);
            s->plen = (uint32_t)m;
            memcpy(s->path, k + depth, m < PATH_MAX_STORED ? m : PATH_MAX_STORED);
            n->plen -= (uint32_t)(m + 1);
            memcpy(n->path, rest + 1, keep - 1);
            put_child(s, rest[0], r);
            place(s, lr, k, len, depth + m);
            *ref = (uintptr_t)s;
            return 0;
        }
        depth += n->plen;
        if (len == depth) {
            assert(!n->end);
            n->end = lr;
            return 0;
        }
        uintptr_t *c = find_child(n, k[depth]);
        if (!c)
            return add_child(t, ref, k[depth], lr);
        ref = c;
        depth++;
    }
}

/* Where the leaf with key k sits: its slot, the slot of the node holding it (NULL at the root)
 * and the byte it hangs under (-1 for an end leaf). NULL when no leaf has that key. */
static uintptr_t *find_leaf(gkv_radix_t *t, const uint8_t *k, size_t len, uintptr_t **parent,
                            int *edge)
{
    uintptr_t *ref = &t->root, *up = NULL;
    size_t depth = 0;
    int b = -1;
    while (*ref && !is_leaf(*ref)) {
        node_t *n = (node_t *)*ref;
        depth += n->plen; /* the leaf's key is compared in full below */
        if (depth > len)
            return NULL;
        up = ref;
        if (depth == len) {
            ref = &n->end;
            b = -1;
            break;
        }
        b = k[depth];
        ref = find_child(n, k[depth]);
        if (!ref)
            return NULL;
        depth++;
    }
    if (!*ref)
        return NULL;
    size_t olen;
    const uint8_t *ok = ref_key(t, *ref, &olen);
    if (olen != len || memcmp(ok, k, len))
        return NULL;
    *parent = up;
    *edge = b;
    return ref;
}

void *gkv_radix_replace(gkv_radix_t *t, void *leaf)
{
    size_t len;
    const uint8_t *k = t->key_of(leaf, &len);
    uintptr_t *parent;
    int edge;
    uintptr_t *ref = find_leaf(t, k, len, &parent, &edge);
    if (!ref)
        return NULL;
    void *old = leaf_of(*ref);
    *ref = (uintptr_t)leaf | 1;
    return old;
}

static void remove_child(node_t *n, uint8_t b)
{
    switch (n->type) {
    case N4:
    case N16: {
        uint8_t *keys = n->type == N4 ? ((node4_t *)n)->keys : ((node16_t *)n)->keys;
        uintptr_t *child = n->type == N4 ? ((node4_t *)n)->child : ((node16_t *)n)->child;
        unsigned i = 0;
        while (keys[i] != b)
            i++;
        for (; i + 1 < n->count; i++) {
            keys[i] = keys[i + 1];
            child[i] = child[i + 1];
        }
        child[n->count - 1] = 0;
        break;
    }
    case N48: {
        node48_t *m = (node48_t *)n;
        m->child[m->slot[b] - 1] = 0;
        m->slot[b] = 0;
        break;
    }
    default:
        ((node256_t *)n)->child[b] = 0;
    }
    n->count--;
}

/* After a removal from the node at *ref: a node left with one thing is replaced by it (a child
 * node takes over the path); a sparse node becomes a smaller kind when memory allows. */
static void tidy(gkv_radix_t *t, uintptr_t *ref)
{
    node_t *n = (node_t *)*ref;
    if (n->count == 0) {
        *ref = n->end;
        node_free(t, n);
        return;
    }
    if (n->count == 1 && !n->end) {
        uint8_t b;
        uintptr_t c = *first_slot(n, &b);
        if (!is_leaf(c)) { /* c's path becomes n's path, the byte b, then c's own */
            node_t *cn = (node_t *)c;
            uint8_t path[PATH_MAX_STORED];
            size_t i = 0;
            for (; i < n->plen && i < PATH_MAX_STORED; i++)
                path[i] = n->path[i];
            if (i < PATH_MAX_STORED && i == n->plen)
                path[i++] = b;
            for (size_t j = 0; i < PATH_MAX_STORED && j < cn->plen; j++)
                path[i++] = cn->path[j];
            memcpy(cn->path, path, i);
            cn->plen += n->plen + 1;
        }
        *ref = c;
        node_free(t, n);
        return;
    }
    static const unsigned shrink_at[] = {0, 3, 12, 36};
    if (n->type != N4 && n->count <= shrink_at[n->type]) {
        node_t *m = convert(t, n, n->type - 1);
        if (m) {
            node_free(t, n);
            *ref = (uintptr_t)m;
        }
    }
}

void *gkv_radix_remove(gkv_radix_t *t, const uint8_t *key, size_t len)
{
    uintptr_t *parent;
    int edge;
    uintptr_t *ref = find_leaf(t, key, len, &parent, &edge);
    if (!ref)
        return NULL;
    void *leaf = leaf_of(*ref);
    if (!parent) {
        t->root = 0;
        return leaf;
    }
    node_t *n = (node_t *)*parent;
    if (edge < 0)
        n->end = 0;
    else
        remove_child(n, (uint8_t)edge);
    tidy(t, parent);
    return leaf;
}

void *gkv_radix_seek(const gkv_radix_t *t, const uint8_t *k, size_t len, bool after)
{
    uintptr_t r = t->root, later = 0; /* later: the nearest subtree wholly after the key */
    size_t depth = 0;
    while (r) {
        if (is_leaf(r)) {
            size_t olen;
            const uint8_t *ok = ref_key(t, r, &olen);
            int c = memcmp(ok, k, olen < len ? olen : len);
            if (!c)
                c = olen < len ? -1 : olen > len;
            if (c > 0 || (c == 0 && !after))
                return leaf_of(r);
            break;
        }
        const node_t *n = (const node_t *)r;
        size_t m = path_match(t, n, depth, k, len);
        if (m < n->plen) {
            /* Every key here continues the key (all greater), or differs from it at m. */
            if (depth + m == len || path_byte(t, n, depth, m) > k[depth + m])
                return leaf_of(min_leaf(r));
            break; /* all smaller */
        }
        depth += n->plen;
        if (depth == len) { /* the end leaf is the key itself; children are greater */
            if (n->end && !after)
                return leaf_of(n->end);
            uintptr_t c = first_child(n);
            if (c)
                return leaf_of(min_leaf(c));
            break;
        }
        uint8_t nb;
        uintptr_t next = child_after(n, k[depth], &nb);
        if (next)
            later = next;
        uintptr_t *c = find_child((node_t *)n, k[depth]);
        r = c ? *c : 0;
        depth++;
    }
    return later ? leaf_of(min_leaf(later)) : NULL;
}

void gkv_radix_clear(gkv_radix_t *t, void (*drop)(void *leaf, void *arg), void *arg)
{
    /* Depth-first without a stack: a node being emptied has its end leaf dropped, and its end
     * field then links it to the node above it, whose remaining children come next. */
    uintptr_t r = t->root;
    node_t *up = NULL;
    t->root = 0;
    while (r || up) {
        if (!r) {
            node_t *n = up;
            if (!n->count) {
                up = (node_t *)n->end;
                node_free(t, n);
                continue;
            }
            uint8_t b;
            r = *first_slot(n, &b);
            remove_child(n, b);
            continue;
        }
        if (is_leaf(r)) {
            if (drop)
                drop(leaf_of(r), arg);
            r = 0;
            continue;
        }
        node_t *n = (node_t *)r;
        if (n->end && drop)
            drop(leaf_of(n->end), arg);
        n->end = (uintptr_t)up;
        up = n;
        r = 0;
    }
}
