/* Kineto events -> columns, in C: the fast path of `kineto_native`.
 *
 * `scan(data, cats, routed)` reads a JSON array of Chrome-trace events
 * (`[{...}, {...}]`, as `kineto_stream` cuts them) and returns one row per
 * event, column by column, as bytes the caller views with numpy: the
 * event's category code (its index in `cats`), its phase (the `ph`
 * character: `X` for a complete event, 0 where `ph` is absent or not one
 * character), its times (int64 nanoseconds, from the decimal text
 * exactly: see `exact_ns`), ids, name and launch dimensions, and where the
 * event lies in `data` (so the few events the collectives need, and the
 * instants and metadata events, can be decoded in full by msgspec).
 *
 * It reads only what it can read exactly as the msgspec decoders do, and
 * returns None for anything else: a piece that is not valid JSON (a wrong
 * cut), a time written as text or one it cannot turn into int64
 * nanoseconds exactly, an escaped key, a name that is not UTF-8, a
 * duplicated key. The caller then decodes that piece with msgspec,
 * whose lenient fallbacks decide. So this file never has to agree with
 * them on odd input, only on the common case, and tests compare the two
 * paths' tables on every trace at hand.
 *
 * Fields are checked only where the tables read them: on complete events
 * of the first `routed` categories, and on instants (`ph` i or I: their
 * name, pid, tid, time, and the args of PyTorch's allocator events, in
 * the `instant_*` columns, one row per instant). Other events need only
 * their `cat` and `ph` (they are counted and skipped), and metadata
 * events (`M`) nothing: they are decoded by msgspec, and, like instants,
 * never counted among the other categories.
 *
 * The loop over the events runs without the GIL, so the collector's
 * sampling thread is not held up while its trace watcher ingests.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What a field's value was. */
enum { V_ABSENT = 0, V_NULL, V_INT, V_NUM, V_STR, V_OTHER, V_OBJECT };

/* Bits of the `present` column: which values an event has. */
enum {
    P_TS = 1 << 0, P_DUR = 1 << 1, P_PID = 1 << 2, P_TID = 1 << 3, P_NAME = 1 << 4,
    P_EXTERNAL = 1 << 5, P_CORRELATION = 1 << 6, P_DEVICE = 1 << 7, P_STREAM = 1 << 8,
    P_BYTES = 1 << 9, P_GRID = 1 << 10, P_BLOCK = 1 << 11, P_COLLECTIVE = 1 << 12,
};

#define CAT_MISSING (-1)
#define CAT_OTHER (-2)
#define MAX_DEPTH 256
#define MAX_NUMBER_CHARS 400

typedef struct {
    const char *start; /* the value's first byte (a string's opening quote) */
    Py_ssize_t len;    /* its raw JSON length */
    int kind;
    int escaped;       /* a string with backslash escapes */
    int64_t i;         /* V_INT */
    double d;          /* V_INT, V_NUM */
    /* V_INT, V_NUM: the decimal, as `mant` * 10**`power` (its first 19
     * significant digits), `sticky` where nonzero digits after those were
     * dropped, `whole_overflow` where digits before the point were. */
    uint64_t mant;
    long power;
    int negative, sticky, whole_overflow;
} value_t;

/* Bits of the `instant_present` column: which allocator args an instant has. */
enum {
    I_ALLOC = 1 << 0, I_TOTAL_ALLOCATED = 1 << 1, I_TOTAL_RESERVED = 1 << 2, I_ADDR = 1 << 3,
    I_DEVICE_ID = 1 << 4, I_DEVICE_TYPE = 1 << 5,
};

typedef struct {
    value_t external, correlation, device, stream, bytes, grid, block, collective;
    /* PyTorch's allocator events (instants named [memory]). */
    value_t alloc, total_allocated, total_reserved, addr, device_id, device_type;
} args_t;

typedef struct {
    value_t ph, cat, name, pid, tid, ts, dur, args_value;
    args_t args;
} event_t;

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} buf_t;

/* The output columns, one value per event (offsets: one more). */
typedef struct {
    Py_ssize_t n, cap;
    int8_t *cat;
    uint8_t *phase;
    uint16_t *present, *odd;
    int64_t *ts, *dur; /* nanoseconds */
    int64_t *pid, *tid, *external, *correlation, *device, *stream, *bytes;
    int64_t *span_start, *span_end;
    int32_t *name_off, *grid_off, *block_off;
    buf_t name_data, grid_data, block_data;
    /* One row per instant: its event's row and its allocator args. */
    Py_ssize_t in, icap;
    int64_t *i_row, *i_alloc, *i_total_allocated, *i_total_reserved, *i_addr, *i_device_id, *i_device_type;
    uint8_t *i_present, *i_odd;
} columns_t;

