/*
 * ingest/_otlp_fast.c: decode a serialized OTLP ExportTraceServiceRequest straight into
 * Arrow-layout buffers (int32 offsets + data + validity bitmaps, fixed-width arrays, map offsets),
 * so the hot path of ingest does no per-attribute Python work. ingest/otlp_decode.py wraps the
 * buffers zero-copy with pyarrow and holds the pure-Python reference decoder; the two must give
 * identical tables, which tests/test_otlp_decode.py checks differentially.
 *
 * decode(data, extract) also lifts the span attribute keys of a compiled Extract spec into text
 * columns of their own, dropping them from the attributes map when the value type matches the
 * key's kind (otlp_decode.ExtractSpec states the contract).
 *
 * Wire-format semantics follow upb, the protobuf runtime the reference decoder parses with, so that
 * both decoders accept and reject the same bytes:
 *  - unknown fields, and known fields carrying an unexpected wire type, are skipped;
 *  - balanced groups are skipped like any unknown field (upb does the same);
 *  - messages and groups nest at most 100 levels (upb's default limit);
 *  - tags and lengths take at most 5 bytes (a tag must fit 32 bits), other varints at most 10;
 *  - every occurrence of a string field must be valid UTF-8, even one that is later overwritten
 *    or sits in a oneof member that is later replaced;
 *  - the last occurrence of a singular scalar wins; occurrences of a singular message merge; a
 *    oneof message member merges only with the occurrences of itself since the last other member.
 *
 * Nothing here touches Python objects while decoding, so the GIL is released for bytes input; it
 * is taken back (and then kept) only to format a double outside the fast formatter's range.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bumped whenever the layout of the dict returned by decode() changes; otlp_decode.py refuses a
 * stale build instead of misreading it. */
#define ABI_VERSION 3

/* The accepted time window (otlp_decode.SpanWindow): spans start on or after 2000-01-01T00:00Z
 * (otlp_decode.MIN_SPAN_NS) and end at most window_future_s after receipt. Without it, a span at
 * 2^63-1 ns was stored and overflowed every refresh of its hour (issue #17). */
#define MIN_SPAN_NS 946684800000000000ULL

#define MAX_LEVEL 100 /* upb's default nesting limit for messages and groups */
#define MAX_DEPTH 32  /* our limit on nested AnyValues (an attribute's own value is depth 1) */
#define MAX_ERRORS 10
#define ERR_LEN 200
#define SMALL_KEYSET 16 /* attribute lists up to this size deduplicate by linear scan */
#define MAX_EXTRACT 256 /* keys in one extraction spec; otlp_decode.MAX_EXTRACT_KEYS */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };
enum { FAIL_NONE = 0, FAIL_INPUT, FAIL_MEMORY, FAIL_PYTHON };

/* Message types, for the schema-driven validator. */
enum {
    M_REQUEST,
    M_RESOURCE_SPANS,
    M_RESOURCE,
    M_KEY_VALUE,
    M_ANY_VALUE,
    M_ARRAY_VALUE,
    M_KEY_VALUE_LIST,
    M_ENTITY_REF,
    M_SCOPE_SPANS,
    M_SCOPE,
    M_SPAN,
    M_EVENT,
    M_LINK,
    M_STATUS,
    M_NONE /* a length-delimited field that is not a message */
};

/* AnyValue oneof members, by field number. */
enum {
    AV_UNSET = 0,
    AV_STRING = 1,
    AV_BOOL = 2,
    AV_INT = 3,
    AV_DOUBLE = 4,
    AV_ARRAY = 5,
    AV_KVLIST = 6,
    AV_BYTES = 7,
    AV_STRINDEX = 8
};

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

typedef struct {
    Buf off, data, valid;
    int64_t n, nulls;
} StrCol;

typedef struct {
    Buf off; /* int32, one per map plus the leading 0 */
    StrCol keys, vals;
    int64_t n;
} MapCol;

typedef struct {
    const uint8_t *p;
    size_t n;
} Seg;

/* The occurrences of one (merged) message: none or one held inline, more on the segment stack. */
typedef struct {
    Seg one;
    size_t start, n;
    int stacked;
} Segs;

typedef struct {
    uint32_t num;
    Seg seg;
} Item;

typedef struct {
    const uint8_t *p;
    size_t n;
    uint32_t hash;
} KeyRef;

typedef struct {
    KeyRef *keys;
    size_t n, cap;
    uint32_t *tab; /* open addressing, entry = key index + 1, used once n > SMALL_KEYSET */
    size_t tabcap;
    int hashed;
} KeySet;

typedef struct {
    const uint8_t *p, *end;
} Rd;

typedef struct {
    uint32_t num, wt;
    uint64_t v;
    const uint8_t *s;
    size_t n;
} Fld;

typedef struct {
    int kind;
    uint64_t v;
    const uint8_t *s;
    size_t n;
    Segs run; /* ArrayValue / KeyValueList occurrences when kind is AV_ARRAY / AV_KVLIST */
} AnyScan;

typedef struct {
    const uint8_t *key;
    size_t keyn;
    Segs value;
} KV;

/* An extraction spec, compiled once (ExtractSpec holds it): span attribute keys whose text gets
 * a column of its own, found by an open-addressing hash of the key bytes. */
typedef struct {
    const uint8_t *p; /* into ExtractObject.bytes */
    size_t n;
    uint64_t hash;
    uint32_t accept; /* bit (1 << AV_*) per value type that takes the key out of the map */
} ExKey;

typedef struct {
    PyObject_HEAD
    ExKey *keys;
    int n;
    uint64_t lengths; /* bit n set when some key is n bytes long (n < 64) */
    size_t maxlen;
    uint16_t *tab; /* entry = key index + 1, 0 = empty */
    uint64_t mask;
    uint8_t *bytes; /* the key bytes, back to back */
} ExtractObject;

typedef struct {
    const uint8_t *base;
    int fail;
    char msg[ERR_LEN];
    PyThreadState *released; /* non-NULL while the GIL is released */

    /* spans */
    StrCol trace_id, span_id, parent, trace_state, name, status_message, events, links;
    Buf flags, kind, start, end, status_code, dropped_attrs, dropped_events, dropped_links,
        resource_index, scope_index;
    MapCol attrs;
    const ExtractObject *ex; /* NULL: no extraction */
    StrCol *ex_cols;         /* one text column per extracted key */
    uint8_t *ex_seen;        /* per key, for the current span: 0 absent, 1 text, 2 null */
    int64_t nspans;
    /* scopes */
    Buf sc_index, sc_resource_index;
    StrCol sc_name, sc_version;
    MapCol sc_attrs;
    int64_t nscopes;
    /* resources */
    Buf r_index;
    MapCol r_attrs;
    StrCol r_schema;
    int64_t nresources;

    int64_t total, rejected;
    /* the time window; window_max_ns < 0: none (a plain decode) */
    long long window_max_ns, window_future_s;
    int nerrors;
    char errors[MAX_ERRORS][ERR_LEN];

    /* scratch */
    Buf stack; /* Seg stack for merged messages */
    Buf rs_items, ss_items, span_items;
    Buf tmp;
    KeySet ks[MAX_DEPTH + 2];
} Ctx;

/* ------------------------------------------------------------------------------------------- */
/* Failure reporting                                                                            */

static int fail_mem(Ctx *c) {
    if (!c->fail) c->fail = FAIL_MEMORY;
    return -1;
}

static int fail_msg(Ctx *c, const char *msg) {
    if (!c->fail) {
        c->fail = FAIL_INPUT;
        snprintf(c->msg, sizeof c->msg, "%s", msg);
    }
    return -1;
}

static int fail_at(Ctx *c, const uint8_t *at, const char *what) {
    if (!c->fail) {
        c->fail = FAIL_INPUT;
        snprintf(c->msg, sizeof c->msg, "malformed OTLP protobuf: %s at byte %zu", what,
                 (size_t)(at - c->base));
    }
    return -1;
}

static int fail_level(Ctx *c) {
    return fail_msg(c, "malformed OTLP protobuf: messages nested deeper than 100 levels");
}

/* ------------------------------------------------------------------------------------------- */
/* Growable buffers                                                                             */

