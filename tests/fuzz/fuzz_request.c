/* fuzz_request.c: libFuzzer target for what a client controls first: the frame reader (length
 * prefixes in a byte stream) and request decoding with its iterators (keys, items), and what a
 * server controls in libgpukv: response decoding. Each header is copied into a buffer of its
 * exact size so that AddressSanitizer sees any read past it.
 * Built and run by tests/fuzz/run.sh (clang -fsanitize=fuzzer,address,undefined). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "message.h"
#include "reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk_request(const gkv_request_t *req)
{
    gkv_reader_t it;
    uint32_t n;
    gkv_slice_t key;
    gkv_item_t item;
    if (req->keys.len) {
        gkv_read_init(&it, req->keys.p, req->keys.len);
        if (gkv_read_array(&it, &n) == 0)
            for (uint32_t i = 0; i < n && gkv_req_keys_next(&it, &key) == 0; i++)
                ;
    }
    if (req->items.len) {
        gkv_read_init(&it, req->items.p, req->items.len);
        if (gkv_read_array(&it, &n) == 0)
            for (uint32_t i = 0; i < n && gkv_req_items_next(&it, &item) == 0; i++)
                ;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (size - pos >= GKV_FRAME_PREFIX) {
        uint32_t len = gkv_frame_get_len(data + pos);
        if (gkv_frame_check_len(len, GKV_MAX_HEADER) || size - pos - GKV_FRAME_PREFIX < len)
            break;
        uint8_t *hdr = malloc(len);
        if (!hdr)
            break;
        memcpy(hdr, data + pos + GKV_FRAME_PREFIX, len);
        gkv_request_t req;
        const char *why;
        if (gkv_req_decode(hdr, len, &req, &why) == 0)
            walk_request(&req);
        gkv_response_t resp;
        gkv_resp_decode(hdr, len, &resp);
        free(hdr);
        pos += GKV_FRAME_PREFIX + (size_t)len;
    }
    return 0;
}