/* Powers of ten as integers, to 10**19 (the largest a uint64 holds). */
static const uint64_t POW10_INT[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL,
    1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
    100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
    1000000000000000000ULL, 10000000000000000000ULL,
};

static const double POW10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* ---- output buffers ------------------------------------------------------- */

static int buf_put(buf_t *b, const char *src, Py_ssize_t n) {
    if (n == 0) return 0; /* an empty name: nothing to copy (and no buffer yet, maybe) */
    if (b->len + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *data = realloc(b->data, (size_t)cap);
        if (!data) return -1;
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

#define GROW(field, count)                                                     \
    do {                                                                       \
        void *grown = realloc(c->field, (size_t)(count) * sizeof(*c->field));  \
        if (!grown) return -1;                                                 \
        c->field = grown;                                                      \
    } while (0)

static int columns_grow(columns_t *c, Py_ssize_t at_least) {
    Py_ssize_t cap = c->cap ? c->cap * 2 : at_least;
    GROW(cat, cap); GROW(phase, cap); GROW(present, cap); GROW(odd, cap);
    GROW(ts, cap); GROW(dur, cap);
    GROW(pid, cap); GROW(tid, cap); GROW(external, cap); GROW(correlation, cap);
    GROW(device, cap); GROW(stream, cap); GROW(bytes, cap);
    GROW(span_start, cap); GROW(span_end, cap);
    GROW(name_off, cap + 1); GROW(grid_off, cap + 1); GROW(block_off, cap + 1);
    c->cap = cap;
    return 0;
}

static int instants_grow(columns_t *c) {
    Py_ssize_t cap = c->icap ? c->icap * 2 : 256;
    GROW(i_row, cap); GROW(i_alloc, cap); GROW(i_total_allocated, cap); GROW(i_total_reserved, cap);
    GROW(i_addr, cap); GROW(i_device_id, cap); GROW(i_device_type, cap); GROW(i_present, cap); GROW(i_odd, cap);
    c->icap = cap;
    return 0;
}

static void columns_free(columns_t *c) {
    free(c->cat); free(c->phase); free(c->present); free(c->odd); free(c->ts); free(c->dur);
    free(c->pid); free(c->tid); free(c->external); free(c->correlation);
    free(c->device); free(c->stream); free(c->bytes);
    free(c->span_start); free(c->span_end);
    free(c->name_off); free(c->grid_off); free(c->block_off);
    free(c->name_data.data); free(c->grid_data.data); free(c->block_data.data);
    free(c->i_row); free(c->i_alloc); free(c->i_total_allocated); free(c->i_total_reserved);
    free(c->i_addr); free(c->i_device_id); free(c->i_device_type); free(c->i_present); free(c->i_odd);
}

/* ---- JSON tokens ------------------------------------------------------------
 * Each returns the position after what it read, or NULL where the text is
 * not what the fast path reads (not JSON, or JSON it leaves to msgspec). */

static inline const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static inline int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string from its opening quote; sets *escaped where it has escapes. */
static const char *scan_string(const char *p, const char *end, int *escaped) {
    p++;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c == '\\') {
            *escaped = 1;
            if (p + 1 >= end) return NULL;
            char e = p[1];
            if (e == 'u') {
                if (p + 6 > end || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5])) return NULL;
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
            } else {
                return NULL;
            }
        } else if (c < 0x20) {
            return NULL; /* a raw control character: not JSON */
        } else {
            p++;
        }
    }
    return NULL;
}

/* A number (JSON's grammar) into v: V_INT where it is an integer token
 * within int64, else V_NUM; v->d is its double, correctly rounded. */