static int buf_grow(Buf *b, size_t extra) {
    size_t need = b->len + extra;
    if (need < b->len) return -1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

#define RESERVE(c, b, n)                                                              \
    do {                                                                              \
        if ((b)->cap - (b)->len < (size_t)(n) && buf_grow((b), (size_t)(n)) < 0)      \
            return fail_mem(c);                                                       \
    } while (0)

static inline void put(Buf *b, const void *s, size_t n) {
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
}

static inline void put_c(Buf *b, char ch) { b->p[b->len++] = ch; }

static int append(Ctx *c, Buf *b, const void *s, size_t n) {
    RESERVE(c, b, n);
    put(b, s, n);
    return 0;
}

#define APPEND_LIT(c, b, lit) append((c), (b), (lit), sizeof(lit) - 1)

static int put_i64(Ctx *c, Buf *b, int64_t v) {
    RESERVE(c, b, 8);
    memcpy(b->p + b->len, &v, 8);
    b->len += 8;
    return 0;
}

static int put_i32(Ctx *c, Buf *b, int32_t v) {
    RESERVE(c, b, 4);
    memcpy(b->p + b->len, &v, 4);
    b->len += 4;
    return 0;
}

static void buf_free(Buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Arrow columns                                                                                */

static int str_init(Ctx *c, StrCol *s) { return put_i32(c, &s->off, 0); }

/* Ends the current row: its bytes are whatever was appended to s->data since the last row.
 * The validity bitmap is only built from the first null on; until then every row is valid. */
static int str_end_row_slow(Ctx *c, StrCol *s, int valid) {
    if (s->data.len > INT32_MAX)
        return fail_msg(c, "decoded request is too large: a string column exceeds 2 GiB");
    if (put_i32(c, &s->off, (int32_t)s->data.len) < 0) return -1;
    if (!valid && s->nulls == 0) {
        size_t bytes = (size_t)(s->n >> 3) + 1;
        RESERVE(c, &s->valid, bytes);
        memset(s->valid.p, 0xff, bytes);
        s->valid.len = bytes;
    }
    if (s->nulls || !valid) {
        size_t byte = (size_t)(s->n >> 3);
        if (byte >= s->valid.len) {
            RESERVE(c, &s->valid, 1);
            put_c(&s->valid, 0);
        }
        unsigned bit = 1u << (s->n & 7);
        if (valid)
            s->valid.p[byte] = (char)((unsigned char)s->valid.p[byte] | bit);
        else
            s->valid.p[byte] = (char)((unsigned char)s->valid.p[byte] & ~bit);
        s->nulls += !valid;
    }
    s->n++;
    return 0;
}

/* The same, inline for the common cases: room for the offset, and no bitmap or room in it. */
static inline int str_end_row(Ctx *c, StrCol *s, int valid) {
    size_t byte = (size_t)(s->n >> 3);
    if (s->off.cap - s->off.len >= 4 && s->data.len <= INT32_MAX &&
        (s->nulls ? byte < s->valid.len : valid)) {
        int32_t end = (int32_t)s->data.len;
        memcpy(s->off.p + s->off.len, &end, 4);
        s->off.len += 4;
        if (s->nulls) {
            unsigned char bit = (unsigned char)(1u << (s->n & 7));
            unsigned char *v = (unsigned char *)s->valid.p + byte;
            *v = valid ? (unsigned char)(*v | bit) : (unsigned char)(*v & ~bit);
            s->nulls += !valid;
        }
        s->n++;
        return 0;
    }
    return str_end_row_slow(c, s, valid);
}

static int str_add(Ctx *c, StrCol *s, const void *p, size_t n) {
    if (append(c, &s->data, p, n) < 0) return -1;
    return str_end_row(c, s, 1);
}

static int str_null(Ctx *c, StrCol *s) { return str_end_row(c, s, 0); }

static void str_free(StrCol *s) {
    buf_free(&s->off);
    buf_free(&s->data);
    buf_free(&s->valid);
}

static int map_init(Ctx *c, MapCol *m) {
    if (put_i32(c, &m->off, 0) < 0) return -1;
    if (str_init(c, &m->keys) < 0) return -1;
    return str_init(c, &m->vals);
}

static int map_end_row(Ctx *c, MapCol *m) {
    if (m->keys.n > INT32_MAX) return fail_msg(c, "decoded request is too large");
    m->n++;
    return put_i32(c, &m->off, (int32_t)m->keys.n);
}

static void map_free(MapCol *m) {
    buf_free(&m->off);
    str_free(&m->keys);
    str_free(&m->vals);
}

/* ------------------------------------------------------------------------------------------- */
/* Key sets: the first occurrence of a key in an attribute list wins                           */

static uint32_t hash_bytes(const uint8_t *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

static inline int key_eq(const KeyRef *r, const uint8_t *p, size_t n) {
    return r->n == n && (n == 0 || memcmp(r->p, p, n) == 0);
}

static void ks_reset(KeySet *k) {
    k->n = 0;
    k->hashed = 0;
}

static int ks_rehash(KeySet *k, size_t cap) {
    uint32_t *tab = calloc(cap, sizeof *tab);
    if (!tab) return -1;
    free(k->tab);
    k->tab = tab;
    k->tabcap = cap;
    for (size_t i = 0; i < k->n; i++) {
        size_t j = k->keys[i].hash & (cap - 1);
        while (tab[j]) j = (j + 1) & (cap - 1);
        tab[j] = (uint32_t)(i + 1);
    }
    return 0;
}

/* 1: added, 0: already present, -1: out of memory. */
static int ks_add(KeySet *k, const uint8_t *p, size_t n) {
    if (k->n >= UINT32_MAX - 1) return -1;
    uint32_t h = 0;
    if (!k->hashed) {
        for (size_t i = 0; i < k->n; i++)
            if (key_eq(&k->keys[i], p, n)) return 0;
        if (k->n >= SMALL_KEYSET) {
            for (size_t i = 0; i < k->n; i++) k->keys[i].hash = hash_bytes(k->keys[i].p, k->keys[i].n);
            size_t cap = 64;
            while (cap < 4 * k->n) cap *= 2;
            if (ks_rehash(k, cap) < 0) return -1;
            k->hashed = 1;
        }
    }
    if (k->hashed) {
        h = hash_bytes(p, n);
        size_t j = h & (k->tabcap - 1);
        while (k->tab[j]) {
            const KeyRef *r = &k->keys[k->tab[j] - 1];
            if (r->hash == h && key_eq(r, p, n)) return 0;
            j = (j + 1) & (k->tabcap - 1);
        }
    }
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 32;
        KeyRef *keys = realloc(k->keys, cap * sizeof *keys);
        if (!keys) return -1;
        k->keys = keys;
        k->cap = cap;
    }
    k->keys[k->n].p = p;
    k->keys[k->n].n = n;
    k->keys[k->n].hash = h;
    k->n++;
    if (k->hashed) {
        if (2 * k->n > k->tabcap) return ks_rehash(k, k->tabcap * 2) < 0 ? -1 : 1;
        size_t j = h & (k->tabcap - 1);
        while (k->tab[j]) j = (j + 1) & (k->tabcap - 1);
        k->tab[j] = (uint32_t)k->n;
    }
    return 1;
}

static void ks_free(KeySet *k) {
    free(k->keys);
    free(k->tab);
    memset(k, 0, sizeof *k);
}

/* ------------------------------------------------------------------------------------------- */
/* Segment stack                                                                                */

static inline size_t stack_top(Ctx *c) { return c->stack.len / sizeof(Seg); }
static inline void stack_pop_to(Ctx *c, size_t top) { c->stack.len = top * sizeof(Seg); }

static int stack_push(Ctx *c, Seg s) { return append(c, &c->stack, &s, sizeof s); }

static inline Seg segs_get(Ctx *c, const Segs *s, size_t i) {
    if (!s->stacked) return s->one;
    Seg out;
    memcpy(&out, c->stack.p + (s->start + i) * sizeof(Seg), sizeof out);
    return out;
}

static inline void segs_single(Segs *s, const uint8_t *p, size_t n) {
    s->one.p = p;
    s->one.n = n;
    s->start = 0;
    s->n = 1;
    s->stacked = 0;
}

/* Appends an occurrence; the caller guarantees nothing else was pushed since s started. */
static int segs_add(Ctx *c, Segs *s, const uint8_t *p, size_t n) {
    Seg x = {p, n};
    if (s->n == 0) {
        s->one = x;
        s->n = 1;
        return 0;
    }
    if (!s->stacked) {
        s->start = stack_top(c);
        if (stack_push(c, s->one) < 0) return -1;
        s->stacked = 1;
    }
    if (stack_push(c, x) < 0) return -1;
    s->n++;
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Wire format                                                                                  */

static inline uint64_t load_le64(const uint8_t *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

static inline uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Tags and lengths: at most 5 bytes, like upb. */
static inline int read_varint5(Ctx *c, Rd *r, uint64_t *out, const char *what) {
    const uint8_t *p = r->p;
    if (p < r->end && p[0] < 0x80) {
        *out = p[0];
        r->p = p + 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (p + i >= r->end) return fail_at(c, p, what);
        uint8_t b = p[i];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            r->p = p + i + 1;
            return 0;
        }
    }
    return fail_at(c, p, "tag or length longer than 5 bytes");
}

static inline int read_varint(Ctx *c, Rd *r, uint64_t *out) {
    const uint8_t *p = r->p;
    if (p < r->end && p[0] < 0x80) {
        *out = p[0];
        r->p = p + 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= r->end) return fail_at(c, p, "truncated varint");
        uint8_t b = p[i];
        v |= (uint64_t)(b & 0x7f) << (7 * i); /* bits past 64 are dropped, as upb does */
        if (!(b & 0x80)) {
            *out = v;
            r->p = p + i + 1;
            return 0;
        }
    }
    return fail_at(c, p, "varint longer than 10 bytes");
}

static int skip_group(Ctx *c, Rd *r, uint32_t num, int level);

/* Reads the next field: 1 = got one, 0 = end of message, -1 = error. Groups are skipped here and
 * reported with wt == WT_SGROUP, which every caller treats as unknown. */
static int next_field_slow(Ctx *c, Rd *r, Fld *f, int level) {
    if (r->p >= r->end) return 0;
    const uint8_t *start = r->p;
    uint64_t tag;
    if (read_varint5(c, r, &tag, "truncated tag") < 0) return -1;
    if (tag > UINT32_MAX) return fail_at(c, start, "tag out of range");
    f->num = (uint32_t)(tag >> 3);
    f->wt = (uint32_t)(tag & 7);
    if (f->num == 0) return fail_at(c, start, "field number 0");
    switch (f->wt) {
    case WT_VARINT:
        return read_varint(c, r, &f->v) < 0 ? -1 : 1;
    case WT_I64:
        if (r->end - r->p < 8) return fail_at(c, start, "truncated fixed64 field");
        f->v = load_le64(r->p);
        r->p += 8;
        return 1;
    case WT_I32:
        if (r->end - r->p < 4) return fail_at(c, start, "truncated fixed32 field");
        f->v = load_le32(r->p);
        r->p += 4;
        return 1;
    case WT_LEN: {
        uint64_t n;
        if (read_varint5(c, r, &n, "truncated length") < 0) return -1;
        if (n > (uint64_t)(r->end - r->p))
            return fail_at(c, start, "length-delimited field runs past the end of its message");
        f->s = r->p;
        f->n = (size_t)n;
        r->p += n;
        return 1;
    }
    case WT_SGROUP:
        return skip_group(c, r, f->num, level + 1) < 0 ? -1 : 1;
    case WT_EGROUP:
        return fail_at(c, start, "end-group tag without a group");
    default:
        return fail_at(c, start, "invalid wire type");
    }
}

/* The common shapes inline: a one-byte tag with a one-byte length or varint, or a fixed64. */
static inline int next_field(Ctx *c, Rd *r, Fld *f, int level) {
    const uint8_t *p = r->p;
    size_t left = (size_t)(r->end - p);
    if (left >= 2 && p[0] >= 8 && p[0] < 0x80 && p[1] < 0x80) {
        uint32_t wt = p[0] & 7;
        if (wt == WT_LEN && p[1] <= left - 2) {
            f->num = p[0] >> 3;
            f->wt = wt;
            f->s = p + 2;
            f->n = p[1];
            r->p = p + 2 + p[1];
            return 1;
        }
        if (wt == WT_VARINT) {
            f->num = p[0] >> 3;
            f->wt = wt;
            f->v = p[1];
            r->p = p + 2;
            return 1;
        }
    }
    if (left >= 9 && p[0] >= 8 && p[0] < 0x80 && (p[0] & 7) == WT_I64) {
        f->num = p[0] >> 3;
        f->wt = WT_I64;
        f->v = load_le64(p + 1);
        r->p = p + 9;
        return 1;
    }
    return next_field_slow(c, r, f, level);
}

static int skip_group(Ctx *c, Rd *r, uint32_t num, int level) {
    if (level > MAX_LEVEL) return fail_level(c);
    for (;;) {
        const uint8_t *start = r->p;
        if (start >= r->end) return fail_at(c, start, "unterminated group");
        uint64_t tag;
        if (read_varint5(c, r, &tag, "truncated tag") < 0) return -1;
        if (tag > UINT32_MAX) return fail_at(c, start, "tag out of range");
        uint32_t n = (uint32_t)(tag >> 3), wt = (uint32_t)(tag & 7);
        if (n == 0) return fail_at(c, start, "field number 0");
        if (wt == WT_EGROUP) {
            if (n != num) return fail_at(c, start, "mismatched end-group tag");
            return 0;
        }
        /* Re-read the field with the ordinary reader; an end-group was handled above. */
        r->p = start;
        Fld f;
        if (next_field_slow(c, r, &f, level) < 0) return -1;
    }
}

/* Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF), as upb and Python check. */
static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        uint8_t lo = 0x80, hi = 0xBF;
        size_t need;
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            if (b == 0xE0) lo = 0xA0;
            if (b == 0xED) hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            if (b == 0xF0) lo = 0x90;
            if (b == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i - 1 < need) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += need + 1;
    }
    return 1;
}

