/* members.c: member records and lists (members.h). */
#include "members.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "placement.h"

int gkv_member_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (!n || n > GKV_NODE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int gkv_member_encode(const gkv_member_t *m, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "{\"name\":\"%s\",\"advertise\":\"%s\",\"weight\":%u,\"token\":\"%s\"}",
                     m->name, m->advertise, m->weight, m->token_id);
    return n < 0 || (size_t)n >= cap ? GKV_ENOSPACE : n;
}

static int copy_str(const cJSON *obj, const char *field, char *dst, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
        return GKV_EPROTO;
    strcpy(dst, v->valuestring);
    return 0;
}

int gkv_member_decode(const char *json, size_t len, int64_t lease, gkv_member_t *m)
{
    cJSON *o = cJSON_ParseWithLength(json, len);
    memset(m, 0, sizeof(*m));
    int rc = o ? 0 : GKV_EPROTO;
    if (!rc)
        rc = copy_str(o, "name", m->name, sizeof(m->name));
    if (!rc)
        rc = copy_str(o, "advertise", m->advertise, sizeof(m->advertise));
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "weight");
    if (!rc && (!cJSON_IsNumber(w) || w->valuedouble < 1 || w->valuedouble > 1000))
        rc = GKV_EPROTO;
    if (!rc && !gkv_member_name_ok(m->name))
        rc = GKV_EPROTO;
    if (!rc && cJSON_GetObjectItemCaseSensitive(o, "token"))
        rc = copy_str(o, "token", m->token_id, sizeof(m->token_id));
    if (!rc) {
        m->weight = (uint32_t)w->valuedouble;
        m->incarnation = lease;
        m->hash = gkv_place_node_hash(m->name);
    }
    cJSON_Delete(o);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const gkv_member_t *)a)->name, ((const gkv_member_t *)b)->name);
}

int gkv_members_from_range(const gkv_etcd_range_t *r, gkv_members_t *out)
{
    memset(out, 0, sizeof(*out));
    out->revision = r->revision;
    if (!r->n)
        return 0;
    if (!(out->m = calloc(r->n, sizeof(*out->m))))
        return GKV_ENOMEM;
    for (size_t i = 0; i < r->n; i++) {
        const gkv_etcd_kv_t *kv = &r->kvs[i];
        const char *slash = strrchr(kv->key, '/');
        gkv_member_t *m = &out->m[out->n];
        /* The record must be the one of the node its key names, and held by a lease. */
        if (gkv_member_decode(kv->value, kv->value_len, kv->lease, m) || !slash ||
            strcmp(slash + 1, m->name) || !kv->lease) {
            GKV_WARN("cluster: ignoring a malformed member record under %s", kv->key);
            continue;
        }
        out->n++;
    }
    qsort(out->m, out->n, sizeof(*out->m), by_name);
    return 0;
}

const gkv_member_t *gkv_members_find(const gkv_members_t *ms, const char *name)
{
    for (size_t i = 0; i < ms->n; i++)
        if (!strcmp(ms->m[i].name, name))
            return &ms->m[i];
    return NULL;
}

int gkv_members_copy(gkv_members_t *dst, const gkv_members_t *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->revision = src->revision;
    if (!src->n)
        return 0;
    if (!(dst->m = malloc(src->n * sizeof(*dst->m))))
        return GKV_ENOMEM;
    memcpy(dst->m, src->m, src->n * sizeof(*dst->m));
    dst->n = src->n;
    return 0;
}

int gkv_members_same(const gkv_members_t *a, const gkv_members_t *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->m[i].name, b->m[i].name) || a->m[i].incarnation != b->m[i].incarnation ||
            strcmp(a->m[i].advertise, b->m[i].advertise) || a->m[i].weight != b->m[i].weight ||
            strcmp(a->m[i].token_id, b->m[i].token_id))
            return 0;
    return 1;
}

void gkv_members_fini(gkv_members_t *ms)
{
    free(ms->m);
    memset(ms, 0, sizeof(*ms));
}