static const char *scan_number(const char *p, const char *end, value_t *v) {
    const char *start = p;
    int negative = 0, integer = 1, overflow = 0, significant = 0, sticky = 0, whole_overflow = 0;
    uint64_t mantissa = 0;
    int fraction_digits = 0;
    long exponent = 0;

    if (p < end && *p == '-') { negative = 1; p++; }
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            if (significant < 19) mantissa = mantissa * 10 + (uint64_t)(*p - '0');
            else overflow = whole_overflow = 1;
            significant++;
            p++;
        }
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        integer = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') {
            if (mantissa == 0 && *p == '0') { fraction_digits++; p++; continue; } /* leading zeros */
            if (significant < 19) { mantissa = mantissa * 10 + (uint64_t)(*p - '0'); fraction_digits++; }
            else { overflow = 1; sticky |= *p != '0'; }
            significant++;
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = 0;
        p++;
        int exponent_negative = 0;
        if (p < end && (*p == '+' || *p == '-')) { exponent_negative = *p == '-'; p++; }
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') {
            if (exponent < 100000) exponent = exponent * 10 + (*p - '0');
            p++;
        }
        if (exponent_negative) exponent = -exponent;
    }
    v->start = start;
    v->len = p - start;
    v->mant = mantissa;
    v->power = exponent - fraction_digits;
    v->negative = negative;
    v->sticky = sticky;
    v->whole_overflow = whole_overflow;

    /* The integer value, where it is one within int64. */
    v->kind = V_NUM;
    if (integer && !overflow) {
        if (!negative && mantissa <= (uint64_t)INT64_MAX) { v->kind = V_INT; v->i = (int64_t)mantissa; }
        else if (negative && mantissa <= (uint64_t)INT64_MAX + 1) { v->kind = V_INT; v->i = (int64_t)(0 - mantissa); }
    }
    /* The double: exact by one IEEE operation where the mantissa and the
     * power of ten are both exact doubles (Clinger's fast path), else by
     * strtod, which rounds correctly too. */
    long power = exponent - fraction_digits;
    if (!overflow && mantissa <= (1ULL << 53) && power >= -22 && power <= 22) {
        double d = (double)mantissa;
        d = power < 0 ? d / POW10[-power] : d * POW10[power];
        v->d = negative ? -d : d;
    } else {
        char text[MAX_NUMBER_CHARS + 1];
        if (v->len > MAX_NUMBER_CHARS) return NULL;
        memcpy(text, start, (size_t)v->len);
        text[v->len] = '\0';
        v->d = strtod(text, NULL);
        if (v->d == HUGE_VAL || v->d == -HUGE_VAL) return NULL; /* beyond a double: msgspec's fallback decides */
    }
    return p;
}

static const char *skip_value(const char *p, const char *end, int depth);

static const char *skip_container(const char *p, const char *end, int depth) {
    char close = *p == '{' ? '}' : ']';
    int object = *p == '{';
    if (depth > MAX_DEPTH) return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
        if (object) {
            int escaped = 0;
            if (p >= end || *p != '"') return NULL;
            p = scan_string(p, end, &escaped);
            if (!p) return NULL;
            p = skip_ws(p, end);
            if (p >= end || *p != ':') return NULL;
            p = skip_ws(p + 1, end);
        }
        p = skip_value(p, end, depth + 1);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == close) return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
}

static const char *skip_literal(const char *p, const char *end, const char *word, Py_ssize_t len) {
    if (end - p < len || memcmp(p, word, (size_t)len) != 0) return NULL;
    return p + len;
}

/* Any value, its kind and raw span recorded in v. */
static const char *read_value(const char *p, const char *end, value_t *v, int depth) {
    if (p >= end) return NULL;
    const char *start = p;
    v->escaped = 0;
    switch (*p) {
    case '"':
        v->kind = V_STR;
        p = scan_string(p, end, &v->escaped);
        break;
    case '{':
        v->kind = V_OBJECT;
        p = skip_container(p, end, depth);
        break;
    case '[':
        v->kind = V_OTHER;
        p = skip_container(p, end, depth);
        break;
    case 't':
        v->kind = V_OTHER;
        p = skip_literal(p, end, "true", 4);
        break;
    case 'f':
        v->kind = V_OTHER;
        p = skip_literal(p, end, "false", 5);
        break;
    case 'n':
        v->kind = V_NULL;
        p = skip_literal(p, end, "null", 4);
        break;
    default:
        return scan_number(p, end, v);
    }
    if (!p) return NULL;
    v->start = start;
    v->len = p - start;
    return p;
}

static const char *skip_value(const char *p, const char *end, int depth) {
    value_t ignored;
    return read_value(p, end, &ignored, depth);
}

/* ---- objects ------------------------------------------------------------- */

#define KEY_IS(literal) (key_len == (Py_ssize_t)sizeof(literal) - 1 && memcmp(key, literal, sizeof(literal) - 1) == 0)

/* Reads an object's members, handing each known key's value to `pick`,
 * which returns the slot (or NULL: skip the value). A key seen twice, or
 * an escaped key, refuses the object. */
typedef value_t *(*pick_fn)(void *target, const char *key, Py_ssize_t key_len);
static value_t *pick_arg(void *target, const char *key, Py_ssize_t key_len);