static inline int check_utf8(Ctx *c, const Fld *f) {
    if (utf8_valid(f->s, f->n)) return 0;
    return fail_at(c, f->s, "string field is not valid UTF-8");
}

/* ------------------------------------------------------------------------------------------- */
/* Validation of subtrees that are parsed but not used (rejected spans, replaced oneof members,
 * duplicate attributes, entity refs): the same checks upb makes, nothing else.                */

static int field_type(int msg, uint32_t num, int *sub) {
    /* Returns 1 for string, 2 for message (*sub set), 0 otherwise. Only length-delimited
     * fields matter: scalars carry no constraints beyond the wire format. */
    switch (msg) {
    case M_REQUEST:
        if (num == 1) { *sub = M_RESOURCE_SPANS; return 2; }
        return 0;
    case M_RESOURCE_SPANS:
        if (num == 1) { *sub = M_RESOURCE; return 2; }
        if (num == 2) { *sub = M_SCOPE_SPANS; return 2; }
        return num == 3;
    case M_RESOURCE:
        if (num == 1) { *sub = M_KEY_VALUE; return 2; }
        if (num == 3) { *sub = M_ENTITY_REF; return 2; }
        return 0;
    case M_KEY_VALUE:
        if (num == 2) { *sub = M_ANY_VALUE; return 2; }
        return num == 1;
    case M_ANY_VALUE:
        if (num == 5) { *sub = M_ARRAY_VALUE; return 2; }
        if (num == 6) { *sub = M_KEY_VALUE_LIST; return 2; }
        return num == 1;
    case M_ARRAY_VALUE:
        if (num == 1) { *sub = M_ANY_VALUE; return 2; }
        return 0;
    case M_KEY_VALUE_LIST:
        if (num == 1) { *sub = M_KEY_VALUE; return 2; }
        return 0;
    case M_ENTITY_REF:
        return num >= 1 && num <= 4;
    case M_SCOPE_SPANS:
        if (num == 1) { *sub = M_SCOPE; return 2; }
        if (num == 2) { *sub = M_SPAN; return 2; }
        return num == 3;
    case M_SCOPE:
        if (num == 3) { *sub = M_KEY_VALUE; return 2; }
        return num == 1 || num == 2;
    case M_SPAN:
        if (num == 9) { *sub = M_KEY_VALUE; return 2; }
        if (num == 11) { *sub = M_EVENT; return 2; }
        if (num == 13) { *sub = M_LINK; return 2; }
        if (num == 15) { *sub = M_STATUS; return 2; }
        return num == 3 || num == 5;
    case M_EVENT:
        if (num == 3) { *sub = M_KEY_VALUE; return 2; }
        return num == 2;
    case M_LINK:
        if (num == 4) { *sub = M_KEY_VALUE; return 2; }
        return num == 3;
    case M_STATUS:
        return num == 2;
    default:
        return 0;
    }
}

static int validate(Ctx *c, int msg, const uint8_t *p, size_t n, int level) {
    if (level > MAX_LEVEL) return fail_level(c);
    Rd r = {p, p + n};
    Fld f;
    int rc, sub = M_NONE;
    while ((rc = next_field(c, &r, &f, level)) > 0) {
        if (f.wt != WT_LEN) continue;
        int t = field_type(msg, f.num, &sub);
        if (t == 1) {
            if (check_utf8(c, &f) < 0) return -1;
        } else if (t == 2) {
            if (validate(c, sub, f.s, f.n, level + 1) < 0) return -1;
        }
    }
    return rc;
}

static int validate_segs(Ctx *c, int msg, const Segs *s, int level) {
    for (size_t i = 0; i < s->n; i++) {
        Seg g = segs_get(c, s, i);
        if (validate(c, msg, g.p, g.n, level) < 0) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Text formatting                                                                              */

static const char HEX[] = "0123456789abcdef";
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char DIGITS2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static int put_hex(Ctx *c, Buf *b, const uint8_t *p, size_t n) {
    if (n > SIZE_MAX / 2) return fail_mem(c);
    RESERVE(c, b, 2 * n);
    char *o = b->p + b->len;
    for (size_t i = 0; i < n; i++) {
        o[2 * i] = HEX[p[i] >> 4];
        o[2 * i + 1] = HEX[p[i] & 15];
    }
    b->len += 2 * n;
    return 0;
}

static int put_base64(Ctx *c, Buf *b, const uint8_t *p, size_t n) {
    size_t out = 4 * ((n + 2) / 3);
    RESERVE(c, b, out);
    char *o = b->p + b->len;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = B64[(v >> 6) & 63];
        *o++ = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = B64[(v >> 6) & 63];
        *o++ = '=';
    }
    b->len += out;
    return 0;
}

/* Writes the decimal digits of v at the end of out[0..20); returns the start. */
static char *u64_digits(uint64_t v, char *end) {
    char *p = end;
    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        *--p = DIGITS2[d + 1];
        *--p = DIGITS2[d];
    }
    if (v >= 10) {
        unsigned d = (unsigned)v * 2;
        *--p = DIGITS2[d + 1];
        *--p = DIGITS2[d];
    } else {
        *--p = (char)('0' + v);
    }
    return p;
}

static int put_u64(Ctx *c, Buf *b, uint64_t v) {
    char tmp[24];
    char *end = tmp + sizeof tmp;
    char *p = u64_digits(v, end);
    return append(c, b, p, (size_t)(end - p));
}

static int put_i64_text(Ctx *c, Buf *b, int64_t v) {
    char tmp[24];
    char *end = tmp + sizeof tmp;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    char *p = u64_digits(u, end);
    if (v < 0) *--p = '-';
    return append(c, b, p, (size_t)(end - p));
}

#ifdef __SIZEOF_INT128__
__extension__ typedef unsigned __int128 u128; /* GCC and Clang */

#define FAST_MAX_K 31 /* 5^31 < 2^72, so (4f + 2) * 5^k stays below 2^128 */
static u128 POW5[FAST_MAX_K + 1];

static void init_pow5(void) {
    POW5[0] = 1;
    for (int i = 1; i <= FAST_MAX_K; i++) POW5[i] = POW5[i - 1] * 5;
}

typedef struct {
    u128 lo_bound, hi_bound; /* the rounding interval of x, in units of 2^-s */
    int s, inclusive;
} Interval;

/* Does the interval scaled by 10^k contain an integer? If so, *lo and *hi are its extremes.
 * Scaling by 10^k = 5^k * 2^k is done as a multiplication by 5^k and a smaller shift. */
static inline int interval_has_int(const Interval *iv, int k, uint64_t *lo, uint64_t *hi) {
    u128 a = iv->lo_bound * POW5[k], b = iv->hi_bound * POW5[k];
    int sh = iv->s - k;
    u128 mask = sh ? ((u128)1 << sh) - 1 : 0;
    u128 l, h;
    if (iv->inclusive) {
        l = (a + mask) >> sh;
        h = b >> sh;
    } else {
        l = (a >> sh) + 1;
        h = (b & mask) ? (b >> sh) : (b >> sh) - 1;
    }
    if (l > h) return 0;
    *lo = (uint64_t)l;
    *hi = (uint64_t)h;
    return 1;
}

/* The shortest decimal that reads back as x, chosen and laid out as Python's repr (dtoa mode 0,
 * then fixed notation for -4 < decpt <= 16, else exponent notation), for 1e-13 <= |x| < 2^53:
 * nearly every measured value. Exact 128-bit arithmetic on the rounding interval of x; returns
 * the length, or -1 when x is outside that range or two candidates tie (Python formats those). */
static int shortest_fast(double x, char *out) {
    double ax = fabs(x);
    if (!(ax >= 1e-13 && ax < 9007199254740992.0)) return -1;
    uint64_t bits;
    memcpy(&bits, &ax, 8);
    int be = (int)((bits >> 52) & 0x7ff);
    uint64_t f = (bits & ((1ULL << 52) - 1)) | (1ULL << 52);
    int e = be - 1075; /* ax = f * 2^e, e <= 0 */
    Interval iv;
    iv.s = 2 - e;
    u128 X = (u128)f << 2;
    iv.hi_bound = X + 2;
    /* Just above a power of two the gap below is half the gap above. */
    iv.lo_bound = (f == (1ULL << 52) && be > 1) ? X - 1 : X - 2;
    iv.inclusive = !(f & 1); /* round-half-even reads a midpoint back as the even neighbour */

    /* With this many decimals the interval is wider than 1, so it surely holds an integer. */
    int kmax = (int)((iv.s - 2) * 0.30103) + 2;
    if (kmax > FAST_MAX_K) return -1;
    uint64_t lo, hi;
    if (!interval_has_int(&iv, kmax, &lo, &hi)) return -1;
    /* Containment is monotone in k (m at k gives 10m at k+1): search the smallest k, trying the
     * top first since measured values usually need all 16-17 digits. */
    int k_lo = 0, k_hi = kmax; /* invariant: contains at k_hi, whose extremes are lo, hi */
    uint64_t l2, h2;
    if (!interval_has_int(&iv, kmax - 2, &l2, &h2)) {
        k_lo = kmax - 1;
    } else {
        k_hi = kmax - 2;
        lo = l2;
        hi = h2;
    }
    while (k_lo < k_hi) {
        int mid = (k_lo + k_hi) / 2;
        if (interval_has_int(&iv, mid, &l2, &h2)) {
            k_hi = mid;
            lo = l2;
            hi = h2;
        } else {
            k_lo = mid + 1;
        }
    }
    int k = k_hi;
    uint64_t m = lo;
    if (lo != hi) {
        /* Several candidates: the nearest to x; a tie is left to Python. */
        int sh = iv.s - k;
        u128 cx = X * POW5[k];
        if (sh == 0) {
            m = (uint64_t)cx;
        } else {
            u128 half = (u128)1 << (sh - 1);
            if ((cx & (((u128)1 << sh) - 1)) == half) return -1;
            m = (uint64_t)((cx + half) >> sh);
        }
        if (m < lo || m > hi) return -1;
    }
    char digits[24];
    char *dend = digits + sizeof digits;
    char *d = u64_digits(m, dend);
    int nd = (int)(dend - d);
    int decpt = nd - k;
    char *o = out;
    if (signbit(x)) *o++ = '-';
    if (decpt <= -4) {
        /* Exponent notation: d[.ddd]e-XX, at least two exponent digits. */
        int exp10 = decpt - 1;
        *o++ = d[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, d + 1, (size_t)(nd - 1));
            o += nd - 1;
        }
        *o++ = 'e';
        *o++ = '-';
        int ex = -exp10;
        if (ex >= 100) *o++ = (char)('0' + ex / 100);
        *o++ = (char)('0' + (ex / 10) % 10);
        *o++ = (char)('0' + ex % 10);
    } else if (k == 0) {
        memcpy(o, d, (size_t)nd);
        o += nd;
        *o++ = '.';
        *o++ = '0';
    } else if (decpt > 0) {
        memcpy(o, d, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, d + decpt, (size_t)(nd - decpt));
        o += nd - decpt;
    } else {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, d, (size_t)nd);
        o += nd;
    }
    return (int)(o - out);
}
#else
static void init_pow5(void) {}
static int shortest_fast(double x, char *out) {
    (void)x;
    (void)out;
    return -1;
}
#endif

/* repr(x) for finite x; out must hold 32 bytes. Returns the length or -1. */
static int format_finite(Ctx *c, double x, char *out) {
    if (x == 0) {
        if (signbit(x)) {
            memcpy(out, "-0.0", 4);
            return 4;
        }
        memcpy(out, "0.0", 3);
        return 3;
    }
    int n = shortest_fast(x, out);
    if (n >= 0) return n;
    /* Python's own dtoa keeps shared state and needs the GIL. Once taken back it is kept for
     * the rest of the request: waiting for it again per double (up to the 5 ms switch interval
     * while another thread runs) would let a payload of odd doubles stall the decoder. */
    if (c && c->released) {
        PyEval_RestoreThread(c->released);
        c->released = NULL;
    }
    char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (s) {
        size_t len = strlen(s);
        if (len < 32) {
            memcpy(out, s, len);
            n = (int)len;
        }
        PyMem_Free(s);
    } else {
        PyErr_Clear();
    }
    if (n < 0 && c) return fail_mem(c);
    return n;
}

/* The attribute text of a double: repr(). */
static int put_double_text(Ctx *c, Buf *b, double x) {
    if (isnan(x)) return APPEND_LIT(c, b, "nan");
    if (isinf(x)) return x > 0 ? APPEND_LIT(c, b, "inf") : APPEND_LIT(c, b, "-inf");
    char tmp[32];
    int n = format_finite(c, x, tmp);
    if (n < 0) return -1;
    return append(c, b, tmp, (size_t)n);
}

/* A double inside JSON: a number, or a string for the values JSON cannot hold. */
static int put_double_json(Ctx *c, Buf *b, double x) {
    if (isnan(x)) return APPEND_LIT(c, b, "\"NaN\"");
    if (isinf(x)) return x > 0 ? APPEND_LIT(c, b, "\"Infinity\"") : APPEND_LIT(c, b, "\"-Infinity\"");
    return put_double_text(c, b, x);
}

/* A JSON string as json.dumps(ensure_ascii=False) writes it (input is valid UTF-8). */
static int put_json_string(Ctx *c, Buf *b, const uint8_t *s, size_t n) {
    if (n > (SIZE_MAX - 2) / 6) return fail_mem(c);
    RESERVE(c, b, 6 * n + 2);
    char *o = b->p + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') {
            *o++ = (char)ch;
            continue;
        }
        *o++ = '\\';
        switch (ch) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = HEX[ch >> 4];
            *o++ = HEX[ch & 15];
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* KeyValue and AnyValue                                                                        */

static int kv_scan(Ctx *c, const uint8_t *p, size_t n, int level, KV *kv) {
    kv->key = NULL;
    kv->keyn = 0;
    kv->value.n = 0;
    kv->value.stacked = 0;
    Rd r = {p, p + n};
    Fld f;
    int rc;
    while ((rc = next_field(c, &r, &f, level)) > 0) {
        if (f.wt != WT_LEN) continue;
        if (f.num == 1) {
            if (check_utf8(c, &f) < 0) return -1;
            kv->key = f.s;
            kv->keyn = f.n;
        } else if (f.num == 2) {
            if (segs_add(c, &kv->value, f.s, f.n) < 0) return fail_mem(c);
        }
    }
    return rc;
}

/* The run of a replaced array/kvlist member was parsed by upb too: check it, then forget it. */
static int any_drop_run(Ctx *c, AnyScan *a, int level) {
    if (a->kind == AV_ARRAY || a->kind == AV_KVLIST) {
        int msg = a->kind == AV_ARRAY ? M_ARRAY_VALUE : M_KEY_VALUE_LIST;
        if (validate_segs(c, msg, &a->run, level + 1) < 0) return -1;
        if (a->run.stacked) stack_pop_to(c, a->run.start);
        a->run.n = 0;
        a->run.stacked = 0;
    }
    return 0;
}

static int any_scan(Ctx *c, const Segs *segs, int level, AnyScan *a) {
    a->kind = AV_UNSET;
    a->run.n = 0;
    a->run.stacked = 0;
    if (level > MAX_LEVEL) return fail_level(c);
    for (size_t i = 0; i < segs->n; i++) {
        Seg g = segs_get(c, segs, i);
        Rd r = {g.p, g.p + g.n};
        Fld f;
        int rc;
        while ((rc = next_field(c, &r, &f, level)) > 0) {
            uint32_t want;
            switch (f.num) {
            case AV_STRING: case AV_ARRAY: case AV_KVLIST: case AV_BYTES: want = WT_LEN; break;
            case AV_BOOL: case AV_INT: case AV_STRINDEX: want = WT_VARINT; break;
            case AV_DOUBLE: want = WT_I64; break;
            default: continue;
            }
            if (f.wt != want) continue;
            if (f.num == AV_ARRAY || f.num == AV_KVLIST) {
                if (a->kind != (int)f.num) {
                    if (any_drop_run(c, a, level) < 0) return -1;
                    a->kind = (int)f.num;
                }
                if (segs_add(c, &a->run, f.s, f.n) < 0) return fail_mem(c);
                continue;
            }
            if (f.num == AV_STRING && check_utf8(c, &f) < 0) return -1;
            if (any_drop_run(c, a, level) < 0) return -1;
            a->kind = (int)f.num;
            a->v = f.v;
            a->s = f.s;
            a->n = f.n;
        }
        if (rc < 0) return -1;
    }
    return 0;
}

static int put_json_value(Ctx *c, Buf *out, const Segs *segs, int depth, int level);

/* An ArrayValue / KeyValueList (merged occurrences `run`, at `level`) owned by an AnyValue at
 * `depth`, as compact JSON. */
static int put_json_container(Ctx *c, Buf *out, int kind, const Segs *run, int depth, int level) {
    int first = 1;
    KeySet *ks = &c->ks[depth];
    if (kind == AV_ARRAY) {
        if (APPEND_LIT(c, out, "[") < 0) return -1;
    } else {
        ks_reset(ks);
        if (APPEND_LIT(c, out, "{") < 0) return -1;
    }
    for (size_t i = 0; i < run->n; i++) {
        Seg g = segs_get(c, run, i);
        Rd r = {g.p, g.p + g.n};
        Fld f;
        int rc;
        while ((rc = next_field(c, &r, &f, level)) > 0) {
            if (f.num != 1 || f.wt != WT_LEN) continue;
            if (kind == AV_ARRAY) {
                if (!first && APPEND_LIT(c, out, ",") < 0) return -1;
                first = 0;
                Segs one;
                segs_single(&one, f.s, f.n);
                if (put_json_value(c, out, &one, depth + 1, level + 1) < 0) return -1;
                continue;
            }
            size_t top = stack_top(c);
            KV kv;
            if (kv_scan(c, f.s, f.n, level + 1, &kv) < 0) return -1;
            int added = ks_add(ks, kv.key, kv.keyn);
            if (added < 0) return fail_mem(c);
            if (added) {
                if (!first && APPEND_LIT(c, out, ",") < 0) return -1;
                first = 0;
                if (put_json_string(c, out, kv.key, kv.keyn) < 0) return -1;
                if (APPEND_LIT(c, out, ":") < 0) return -1;
                if (put_json_value(c, out, &kv.value, depth + 1, level + 2) < 0) return -1;
            } else if (validate_segs(c, M_ANY_VALUE, &kv.value, level + 2) < 0) {
                return -1;
            }
            stack_pop_to(c, top);
        }
        if (rc < 0) return -1;
    }
    return kind == AV_ARRAY ? APPEND_LIT(c, out, "]") : APPEND_LIT(c, out, "}");
}

static int fail_depth(Ctx *c) {
    return fail_msg(c, "attribute value nested deeper than 32 levels");
}

static int put_json_value(Ctx *c, Buf *out, const Segs *segs, int depth, int level) {
    if (depth > MAX_DEPTH) return fail_depth(c);
    size_t top = stack_top(c);
    AnyScan a;
    if (any_scan(c, segs, level, &a) < 0) return -1;
    int rc;
    double d;
    switch (a.kind) {
    case AV_STRING: rc = put_json_string(c, out, a.s, a.n); break;
    case AV_BOOL: rc = a.v ? APPEND_LIT(c, out, "true") : APPEND_LIT(c, out, "false"); break;
    case AV_INT: rc = put_i64_text(c, out, (int64_t)a.v); break;
    case AV_DOUBLE:
        memcpy(&d, &a.v, 8);
        rc = put_double_json(c, out, d);
        break;
    case AV_BYTES:
        rc = APPEND_LIT(c, out, "\"");
        if (rc == 0) rc = put_base64(c, out, a.s, a.n);
        if (rc == 0) rc = APPEND_LIT(c, out, "\"");
        break;
    case AV_ARRAY:
    case AV_KVLIST: rc = put_json_container(c, out, a.kind, &a.run, depth, level + 1); break;
    default: rc = APPEND_LIT(c, out, "null"); /* unset, or a string-table index (profiles only) */
    }
    stack_pop_to(c, top);
    return rc;
}

/* A value of one of these types has no text: the attribute reads as NULL. */
static inline int text_is_null(int kind) { return kind == AV_UNSET || kind == AV_STRINDEX; }