static const char *read_object(const char *p, const char *end, void *target, pick_fn pick, args_t *args) {
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        int escaped = 0;
        if (p >= end || *p != '"') return NULL;
        const char *key = p + 1;
        p = scan_string(p, end, &escaped);
        if (!p || escaped) return NULL;
        Py_ssize_t key_len = p - 1 - key;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return NULL;
        p = skip_ws(p + 1, end);
        value_t *slot = pick(target, key, key_len);
        if (slot && slot->kind != V_ABSENT) return NULL; /* a duplicated key */
        if (slot && args && key_len == 4 && key[0] == 'a' && p < end && *p == '{') {
            /* An event's `args`: its members read in the same pass. */
            const char *start = p;
            p = read_object(p, end, args, pick_arg, NULL);
            slot->kind = V_OBJECT;
            slot->start = start;
            slot->len = p ? p - start : 0;
        } else if (slot) {
            p = read_value(p, end, slot, 2);
        } else {
            p = skip_value(p, end, 2);
        }
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
}

static value_t *pick_arg(void *target, const char *key, Py_ssize_t key_len) {
    args_t *a = target;
    switch (key_len) {
    case 4: if (KEY_IS("grid")) return &a->grid; if (KEY_IS("Addr")) return &a->addr; break;
    case 5:
        if (KEY_IS("block")) return &a->block;
        if (KEY_IS("bytes")) return &a->bytes;
        if (KEY_IS("Bytes")) return &a->alloc;
        break;
    case 6: if (KEY_IS("device")) return &a->device; if (KEY_IS("stream")) return &a->stream; break;
    case 9: if (KEY_IS("Device Id")) return &a->device_id; break;
    case 11:
        if (KEY_IS("External id")) return &a->external;
        if (KEY_IS("correlation")) return &a->correlation;
        if (KEY_IS("Device Type")) return &a->device_type;
        break;
    case 14: if (KEY_IS("Total Reserved")) return &a->total_reserved; break;
    case 15:
        if (KEY_IS("Collective name")) return &a->collective;
        if (KEY_IS("Total Allocated")) return &a->total_allocated;
        break;
    }
    return NULL;
}

static value_t *pick_event_key(void *target, const char *key, Py_ssize_t key_len) {
    event_t *e = target;
    switch (key_len) {
    case 2: if (KEY_IS("ph")) return &e->ph; if (KEY_IS("ts")) return &e->ts; break;
    case 3:
        if (KEY_IS("cat")) return &e->cat;
        if (KEY_IS("pid")) return &e->pid;
        if (KEY_IS("tid")) return &e->tid;
        if (KEY_IS("dur")) return &e->dur;
        break;
    case 4: if (KEY_IS("name")) return &e->name; if (KEY_IS("args")) return &e->args_value; break;
    }
    return NULL;
}

/* The event's members; `args` read member by member when it is an object. */
static const char *read_event(const char *p, const char *end, event_t *e) {
    memset(e, 0, sizeof(*e));
    return read_object(p, end, e, pick_event_key, &e->args);
}

/* ---- strings into columns ------------------------------------------------ */