/* The attribute text of a top-level value; *kind is set to its AnyValue member (AV_*). */
static int put_value_text(Ctx *c, Buf *out, const Segs *segs, int level, int *kind) {
    size_t top = stack_top(c);
    AnyScan a;
    if (any_scan(c, segs, level, &a) < 0) return -1;
    *kind = a.kind;
    int rc;
    double d;
    switch (a.kind) {
    case AV_STRING: rc = append(c, out, a.s, a.n); break;
    case AV_BOOL: rc = a.v ? APPEND_LIT(c, out, "true") : APPEND_LIT(c, out, "false"); break;
    case AV_INT: rc = put_i64_text(c, out, (int64_t)a.v); break;
    case AV_DOUBLE:
        memcpy(&d, &a.v, 8);
        rc = put_double_text(c, out, d);
        break;
    case AV_BYTES: rc = put_base64(c, out, a.s, a.n); break;
    case AV_ARRAY:
    case AV_KVLIST: rc = put_json_container(c, out, a.kind, &a.run, 1, level + 1); break;
    default: rc = 0; /* unset, or a string-table index (profiles only): NULL */
    }
    stack_pop_to(c, top);
    return rc;
}

/* A scanned KeyValue (its value at `level`) into a map column (ks dedups the list). */
static int map_add_scanned(Ctx *c, MapCol *m, KeySet *ks, const KV *kv, int level) {
    int added = ks_add(ks, kv->key, kv->keyn);
    if (added < 0) return fail_mem(c);
    if (!added) return validate_segs(c, M_ANY_VALUE, &kv->value, level);
    int kind;
    if (str_add(c, &m->keys, kv->key, kv->keyn) < 0) return -1;
    if (put_value_text(c, &m->vals.data, &kv->value, level, &kind) < 0) return -1;
    return str_end_row(c, &m->vals, !text_is_null(kind));
}