/* Well-formed UTF-8 (no overlong forms, surrogates or values past U+10FFFF). */
static int valid_utf8(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        /* Names are mostly ASCII: 8 bytes at a time while they are. */
        uint64_t word;
        while (n - i >= 8) {
            memcpy(&word, s + i, 8);
            if (word & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int more;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { more = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { more = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { more = 3; cp = c & 0x07; }
        else return 0;
        if (i + more >= n) return 0;
        for (int k = 1; k <= more; k++) {
            unsigned char cc = s[i + k];
            if ((cc & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += more + 1;
    }
    return 1;
}

static int hex4(const char *p) {
    int value = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        value = value * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return value;
}

/* A string value's text, escapes undone, appended to `out`; -1 where it is
 * not text the fast path reads (not UTF-8, a lone surrogate), -2 on no memory. */
static int put_string(buf_t *out, const value_t *v) {
    const char *s = v->start + 1;
    Py_ssize_t n = v->len - 2;
    if (!valid_utf8((const unsigned char *)s, n)) return -1;
    if (!v->escaped) return buf_put(out, s, n) ? -2 : 0;
    const char *end = s + n;
    while (s < end) {
        const char *run = s;
        while (s < end && *s != '\\') s++;
        if (s > run && buf_put(out, run, s - run)) return -2;
        if (s >= end) break;
        char e = s[1], c;
        if (e != 'u') {
            switch (e) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: c = e; /* " \ / */
            }
            if (buf_put(out, &c, 1)) return -2;
            s += 2;
            continue;
        }
        uint32_t cp = (uint32_t)hex4(s + 2);
        s += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - s < 6 || s[0] != '\\' || s[1] != 'u') return -1;
            uint32_t low = (uint32_t)hex4(s + 2);
            if (low < 0xDC00 || low > 0xDFFF) return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            s += 6;
        }
        char utf8[4];
        int len;
        if (cp < 0x80) { utf8[0] = (char)cp; len = 1; }
        else if (cp < 0x800) { utf8[0] = (char)(0xC0 | (cp >> 6)); utf8[1] = (char)(0x80 | (cp & 0x3F)); len = 2; }
        else if (cp < 0x10000) {
            utf8[0] = (char)(0xE0 | (cp >> 12)); utf8[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
            utf8[2] = (char)(0x80 | (cp & 0x3F)); len = 3;
        } else {
            utf8[0] = (char)(0xF0 | (cp >> 18)); utf8[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
            utf8[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); utf8[3] = (char)(0x80 | (cp & 0x3F)); len = 4;
        }
        if (buf_put(out, utf8, len)) return -2;
    }
    return 0;
}

/* ---- one event into the columns ------------------------------------------ */

enum { ROW_OK = 0, ROW_REFUSE = -1, ROW_NO_MEMORY = -2 };

/* An integer field: present where it is an integer within int64, `odd`
 * where it is some other value (an id written as text, a float): whether
 * that matters depends on the table, which reads only some of them, so the
 * caller decides (and decodes the piece with msgspec where one it reads is). */
static inline void int_field(const value_t *v, int64_t *out, uint16_t bit, uint16_t *present, uint16_t *odd) {
    *out = 0;
    if (v->kind == V_INT) {
        *out = v->i;
        *present |= bit;
    } else if (v->kind != V_ABSENT && v->kind != V_NULL) {
        *odd |= bit;
    }
}

/* A number of microseconds as int64 nanoseconds, from its decimal text
 * exactly: digits past the nanosecond are rounded half to even on the
 * decimal itself (never through a double, whose step at today's epoch in
 * microseconds is 0.25 us). -1 where that is not at hand: a value beyond
 * int64 nanoseconds, or one whose dropped digits (past 19 significant
 * ones) would count; msgspec's path then reads the piece. */
static int exact_ns(const value_t *v, int64_t *out) {
    if (v->whole_overflow) return -1;
    uint64_t magnitude;
    long power = v->power + 3; /* of ten, in nanoseconds */
    if (v->mant == 0) {
        magnitude = 0;
    } else if (power >= 0) {
        if (v->sticky || power > 18 || v->mant > (uint64_t)INT64_MAX / POW10_INT[power]) return -1;
        magnitude = v->mant * POW10_INT[power];
    } else if (power < -19) {
        magnitude = 0; /* under 10**19 units of 10**-20 ns or less: below a tenth of a nanosecond */
    } else {
        uint64_t scale = POW10_INT[-power], half = scale / 2;
        uint64_t rest = v->mant % scale;
        magnitude = v->mant / scale;
        if (rest > half || (rest == half && (v->sticky || (magnitude & 1)))) magnitude++;
    }
    if (magnitude > (uint64_t)INT64_MAX) return -1;
    *out = v->negative ? -(int64_t)magnitude : (int64_t)magnitude;
    return 0;
}

static inline int time_field(const value_t *v, int64_t *out, uint16_t bit, uint16_t *present) {
    if (v->kind == V_ABSENT || v->kind == V_NULL) { *out = 0; return 0; }
    if (v->kind != V_INT && v->kind != V_NUM) return ROW_REFUSE;
    if (exact_ns(v, out)) return ROW_REFUSE;
    *present |= bit;
    return 0;
}

static int put_raw(buf_t *out, int32_t *offsets, Py_ssize_t row, const value_t *v, uint16_t bit, uint16_t *present) {
    if (v->kind != V_ABSENT) {
        if (buf_put(out, v->start, v->len)) return ROW_NO_MEMORY;
        *present |= bit;
    }
    if (out->len > INT32_MAX) return ROW_REFUSE;
    offsets[row + 1] = (int32_t)out->len;
    return ROW_OK;
}

/* What `scan` reads by, copied out of its arguments so that the loop
 * runs without the GIL: the category names by code, and where events of
 * other categories name theirs (counted into a dict once the loop is done). */
typedef struct {
    const char *cat_names[128];
    Py_ssize_t cat_lens[128];
    Py_ssize_t cat_count;
    Py_ssize_t routed;     /* codes below this are read in full */
    Py_ssize_t *other_at;  /* offsets of other categories' names */
    Py_ssize_t *other_len;
    Py_ssize_t others, others_cap;
    const char *data;
} scan_args_t;

/* The event's category code; the name of one not listed is noted (to be
 * counted) where `count_other`. */
static int category(scan_args_t *a, const value_t *cat, int8_t *code, int count_other) {
    if (cat->kind == V_ABSENT || cat->kind == V_NULL) { *code = CAT_MISSING; return ROW_OK; }
    if (cat->kind != V_STR || cat->escaped) return ROW_REFUSE;
    const char *text = cat->start + 1;
    Py_ssize_t len = cat->len - 2;
    for (Py_ssize_t k = 0; k < a->cat_count; k++) {
        if (a->cat_lens[k] == len && memcmp(a->cat_names[k], text, (size_t)len) == 0) {
            *code = (int8_t)k;
            return ROW_OK;
        }
    }
    *code = CAT_OTHER;
    if (!valid_utf8((const unsigned char *)text, len)) return ROW_REFUSE;
    if (!count_other) return ROW_OK;
    if (a->others == a->others_cap) {
        Py_ssize_t cap = a->others_cap ? a->others_cap * 2 : 64;
        Py_ssize_t *at = realloc(a->other_at, (size_t)cap * sizeof(*at));
        if (!at) return ROW_NO_MEMORY;
        a->other_at = at;
        Py_ssize_t *lens = realloc(a->other_len, (size_t)cap * sizeof(*lens));
        if (!lens) return ROW_NO_MEMORY;
        a->other_len = lens;
        a->others_cap = cap;
    }
    a->other_at[a->others] = text - a->data;
    a->other_len[a->others] = len;
    a->others++;
    return ROW_OK;
}

/* The other categories' names, counted. */
static PyObject *other_cats(const scan_args_t *a) {
    PyObject *counts = PyDict_New();
    for (Py_ssize_t k = 0; counts && k < a->others; k++) {
        PyObject *key = PyUnicode_DecodeUTF8(a->data + a->other_at[k], a->other_len[k], NULL);
        PyObject *before = key ? PyDict_GetItemWithError(counts, key) : NULL;
        PyObject *after = key && (before || !PyErr_Occurred()) ? PyLong_FromSsize_t((before ? PyLong_AsSsize_t(before) : 0) + 1) : NULL;
        if (!after || PyDict_SetItem(counts, key, after) < 0) Py_CLEAR(counts);
        Py_XDECREF(key);
        Py_XDECREF(after);
    }
    return counts;
}

/* An instant's allocator arg: as int_field, into the instant columns. */
static inline void instant_field(const value_t *v, int64_t *out, uint8_t bit, uint8_t *present, uint8_t *odd) {
    *out = 0;
    if (v->kind == V_INT) {
        *out = v->i;
        *present |= bit;
    } else if (v->kind != V_ABSENT && v->kind != V_NULL) {
        *odd |= bit;
    }
}

static int put_instant(columns_t *c, const event_t *e, Py_ssize_t row) {
    if (c->in == c->icap && instants_grow(c)) return ROW_NO_MEMORY;
    Py_ssize_t k = c->in++;
    const args_t *g = &e->args;
    uint8_t present = 0, odd = 0;
    c->i_row[k] = row;
    instant_field(&g->alloc, &c->i_alloc[k], I_ALLOC, &present, &odd);
    instant_field(&g->total_allocated, &c->i_total_allocated[k], I_TOTAL_ALLOCATED, &present, &odd);
    instant_field(&g->total_reserved, &c->i_total_reserved[k], I_TOTAL_RESERVED, &present, &odd);
    instant_field(&g->addr, &c->i_addr[k], I_ADDR, &present, &odd);
    instant_field(&g->device_id, &c->i_device_id[k], I_DEVICE_ID, &present, &odd);
    instant_field(&g->device_type, &c->i_device_type[k], I_DEVICE_TYPE, &present, &odd);
    c->i_present[k] = present;
    c->i_odd[k] = odd;
    return ROW_OK;
}

static int put_row(columns_t *c, scan_args_t *a, const event_t *e, Py_ssize_t start, Py_ssize_t stop) {
    if (c->n == c->cap && columns_grow(c, 0)) return ROW_NO_MEMORY;
    Py_ssize_t row = c->n;
    uint16_t present = 0, odd = 0;
    int8_t code;

    uint8_t phase = 0;
    if (e->ph.kind == V_STR) {
        if (e->ph.escaped) return ROW_REFUSE;
        /* One character: a longer `ph` is no phase msgspec's tagged decoder knows. */
        if (e->ph.len == 3) phase = (uint8_t)e->ph.start[1];
    } else if (e->ph.kind != V_ABSENT && e->ph.kind != V_NULL) {
        return ROW_REFUSE;
    }
    int instant = phase == 'i' || phase == 'I';
    /* Instants and metadata events are read, not counted as skipped. */
    int status = category(a, &e->cat, &code, !instant && phase != 'M');
    if (status) return status;

    c->cat[row] = code;
    c->phase[row] = phase;
    int complete = phase == 'X';
    c->span_start[row] = start;
    c->span_end[row] = stop;
    c->ts[row] = c->dur[row] = 0;
    c->pid[row] = c->tid[row] = c->external[row] = c->correlation[row] = 0;
    c->device[row] = c->stream[row] = c->bytes[row] = 0;
    int routed = code >= 0 && code < a->routed;

    if (complete) {
        /* As msgspec's typed decoders: a complete event's times are
         * numbers or null, its args an object or null, whatever its cat. */
        if (time_field(&e->ts, &c->ts[row], P_TS, &present) || time_field(&e->dur, &c->dur[row], P_DUR, &present))
            return ROW_REFUSE;
        int args = e->args_value.kind;
        if (args != V_ABSENT && args != V_NULL && args != V_OBJECT) return ROW_REFUSE;
    }
    if (instant) {
        /* As msgspec's InstantEvent: a time is a number or null. */
        if (time_field(&e->ts, &c->ts[row], P_TS, &present)) return ROW_REFUSE;
        if ((status = put_instant(c, e, row))) return status;
    }
    if ((complete && routed) || instant) {
        int_field(&e->pid, &c->pid[row], P_PID, &present, &odd);
        int_field(&e->tid, &c->tid[row], P_TID, &present, &odd);
        if (e->name.kind == V_STR) {
            int put = put_string(&c->name_data, &e->name);
            if (put) return put == -2 ? ROW_NO_MEMORY : ROW_REFUSE;
            present |= P_NAME;
        } else if (e->name.kind != V_ABSENT && e->name.kind != V_NULL) {
            return ROW_REFUSE;
        }
    }
    if (complete && routed) {
        const args_t *g = &e->args;
        int_field(&g->external, &c->external[row], P_EXTERNAL, &present, &odd);
        int_field(&g->correlation, &c->correlation[row], P_CORRELATION, &present, &odd);
        int_field(&g->device, &c->device[row], P_DEVICE, &present, &odd);
        int_field(&g->stream, &c->stream[row], P_STREAM, &present, &odd);
        int_field(&g->bytes, &c->bytes[row], P_BYTES, &present, &odd);
        if ((status = put_raw(&c->grid_data, c->grid_off, row, &g->grid, P_GRID, &present)) ||
            (status = put_raw(&c->block_data, c->block_off, row, &g->block, P_BLOCK, &present)))
            return status;
        if (g->collective.kind != V_ABSENT && g->collective.kind != V_NULL) present |= P_COLLECTIVE;
    } else {
        c->grid_off[row + 1] = (int32_t)c->grid_data.len;
        c->block_off[row + 1] = (int32_t)c->block_data.len;
    }
    if (c->name_data.len > INT32_MAX) return ROW_REFUSE;
    c->name_off[row + 1] = (int32_t)c->name_data.len;
    c->present[row] = present;
    c->odd[row] = odd;
    c->n++;
    return ROW_OK;
}

/* ---- the module ---------------------------------------------------------- */

static PyObject *column_bytes(const void *data, Py_ssize_t count, size_t size) {
    return PyBytes_FromStringAndSize(count ? data : "", count * (Py_ssize_t)size);
}

static PyObject *result(const columns_t *c, Py_ssize_t end) {
    Py_ssize_t n = c->n;
    return Py_BuildValue(
        "{s:n,s:n,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N"
        ",s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N}",
        "events", n, "end", end,
        "cat", column_bytes(c->cat, n, 1),
        "phase", column_bytes(c->phase, n, 1),
        "present", column_bytes(c->present, n, 2),
        "odd", column_bytes(c->odd, n, 2),
        "ts", column_bytes(c->ts, n, 8),
        "dur", column_bytes(c->dur, n, 8),
        "pid", column_bytes(c->pid, n, 8),
        "tid", column_bytes(c->tid, n, 8),
        "external_id", column_bytes(c->external, n, 8),
        "correlation", column_bytes(c->correlation, n, 8),
        "device", column_bytes(c->device, n, 8),
        "stream", column_bytes(c->stream, n, 8),
        "bytes", column_bytes(c->bytes, n, 8),
        "span_start", column_bytes(c->span_start, n, 8),
        "span_end", column_bytes(c->span_end, n, 8),
        "name_offsets", column_bytes(c->name_off, n + 1, 4),
        "name_data", column_bytes(c->name_data.data, c->name_data.len, 1),
        "grid_offsets", column_bytes(c->grid_off, n + 1, 4),
        "grid_data", column_bytes(c->grid_data.data, c->grid_data.len, 1),
        "block_offsets", column_bytes(c->block_off, n + 1, 4),
        "block_data", column_bytes(c->block_data.data, c->block_data.len, 1),
        "instant_row", column_bytes(c->i_row, c->in, 8),
        "instant_alloc", column_bytes(c->i_alloc, c->in, 8),
        "instant_total_allocated", column_bytes(c->i_total_allocated, c->in, 8),
        "instant_total_reserved", column_bytes(c->i_total_reserved, c->in, 8),
        "instant_addr", column_bytes(c->i_addr, c->in, 8),
        "instant_device_id", column_bytes(c->i_device_id, c->in, 8),
        "instant_device_type", column_bytes(c->i_device_type, c->in, 8),
        "instant_present", column_bytes(c->i_present, c->in, 1),
        "instant_odd", column_bytes(c->i_odd, c->in, 1));
}

PyDoc_STRVAR(scan_doc,
"scan(data, cats, routed) -> dict | None\n\n"
"The events of the JSON array at the start of `data`, as columns (bytes),\n"
"with `end`, the offset just past the array's `]`, and `other_cats`; None\n"
"where the fast path does not read this text (see the module's comment).");

/* The array's events into the columns; *stop: just past its `]`. No
 * Python API here: it runs without the GIL. */
static int scan_events(const char *data, const char *end, columns_t *c, scan_args_t *a, const char **stop) {
    event_t e;
    const char *p = skip_ws(data, end);
    /* Room for the events a piece this long usually holds (Kineto's run
     * 150-400 bytes each), so the columns are seldom copied to grow. */
    if (columns_grow(c, (end - data) / 128 + 64)) return ROW_NO_MEMORY;
    c->name_off[0] = c->grid_off[0] = c->block_off[0] = 0;
    if (p >= end || *p != '[') return ROW_REFUSE;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') { *stop = p + 1; return ROW_OK; }
    for (;;) {
        if (p >= end || *p != '{') return ROW_REFUSE;
        const char *after = read_event(p, end, &e);
        if (!after) return ROW_REFUSE;
        int status = put_row(c, a, &e, p - data, after - data);
        if (status) return status;
        p = skip_ws(after, end);
        if (p >= end) return ROW_REFUSE;
        if (*p == ']') { *stop = p + 1; return ROW_OK; }
        if (*p != ',') return ROW_REFUSE;
        p = skip_ws(p + 1, end);
    }
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *cats;
    Py_ssize_t routed;
    if (!PyArg_ParseTuple(args, "y*O!n", &view, &PyTuple_Type, &cats, &routed)) return NULL;
    scan_args_t a;
    memset(&a, 0, sizeof(a));
    a.cat_count = PyTuple_GET_SIZE(cats);
    a.routed = routed;
    a.data = view.buf;
    for (Py_ssize_t k = 0; k < a.cat_count; k++) {
        PyObject *name = PyTuple_GET_ITEM(cats, k);
        if (!PyBytes_Check(name) || k > 127) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "cats: a tuple of at most 128 bytes objects");
            return NULL;
        }
        /* Pointers into bytes objects the arguments keep alive. */
        a.cat_names[k] = PyBytes_AS_STRING(name);
        a.cat_lens[k] = PyBytes_GET_SIZE(name);
    }
    columns_t c;
    memset(&c, 0, sizeof(c));
    const char *stop = NULL;
    int status;
    /* Other threads run meanwhile (the collector samples GPUs while it
     * ingests traces): the loop touches no Python object. */
    Py_BEGIN_ALLOW_THREADS
    status = scan_events(view.buf, (const char *)view.buf + view.len, &c, &a, &stop);
    Py_END_ALLOW_THREADS

    PyObject *out = NULL;
    if (status == ROW_OK) {
        PyObject *counts = other_cats(&a);
        out = counts ? result(&c, stop - (const char *)view.buf) : NULL;
        if (out && PyDict_SetItemString(out, "other_cats", counts) < 0) Py_CLEAR(out);
        Py_XDECREF(counts);
    } else if (status == ROW_NO_MEMORY) {
        PyErr_NoMemory();
    } else {
        out = Py_NewRef(Py_None);
    }
    columns_free(&c);
    free(a.other_at);
    free(a.other_len);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_kineto_scan",
    .m_doc = "Kineto events to columns in C: the fast path of collector.ingest.kineto_native.",
    .m_size = -1,
    .m_methods = methods,
};

/* Raised with every change to what `scan` returns, so that a build left
 * from older sources is noticed (kineto_native.VERSION) and not used. */
#define SCAN_VERSION 3

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "VERSION", SCAN_VERSION) < 0) Py_CLEAR(m);
    return m;
}