/* One KeyValue of an attribute list into a map column. */
static int map_add_kv(Ctx *c, MapCol *m, KeySet *ks, const uint8_t *p, size_t n, int level) {
    size_t top = stack_top(c);
    KV kv;
    if (kv_scan(c, p, n, level, &kv) < 0) return -1;
    if (map_add_scanned(c, m, ks, &kv, level + 1) < 0) return -1;
    stack_pop_to(c, top);
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Extracted span attributes                                                                    */

/* Word at a time: spec keys are 10-40 bytes sharing long prefixes ("gen_ai.latency.time_in_"),
 * so every byte takes part. The last word overlaps the one before rather than being assembled
 * byte by byte (a partial copy stalls the load that follows it). */
static inline uint64_t ex_hash(const uint8_t *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL * (uint64_t)(n + 1), w = 0;
    if (n >= 8) {
        const uint8_t *last = p + n - 8;
        for (; p < last; p += 8) {
            memcpy(&w, p, 8);
            h = (h ^ w) * 0xff51afd7ed558ccdULL;
            h ^= h >> 32;
        }
        memcpy(&w, last, 8);
    } else {
        for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
    }
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

/* The index of key p[0..n) in the spec, or -1. */
static inline int ex_find(const ExtractObject *x, const uint8_t *p, size_t n) {
    if (n < 64 ? !((x->lengths >> n) & 1) : n > x->maxlen) return -1;
    uint64_t h = ex_hash(p, n);
    for (uint64_t j = h & x->mask;; j = (j + 1) & x->mask) {
        unsigned e = x->tab[j];
        if (!e) return -1;
        const ExKey *k = &x->keys[e - 1];
        if (k->hash == h && k->n == n && memcmp(k->p, p, n) == 0) return (int)e - 1;
    }
}

/* One KeyValue of a span's attribute list. A key of the extraction spec has its text written to
 * its own column, and stays in the map too unless its value type is one the spec accepts; its
 * first occurrence is tracked in ex_seen (spec keys never reach ks, which keeps ks short). */
static int span_add_kv(Ctx *c, KeySet *ks, const uint8_t *p, size_t n, int level) {
    const ExtractObject *x = c->ex;
    if (!x) return map_add_kv(c, &c->attrs, ks, p, n, level);
    size_t top = stack_top(c);
    KV kv;
    if (kv_scan(c, p, n, level, &kv) < 0) return -1;
    int i = ex_find(x, kv.key, kv.keyn);
    if (i < 0 || c->ex_seen[i]) {
        int rc = i < 0 ? map_add_scanned(c, &c->attrs, ks, &kv, level + 1)
                       : validate_segs(c, M_ANY_VALUE, &kv.value, level + 1);
        if (rc < 0) return -1;
        stack_pop_to(c, top);
        return 0;
    }
    StrCol *col = &c->ex_cols[i];
    size_t from = col->data.len;
    int kind;
    if (put_value_text(c, &col->data, &kv.value, level + 1, &kind) < 0) return -1;
    int is_null = text_is_null(kind);
    c->ex_seen[i] = is_null ? 2 : 1;
    if (!(x->keys[i].accept & (1u << kind))) {
        MapCol *m = &c->attrs;
        size_t len = col->data.len - from;
        if (str_add(c, &m->keys, kv.key, kv.keyn) < 0) return -1;
        if (len && append(c, &m->vals.data, col->data.p + from, len) < 0) return -1;
        if (str_end_row(c, &m->vals, !is_null) < 0) return -1;
    }
    stack_pop_to(c, top);
    return 0;
}

/* Ends the current span's row of every extracted column: NULL where the key was absent. */
static int ex_end_row(Ctx *c) {
    for (int i = 0; i < c->ex->n; i++) {
        if (str_end_row(c, &c->ex_cols[i], c->ex_seen[i] == 1) < 0) return -1;
        c->ex_seen[i] = 0;
    }
    return 0;
}

/* One KeyValue of an attribute list into a JSON object (events, links). */
static int json_add_kv(Ctx *c, Buf *out, KeySet *ks, const uint8_t *p, size_t n, int level,
                       int *first) {
    size_t top = stack_top(c);
    KV kv;
    if (kv_scan(c, p, n, level, &kv) < 0) return -1;
    int added = ks_add(ks, kv.key, kv.keyn);
    if (added < 0) return fail_mem(c);
    if (!added) {
        if (validate_segs(c, M_ANY_VALUE, &kv.value, level + 1) < 0) return -1;
    } else {
        int kind;
        if (!*first && APPEND_LIT(c, out, ",") < 0) return -1;
        *first = 0;
        if (put_json_string(c, out, kv.key, kv.keyn) < 0) return -1;
        if (APPEND_LIT(c, out, ":") < 0) return -1;
        c->tmp.len = 0;
        if (put_value_text(c, &c->tmp, &kv.value, level + 1, &kind) < 0) return -1;
        if (text_is_null(kind)) {
            if (APPEND_LIT(c, out, "null") < 0) return -1;
        } else if (put_json_string(c, out, (const uint8_t *)c->tmp.p, c->tmp.len) < 0) {
            return -1;
        }
    }
    stack_pop_to(c, top);
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Events and links (JSON text columns)                                                        */

static int put_event(Ctx *c, Buf *out, const uint8_t *p, size_t n, int level) {
    uint64_t time = 0, dropped = 0;
    const uint8_t *name = NULL;
    size_t namen = 0;
    Rd r = {p, p + n};
    Fld f;
    int rc;
    while ((rc = next_field(c, &r, &f, level)) > 0) {
        if (f.num == 1 && f.wt == WT_I64) time = f.v;
        else if (f.num == 2 && f.wt == WT_LEN) {
            if (check_utf8(c, &f) < 0) return -1;
            name = f.s;
            namen = f.n;
        } else if (f.num == 4 && f.wt == WT_VARINT) dropped = (uint32_t)f.v;
    }
    if (rc < 0) return -1;
    if (APPEND_LIT(c, out, "{\"time_unix_nano\":") < 0 || put_u64(c, out, time) < 0 ||
        APPEND_LIT(c, out, ",\"name\":") < 0 || put_json_string(c, out, name, namen) < 0 ||
        APPEND_LIT(c, out, ",\"attributes\":{") < 0)
        return -1;
    KeySet *ks = &c->ks[0];
    ks_reset(ks);
    int first = 1;
    r.p = p;
    while ((rc = next_field(c, &r, &f, level)) > 0)
        if (f.num == 3 && f.wt == WT_LEN && json_add_kv(c, out, ks, f.s, f.n, level + 1, &first) < 0)
            return -1;
    if (rc < 0) return -1;
    if (APPEND_LIT(c, out, "},\"dropped_attributes_count\":") < 0 || put_u64(c, out, dropped) < 0)
        return -1;
    return APPEND_LIT(c, out, "}");
}

static int put_link(Ctx *c, Buf *out, const uint8_t *p, size_t n, int level) {
    uint64_t dropped = 0, flags = 0;
    Seg trace = {NULL, 0}, span = {NULL, 0}, state = {NULL, 0};
    Rd r = {p, p + n};
    Fld f;
    int rc;
    while ((rc = next_field(c, &r, &f, level)) > 0) {
        if (f.wt == WT_LEN && f.num >= 1 && f.num <= 3) {
            Seg s = {f.s, f.n};
            if (f.num == 1) trace = s;
            else if (f.num == 2) span = s;
            else {
                if (check_utf8(c, &f) < 0) return -1;
                state = s;
            }
        } else if (f.num == 5 && f.wt == WT_VARINT) dropped = (uint32_t)f.v;
        else if (f.num == 6 && f.wt == WT_I32) flags = f.v;
    }
    if (rc < 0) return -1;
    if (APPEND_LIT(c, out, "{\"trace_id\":\"") < 0 || put_hex(c, out, trace.p, trace.n) < 0 ||
        APPEND_LIT(c, out, "\",\"span_id\":\"") < 0 || put_hex(c, out, span.p, span.n) < 0 ||
        APPEND_LIT(c, out, "\",\"trace_state\":") < 0 ||
        put_json_string(c, out, state.p, state.n) < 0 || APPEND_LIT(c, out, ",\"attributes\":{") < 0)
        return -1;
    KeySet *ks = &c->ks[0];
    ks_reset(ks);
    int first = 1;
    r.p = p;
    while ((rc = next_field(c, &r, &f, level)) > 0)
        if (f.num == 4 && f.wt == WT_LEN && json_add_kv(c, out, ks, f.s, f.n, level + 1, &first) < 0)
            return -1;
    if (rc < 0) return -1;
    if (APPEND_LIT(c, out, "},\"dropped_attributes_count\":") < 0 || put_u64(c, out, dropped) < 0 ||
        APPEND_LIT(c, out, ",\"flags\":") < 0 || put_u64(c, out, flags) < 0)
        return -1;
    return APPEND_LIT(c, out, "}");
}

/* ------------------------------------------------------------------------------------------- */
/* Spans                                                                                        */

static int push_item(Ctx *c, Buf *items, uint32_t num, const uint8_t *p, size_t n) {
    Item it = {num, {p, n}};
    return append(c, items, &it, sizeof it);
}

static inline Item get_item(const Buf *items, size_t i) {
    Item it;
    memcpy(&it, items->p + i * sizeof it, sizeof it);
    return it;
}

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static int reject(Ctx *c, size_t r_pos, size_t s_pos, size_t i_pos, const char *reason) {
    c->rejected++;
    if (c->nerrors < MAX_ERRORS) {
        snprintf(c->errors[c->nerrors], ERR_LEN, "resource_spans[%zu].scope_spans[%zu].spans[%zu]: %s",
                 r_pos, s_pos, i_pos, reason);
        c->nerrors++;
    }
    return 0;
}

static int decode_span(Ctx *c, const uint8_t *p, size_t n, int32_t r_index, int32_t s_index,
                       size_t r_pos, size_t s_pos, size_t i_pos) {
    const int level = 3;
    Seg trace = {NULL, 0}, span = {NULL, 0}, state = {NULL, 0}, parent = {NULL, 0},
        name = {NULL, 0};
    uint64_t start = 0, end = 0, flags = 0, d_attrs = 0, d_events = 0, d_links = 0;
    int32_t kind = 0;
    size_t n_events = 0, n_links = 0;
    Buf *items = &c->span_items;
    items->len = 0;
    Rd r = {p, p + n};
    Fld f;
    int rc;
    while ((rc = next_field(c, &r, &f, level)) > 0) {
        switch (f.num) {
        case 1: if (f.wt == WT_LEN) { trace.p = f.s; trace.n = f.n; } break;
        case 2: if (f.wt == WT_LEN) { span.p = f.s; span.n = f.n; } break;
        case 3:
            if (f.wt == WT_LEN) {
                if (check_utf8(c, &f) < 0) return -1;
                state.p = f.s;
                state.n = f.n;
            }
            break;
        case 4: if (f.wt == WT_LEN) { parent.p = f.s; parent.n = f.n; } break;
        case 5:
            if (f.wt == WT_LEN) {
                if (check_utf8(c, &f) < 0) return -1;
                name.p = f.s;
                name.n = f.n;
            }
            break;
        case 6: if (f.wt == WT_VARINT) kind = (int32_t)(uint32_t)f.v; break;
        case 7: if (f.wt == WT_I64) start = f.v; break;
        case 8: if (f.wt == WT_I64) end = f.v; break;
        case 9: case 11: case 13: case 15:
            if (f.wt == WT_LEN) {
                if (push_item(c, items, f.num, f.s, f.n) < 0) return -1;
                n_events += f.num == 11;
                n_links += f.num == 13;
            }
            break;
        case 10: if (f.wt == WT_VARINT) d_attrs = (uint32_t)f.v; break;
        case 12: if (f.wt == WT_VARINT) d_events = (uint32_t)f.v; break;
        case 14: if (f.wt == WT_VARINT) d_links = (uint32_t)f.v; break;
        case 16: if (f.wt == WT_I32) flags = f.v; break;
        default: break;
        }
    }
    if (rc < 0) return -1;
    c->total++;
    size_t nitems = items->len / sizeof(Item);

    /* Validation: same rules, order and words as otlp_decode._span_rejection. */
    char reason[ERR_LEN];
    reason[0] = 0;
    if (trace.n != 16)
        snprintf(reason, sizeof reason, "trace_id must be 16 bytes, got %zu", trace.n);
    else if (all_zero(trace.p, 16))
        snprintf(reason, sizeof reason, "trace_id must not be all zeros");
    else if (span.n != 8)
        snprintf(reason, sizeof reason, "span_id must be 8 bytes, got %zu", span.n);
    else if (all_zero(span.p, 8))
        snprintf(reason, sizeof reason, "span_id must not be all zeros");
    else if (parent.n != 0 && parent.n != 8)
        snprintf(reason, sizeof reason, "parent_span_id must be 0 or 8 bytes, got %zu", parent.n);
    else if (name.n == 0)
        snprintf(reason, sizeof reason, "name is required");
    else if (start == 0)
        snprintf(reason, sizeof reason, "start_time_unix_nano is required");
    else if (start > (uint64_t)INT64_MAX)
        snprintf(reason, sizeof reason, "start_time_unix_nano is out of range (> 2^63-1)");
    else if (end < start)
        snprintf(reason, sizeof reason, "end_time_unix_nano is before start_time_unix_nano");
    else if (end > (uint64_t)INT64_MAX)
        snprintf(reason, sizeof reason, "end_time_unix_nano is out of range (> 2^63-1)");
    else if (c->window_max_ns >= 0 && start < MIN_SPAN_NS)
        snprintf(reason, sizeof reason, "start_time_unix_nano is before 2000-01-01T00:00:00Z");
    else if (c->window_max_ns >= 0 && end > (uint64_t)c->window_max_ns)
        snprintf(reason, sizeof reason, "end_time_unix_nano is more than %lld s after receipt",
                 c->window_future_s);
    else {
        size_t k = 0;
        for (size_t i = 0; i < nitems && !reason[0]; i++) {
            Item it = get_item(items, i);
            if (it.num != 11) continue;
            uint64_t t = 0;
            Rd er = {it.seg.p, it.seg.p + it.seg.n};
            while ((rc = next_field(c, &er, &f, level + 1)) > 0)
                if (f.num == 1 && f.wt == WT_I64) t = f.v;
            if (rc < 0) return -1;
            if (t > (uint64_t)INT64_MAX)
                snprintf(reason, sizeof reason,
                         "events[%zu].time_unix_nano is out of range (> 2^63-1)", k);
            k++;
        }
    }
    if (reason[0]) {
        /* upb parsed the whole span: so must we, to fail on the same inputs. */
        for (size_t i = 0; i < nitems; i++) {
            Item it = get_item(items, i);
            int msg = it.num == 9 ? M_KEY_VALUE : it.num == 11 ? M_EVENT : it.num == 13 ? M_LINK : M_STATUS;
            if (validate(c, msg, it.seg.p, it.seg.n, level + 1) < 0) return -1;
        }
        return reject(c, r_pos, s_pos, i_pos, reason);
    }

    /* Status: all occurrences merge. */
    Seg smsg = {NULL, 0};
    int32_t scode = 0;
    for (size_t i = 0; i < nitems; i++) {
        Item it = get_item(items, i);
        if (it.num != 15) continue;
        Rd sr = {it.seg.p, it.seg.p + it.seg.n};
        while ((rc = next_field(c, &sr, &f, level + 1)) > 0) {
            if (f.num == 2 && f.wt == WT_LEN) {
                if (check_utf8(c, &f) < 0) return -1;
                smsg.p = f.s;
                smsg.n = f.n;
            } else if (f.num == 3 && f.wt == WT_VARINT) {
                scode = (int32_t)(uint32_t)f.v;
            }
        }
        if (rc < 0) return -1;
    }

    if (put_hex(c, &c->trace_id.data, trace.p, 16) < 0 || str_end_row(c, &c->trace_id, 1) < 0) return -1;
    if (put_hex(c, &c->span_id.data, span.p, 8) < 0 || str_end_row(c, &c->span_id, 1) < 0) return -1;
    if (parent.n == 0 || all_zero(parent.p, parent.n)) {
        if (str_null(c, &c->parent) < 0) return -1;
    } else if (put_hex(c, &c->parent.data, parent.p, 8) < 0 || str_end_row(c, &c->parent, 1) < 0) {
        return -1;
    }
    if ((state.n ? str_add(c, &c->trace_state, state.p, state.n) : str_null(c, &c->trace_state)) < 0)
        return -1;
    if (put_i64(c, &c->flags, (int64_t)flags) < 0) return -1;
    if (str_add(c, &c->name, name.p, name.n) < 0) return -1;
    if (put_i32(c, &c->kind, kind) < 0) return -1;
    if (put_i64(c, &c->start, (int64_t)start) < 0 || put_i64(c, &c->end, (int64_t)end) < 0) return -1;
    if (put_i32(c, &c->status_code, scode) < 0) return -1;
    if ((smsg.n ? str_add(c, &c->status_message, smsg.p, smsg.n) : str_null(c, &c->status_message)) < 0)
        return -1;

    KeySet *ks = &c->ks[0];
    ks_reset(ks);
    for (size_t i = 0; i < nitems; i++) {
        Item it = get_item(items, i);
        if (it.num == 9 && span_add_kv(c, ks, it.seg.p, it.seg.n, level + 1) < 0) return -1;
    }
    if (map_end_row(c, &c->attrs) < 0) return -1;
    if (c->ex && ex_end_row(c) < 0) return -1;

    if (put_i64(c, &c->dropped_attrs, (int64_t)d_attrs) < 0 ||
        put_i64(c, &c->dropped_events, (int64_t)d_events) < 0 ||
        put_i64(c, &c->dropped_links, (int64_t)d_links) < 0)
        return -1;

    for (int pass = 0; pass < 2; pass++) {
        uint32_t num = pass == 0 ? 11 : 13;
        StrCol *col = pass == 0 ? &c->events : &c->links;
        if ((pass == 0 ? n_events : n_links) == 0) {
            if (str_null(c, col) < 0) return -1;
            continue;
        }
        if (APPEND_LIT(c, &col->data, "[") < 0) return -1;
        int first = 1;
        for (size_t i = 0; i < nitems; i++) {
            Item it = get_item(items, i);
            if (it.num != num) continue;
            if (!first && APPEND_LIT(c, &col->data, ",") < 0) return -1;
            first = 0;
            rc = pass == 0 ? put_event(c, &col->data, it.seg.p, it.seg.n, level + 1)
                           : put_link(c, &col->data, it.seg.p, it.seg.n, level + 1);
            if (rc < 0) return -1;
        }
        if (APPEND_LIT(c, &col->data, "]") < 0 || str_end_row(c, col, 1) < 0) return -1;
    }
    if (put_i32(c, &c->resource_index, r_index) < 0 || put_i32(c, &c->scope_index, s_index) < 0)
        return -1;
    c->nspans++;
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Scopes and resources                                                                         */

static int decode_scope_spans(Ctx *c, const uint8_t *p, size_t n, int32_t r_index, size_t r_pos,
                              size_t s_pos) {
    const int level = 2;
    Buf *items = &c->ss_items;
    items->len = 0;
    Rd r = {p, p + n};
    Fld f;
    int rc;
    while ((rc = next_field(c, &r, &f, level)) > 0) {
        if (f.wt != WT_LEN) continue;
        if (f.num == 1 || f.num == 2) {
            if (push_item(c, items, f.num, f.s, f.n) < 0) return -1;
        } else if (f.num == 3 && check_utf8(c, &f) < 0) {
            return -1;
        }
    }
    if (rc < 0) return -1;
    size_t nitems = items->len / sizeof(Item);
    if (c->nscopes >= INT32_MAX) return fail_msg(c, "too many scopes in one request");
    int32_t s_index = (int32_t)c->nscopes;

    /* The scope row; all occurrences of `scope` merge. */
    Seg name = {NULL, 0}, version = {NULL, 0};
    KeySet *ks = &c->ks[0];
    ks_reset(ks);
    for (size_t i = 0; i < nitems; i++) {
        Item it = get_item(items, i);
        if (it.num != 1) continue;
        Rd sr = {it.seg.p, it.seg.p + it.seg.n};
        while ((rc = next_field(c, &sr, &f, level + 1)) > 0) {
            if (f.wt != WT_LEN) continue;
            if (f.num == 1 || f.num == 2) {
                if (check_utf8(c, &f) < 0) return -1;
                Seg s = {f.s, f.n};
                if (f.num == 1) name = s;
                else version = s;
            } else if (f.num == 3) {
                if (map_add_kv(c, &c->sc_attrs, ks, f.s, f.n, level + 2) < 0) return -1;
            }
        }
        if (rc < 0) return -1;
    }
    if (map_end_row(c, &c->sc_attrs) < 0) return -1;
    if (put_i32(c, &c->sc_index, s_index) < 0 || put_i32(c, &c->sc_resource_index, r_index) < 0)
        return -1;
    if (str_add(c, &c->sc_name, name.p, name.n) < 0) return -1;
    if (str_add(c, &c->sc_version, version.p, version.n) < 0) return -1;
    c->nscopes++;

    size_t i_pos = 0;
    for (size_t i = 0; i < nitems; i++) {
        Item it = get_item(items, i);
        if (it.num != 2) continue;
        if (decode_span(c, it.seg.p, it.seg.n, r_index, s_index, r_pos, s_pos, i_pos++) < 0)
            return -1;
    }
    return 0;
}

static int decode_resource_spans(Ctx *c, const uint8_t *p, size_t n, size_t r_pos) {
    const int level = 1;
    Buf *items = &c->rs_items;
    items->len = 0;
    Seg schema = {NULL, 0};
    Rd r = {p, p + n};
    Fld f;
    int rc;
    while ((rc = next_field(c, &r, &f, level)) > 0) {
        if (f.wt != WT_LEN) continue;
        if (f.num == 1 || f.num == 2) {
            if (push_item(c, items, f.num, f.s, f.n) < 0) return -1;
        } else if (f.num == 3) {
            if (check_utf8(c, &f) < 0) return -1;
            schema.p = f.s;
            schema.n = f.n;
        }
    }
    if (rc < 0) return -1;
    size_t nitems = items->len / sizeof(Item);
    if (c->nresources >= INT32_MAX) return fail_msg(c, "too many resources in one request");
    int32_t r_index = (int32_t)c->nresources;

    /* The resource row; all occurrences of `resource` merge. */
    KeySet *ks = &c->ks[0];
    ks_reset(ks);
    for (size_t i = 0; i < nitems; i++) {
        Item it = get_item(items, i);
        if (it.num != 1) continue;
        Rd rr = {it.seg.p, it.seg.p + it.seg.n};
        while ((rc = next_field(c, &rr, &f, level + 1)) > 0) {
            if (f.wt != WT_LEN) continue;
            if (f.num == 1) {
                if (map_add_kv(c, &c->r_attrs, ks, f.s, f.n, level + 2) < 0) return -1;
            } else if (f.num == 3) {
                if (validate(c, M_ENTITY_REF, f.s, f.n, level + 2) < 0) return -1;
            }
        }
        if (rc < 0) return -1;
    }
    if (map_end_row(c, &c->r_attrs) < 0) return -1;
    if (put_i32(c, &c->r_index, r_index) < 0) return -1;
    if (str_add(c, &c->r_schema, schema.p, schema.n) < 0) return -1;
    c->nresources++;

    size_t s_pos = 0;
    for (size_t i = 0; i < nitems; i++) {
        Item it = get_item(items, i);
        if (it.num != 2) continue;
        if (decode_scope_spans(c, it.seg.p, it.seg.n, r_index, r_pos, s_pos++) < 0) return -1;
    }
    return 0;
}

static int decode_request(Ctx *c, const uint8_t *p, size_t n) {
    Rd r = {p, p + n};
    Fld f;
    int rc;
    size_t r_pos = 0;
    while ((rc = next_field(c, &r, &f, 0)) > 0)
        if (f.num == 1 && f.wt == WT_LEN && decode_resource_spans(c, f.s, f.n, r_pos++) < 0) return -1;
    return rc;
}

/* ------------------------------------------------------------------------------------------- */
/* Python glue                                                                                  */

static StrCol *ctx_strcols(Ctx *c, int i) {
    StrCol *all[] = {&c->trace_id, &c->span_id,  &c->parent,  &c->trace_state,
                     &c->name,     &c->status_message, &c->events, &c->links,
                     &c->sc_name,  &c->sc_version, &c->r_schema};
    return i < (int)(sizeof all / sizeof all[0]) ? all[i] : NULL;
}

static MapCol *ctx_mapcols(Ctx *c, int i) {
    MapCol *all[] = {&c->attrs, &c->sc_attrs, &c->r_attrs};
    return i < 3 ? all[i] : NULL;
}

static Buf *ctx_bufs(Ctx *c, int i) {
    Buf *all[] = {&c->flags, &c->kind, &c->start, &c->end, &c->status_code, &c->dropped_attrs,
                  &c->dropped_events, &c->dropped_links, &c->resource_index, &c->scope_index,
                  &c->sc_index, &c->sc_resource_index, &c->r_index, &c->stack, &c->rs_items,
                  &c->ss_items, &c->span_items, &c->tmp};
    return i < (int)(sizeof all / sizeof all[0]) ? all[i] : NULL;
}

static int ctx_init(Ctx *c) {
    StrCol *s;
    MapCol *m;
    for (int i = 0; (s = ctx_strcols(c, i)); i++)
        if (str_init(c, s) < 0) return -1;
    for (int i = 0; (m = ctx_mapcols(c, i)); i++)
        if (map_init(c, m) < 0) return -1;
    if (c->ex) {
        c->ex_cols = calloc((size_t)c->ex->n, sizeof *c->ex_cols);
        c->ex_seen = calloc((size_t)c->ex->n, 1);
        if (!c->ex_cols || !c->ex_seen) return fail_mem(c);
        for (int i = 0; i < c->ex->n; i++)
            if (str_init(c, &c->ex_cols[i]) < 0) return -1;
    }
    return 0;
}

static void ctx_free(Ctx *c) {
    StrCol *s;
    MapCol *m;
    Buf *b;
    for (int i = 0; (s = ctx_strcols(c, i)); i++) str_free(s);
    for (int i = 0; (m = ctx_mapcols(c, i)); i++) map_free(m);
    for (int i = 0; (b = ctx_bufs(c, i)); i++) buf_free(b);
    for (int i = 0; i < MAX_DEPTH + 2; i++) ks_free(&c->ks[i]);
    if (c->ex_cols)
        for (int i = 0; i < c->ex->n; i++) str_free(&c->ex_cols[i]);
    free(c->ex_cols);
    free(c->ex_seen);
}

/* A read-only buffer that owns the memory a column was built in, so that pyarrow can wrap it
 * without the copy (and the fresh pages) a bytes object would cost. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} OwnedBuffer;

static int owned_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    OwnedBuffer *b = (OwnedBuffer *)self;
    return PyBuffer_FillInfo(view, self, b->p ? b->p : (char *)"", b->len, 1, flags);
}

static void owned_dealloc(PyObject *self) {
    free(((OwnedBuffer *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static Py_ssize_t owned_length(PyObject *self) { return ((OwnedBuffer *)self)->len; }

static PyBufferProcs owned_as_buffer = {owned_getbuffer, NULL};
static PySequenceMethods owned_as_sequence = {.sq_length = owned_length};

static PyTypeObject OwnedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ingest._otlp_fast.Buffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_dealloc = owned_dealloc,
    .tp_as_sequence = &owned_as_sequence,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only memory of one decoded column (supports the buffer protocol).",
};

/* Hands the memory of b to a new Buffer object; b is left empty (ctx_free skips it). */
static PyObject *take_buffer(Buf *b) {
    OwnedBuffer *o = PyObject_New(OwnedBuffer, &OwnedBufferType);
    if (!o) return NULL;
    if (b->p && b->cap - b->len > 65536) {
        char *shrunk = realloc(b->p, b->len ? b->len : 1);
        if (shrunk) b->p = shrunk;
    }
    o->p = b->p;
    o->len = (Py_ssize_t)b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

/* (validity or None, offsets, data, null_count) */
static PyObject *str_parts(StrCol *s) {
    PyObject *valid;
    if (s->nulls) {
        valid = take_buffer(&s->valid);
    } else {
        valid = Py_None;
        Py_INCREF(valid);
    }
    if (!valid) return NULL;
    return Py_BuildValue("(NNNL)", valid, take_buffer(&s->off), take_buffer(&s->data),
                         (long long)s->nulls);
}

/* (offsets, key parts, value parts, number of entries) */
static PyObject *map_parts(MapCol *m) {
    return Py_BuildValue("(NNNL)", take_buffer(&m->off), str_parts(&m->keys), str_parts(&m->vals),
                         (long long)m->keys.n);
}

static int set_item(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *build_result(Ctx *c) {
    PyObject *out = PyDict_New(), *spans = PyDict_New(), *scopes = PyDict_New(),
             *resources = PyDict_New(), *errors = PyList_New(0),
             *extracted = PyTuple_New(c->ex ? c->ex->n : 0);
    if (!out || !spans || !scopes || !resources || !errors || !extracted) goto error;
    for (int i = 0; c->ex && i < c->ex->n; i++) {
        PyObject *parts = str_parts(&c->ex_cols[i]);
        if (!parts) goto error;
        PyTuple_SET_ITEM(extracted, i, parts);
    }
    for (int i = 0; i < c->nerrors; i++) {
        PyObject *e = PyUnicode_DecodeUTF8(c->errors[i], (Py_ssize_t)strlen(c->errors[i]), "replace");
        if (!e || PyList_Append(errors, e) < 0) {
            Py_XDECREF(e);
            goto error;
        }
        Py_DECREF(e);
    }
    if (set_item(spans, "trace_id", str_parts(&c->trace_id)) < 0 ||
        set_item(spans, "span_id", str_parts(&c->span_id)) < 0 ||
        set_item(spans, "parent_span_id", str_parts(&c->parent)) < 0 ||
        set_item(spans, "trace_state", str_parts(&c->trace_state)) < 0 ||
        set_item(spans, "flags", take_buffer(&c->flags)) < 0 ||
        set_item(spans, "name", str_parts(&c->name)) < 0 ||
        set_item(spans, "kind", take_buffer(&c->kind)) < 0 ||
        set_item(spans, "start_ns", take_buffer(&c->start)) < 0 ||
        set_item(spans, "end_ns", take_buffer(&c->end)) < 0 ||
        set_item(spans, "status_code", take_buffer(&c->status_code)) < 0 ||
        set_item(spans, "status_message", str_parts(&c->status_message)) < 0 ||
        set_item(spans, "attributes", map_parts(&c->attrs)) < 0 ||
        set_item(spans, "dropped_attributes_count", take_buffer(&c->dropped_attrs)) < 0 ||
        set_item(spans, "dropped_events_count", take_buffer(&c->dropped_events)) < 0 ||
        set_item(spans, "dropped_links_count", take_buffer(&c->dropped_links)) < 0 ||
        set_item(spans, "events", str_parts(&c->events)) < 0 ||
        set_item(spans, "links", str_parts(&c->links)) < 0 ||
        set_item(spans, "resource_index", take_buffer(&c->resource_index)) < 0 ||
        set_item(spans, "scope_index", take_buffer(&c->scope_index)) < 0 ||
        PyDict_SetItemString(spans, "extracted", extracted) < 0 ||
        set_item(scopes, "scope_index", take_buffer(&c->sc_index)) < 0 ||
        set_item(scopes, "resource_index", take_buffer(&c->sc_resource_index)) < 0 ||
        set_item(scopes, "scope_name", str_parts(&c->sc_name)) < 0 ||
        set_item(scopes, "scope_version", str_parts(&c->sc_version)) < 0 ||
        set_item(scopes, "scope_attributes", map_parts(&c->sc_attrs)) < 0 ||
        set_item(resources, "resource_index", take_buffer(&c->r_index)) < 0 ||
        set_item(resources, "resource_attributes", map_parts(&c->r_attrs)) < 0 ||
        set_item(resources, "resource_schema_url", str_parts(&c->r_schema)) < 0)
        goto error;
    if (set_item(out, "n_spans", PyLong_FromLongLong(c->nspans)) < 0 ||
        set_item(out, "n_scopes", PyLong_FromLongLong(c->nscopes)) < 0 ||
        set_item(out, "n_resources", PyLong_FromLongLong(c->nresources)) < 0 ||
        set_item(out, "total_spans", PyLong_FromLongLong(c->total)) < 0 ||
        set_item(out, "rejected_spans", PyLong_FromLongLong(c->rejected)) < 0)
        goto error;
    if (PyDict_SetItemString(out, "errors", errors) < 0 ||
        PyDict_SetItemString(out, "spans", spans) < 0 ||
        PyDict_SetItemString(out, "scopes", scopes) < 0 ||
        PyDict_SetItemString(out, "resources", resources) < 0)
        goto error;
    Py_DECREF(errors);
    Py_DECREF(extracted);
    Py_DECREF(spans);
    Py_DECREF(scopes);
    Py_DECREF(resources);
    return out;
error:
    Py_XDECREF(out);
    Py_XDECREF(spans);
    Py_XDECREF(scopes);
    Py_XDECREF(resources);
    Py_XDECREF(errors);
    Py_XDECREF(extracted);
    return NULL;
}

/* Raised for bad input; otlp_decode.py turns it into OtlpDecodeError. */
static PyObject *DecodeError = NULL;

/* Extract(pairs): compiles a tuple of (key, kind) pairs, kind one of "str", "int", "float",
 * "bool". otlp_decode.ExtractSpec validates first and says what is wrong in more words. */

static void extract_dealloc(PyObject *self) {
    ExtractObject *x = (ExtractObject *)self;
    free(x->keys);
    free(x->tab);
    free(x->bytes);
    Py_TYPE(self)->tp_free(self);
}

static int extract_kind(PyObject *kind, uint32_t *accept) {
    const char *s = PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
    if (!s) {
        PyErr_Clear();
        s = "";
    }
    if (strcmp(s, "str") == 0) *accept = 1u << AV_STRING;
    else if (strcmp(s, "int") == 0) *accept = 1u << AV_INT;
    else if (strcmp(s, "float") == 0) *accept = 1u << AV_DOUBLE | 1u << AV_INT;
    else if (strcmp(s, "bool") == 0) *accept = 1u << AV_BOOL;
    else {
        PyErr_Format(PyExc_ValueError, "unknown extract kind %R", kind);
        return -1;
    }
    return 0;
}

static PyObject *extract_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"pairs", NULL};
    PyObject *pairs;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!:Extract", kwlist, &PyTuple_Type, &pairs))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(pairs);
    if (n > MAX_EXTRACT) {
        PyErr_Format(PyExc_ValueError, "an extract spec holds at most %d keys", MAX_EXTRACT);
        return NULL;
    }
    ExtractObject *x = (ExtractObject *)type->tp_alloc(type, 0);
    if (!x) return NULL;
    x->n = (int)n;
    x->lengths = 0;
    x->maxlen = 0;
    size_t cap = 16;
    while (cap < 4 * (size_t)n) cap *= 2;
    x->mask = cap - 1;
    x->keys = calloc(n ? (size_t)n : 1, sizeof *x->keys);
    x->tab = calloc(cap, sizeof *x->tab);
    const char **text = calloc(n ? (size_t)n : 1, sizeof *text);
    if (!x->keys || !x->tab || !text) {
        PyErr_NoMemory();
        goto error;
    }
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
            PyErr_SetString(PyExc_ValueError, "each extract pair must be a (key: str, kind: str) tuple");
            goto error;
        }
        Py_ssize_t len;
        text[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &len);
        if (!text[i]) goto error;
        if (len == 0) {
            PyErr_SetString(PyExc_ValueError, "an extract key must not be empty");
            goto error;
        }
        if (extract_kind(PyTuple_GET_ITEM(pair, 1), &x->keys[i].accept) < 0) goto error;
        x->keys[i].n = (size_t)len;
        total += (size_t)len;
    }
    x->bytes = malloc(total ? total : 1);
    if (!x->bytes) {
        PyErr_NoMemory();
        goto error;
    }
    uint8_t *at = x->bytes;
    for (Py_ssize_t i = 0; i < n; i++) {
        ExKey *k = &x->keys[i];
        memcpy(at, text[i], k->n);
        k->p = at;
        at += k->n;
        k->hash = ex_hash(k->p, k->n);
        if (k->n < 64) x->lengths |= 1ULL << k->n;
        if (k->n > x->maxlen) x->maxlen = k->n;
        uint64_t j = k->hash & x->mask;
        for (; x->tab[j]; j = (j + 1) & x->mask) {
            const ExKey *o = &x->keys[x->tab[j] - 1];
            if (o->n == k->n && memcmp(o->p, k->p, k->n) == 0) {
                PyErr_Format(PyExc_ValueError, "duplicate extract key %R",
                             PyTuple_GET_ITEM(PyTuple_GET_ITEM(pairs, i), 0));
                goto error;
            }
        }
        x->tab[j] = (uint16_t)(i + 1);
    }
    free(text);
    return (PyObject *)x;
error:
    free(text);
    Py_DECREF(x);
    return NULL;
}

static Py_ssize_t extract_length(PyObject *self) { return ((ExtractObject *)self)->n; }

static PySequenceMethods extract_as_sequence = {.sq_length = extract_length};

static PyTypeObject ExtractType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ingest._otlp_fast.Extract",
    .tp_basicsize = sizeof(ExtractObject),
    .tp_dealloc = extract_dealloc,
    .tp_as_sequence = &extract_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = extract_new,
    .tp_doc = "Extract(pairs): a compiled tuple of (key, kind) pairs for decode(extract=...).",
};

static PyObject *py_decode(PyObject *self, PyObject *args, PyObject *kwds) {
    (void)self;
    static char *kwlist[] = {"data", "extract", "window_max_ns", "window_future_s", NULL};
    PyObject *arg, *extract = Py_None;
    long long window_max_ns = -1, window_future_s = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OLL:decode", kwlist, &arg, &extract,
                                     &window_max_ns, &window_future_s))
        return NULL;
    if (extract != Py_None && !PyObject_TypeCheck(extract, &ExtractType)) {
        PyErr_SetString(PyExc_TypeError, "extract must be an Extract object or None");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Ctx *c = calloc(1, sizeof *c);
    if (!c) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    c->base = view.buf;
    c->window_max_ns = window_max_ns;
    c->window_future_s = window_future_s;
    /* The args tuple keeps `extract` alive while the GIL is released; it is immutable. */
    if (extract != Py_None && ((ExtractObject *)extract)->n > 0) c->ex = (ExtractObject *)extract;
    PyObject *result = NULL;
    if (ctx_init(c) == 0) {
        /* Only immutable input may be read without the GIL. */
        int release = PyBytes_Check(arg);
        if (release) c->released = PyEval_SaveThread();
        decode_request(c, view.buf, (size_t)view.len);
        if (c->released) {
            PyEval_RestoreThread(c->released);
            c->released = NULL;
        }
    }
    if (c->fail == FAIL_NONE) {
        result = build_result(c);
    } else if (c->fail == FAIL_MEMORY) {
        PyErr_NoMemory();
    } else if (c->fail == FAIL_INPUT) {
        PyErr_SetString(DecodeError, c->msg);
    }
    ctx_free(c);
    free(c);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *py_format_double(PyObject *self, PyObject *arg) {
    (void)self;
    double x = PyFloat_AsDouble(arg);
    if (x == -1.0 && PyErr_Occurred()) return NULL;
    Ctx c;
    memset(&c, 0, sizeof c);
    Buf b = {NULL, 0, 0};
    if (put_double_text(&c, &b, x) < 0) {
        buf_free(&b);
        return PyErr_NoMemory();
    }
    PyObject *s = PyUnicode_FromStringAndSize(b.p, (Py_ssize_t)b.len);
    buf_free(&b);
    return s;
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))py_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(data, extract=None, window_max_ns=-1, window_future_s=0) -> dict of Arrow "
     "buffers for a serialized ExportTraceServiceRequest; with window_max_ns >= 0, spans "
     "starting before 2000-01-01 or ending after window_max_ns are rejected."},
    {"format_double", py_format_double, METH_O,
     "format_double(x) -> the attribute text of a double (equals repr(x)); for tests."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlp_fast",
                                    "OTLP trace decoder into Arrow buffers (see otlp_decode.py).",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__otlp_fast(void) {
    init_pow5();
    if (PyType_Ready(&OwnedBufferType) < 0 || PyType_Ready(&ExtractType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (!DecodeError) {
        DecodeError = PyErr_NewException("ingest._otlp_fast.DecodeError", PyExc_ValueError, NULL);
        if (!DecodeError) goto error;
    }
    Py_INCREF(DecodeError);
    if (PyModule_AddObject(m, "DecodeError", DecodeError) < 0) {
        Py_DECREF(DecodeError);
        goto error;
    }
    if (PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0) goto error;
    if (PyModule_AddIntConstant(m, "MAX_EXTRACT", MAX_EXTRACT) < 0) goto error;
    Py_INCREF(&ExtractType);
    if (PyModule_AddObject(m, "Extract", (PyObject *)&ExtractType) < 0) {
        Py_DECREF(&ExtractType);
        goto error;
    }
    return m;
error:
    Py_DECREF(m);
    return NULL;
}
