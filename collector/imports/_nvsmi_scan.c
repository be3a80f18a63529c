/* nvidia-smi CSV log -> columns, in C: the fast path of `nvsmi_native`.
 *
 * `scan(data, fields, plan)` reads a block of whole lines of an
 * `nvidia-smi --query-gpu=... --format=csv` log (`fields` fields a line)
 * and, in one pass, tokenises each line and converts the fields the plan
 * names into columns, one value a row, as bytes the caller wraps as Arrow
 * buffers without copying:
 *
 *   - a timestamp (`2024/05/01 12:00:00.123`): int64 microseconds since
 *     the epoch, naive (the caller applies the log's time zone);
 *   - a number (float64, float32, int32 or int64, times a scale): the
 *     units nvidia-smi writes (` W`, ` %`, ` MiB`, ` MHz`, ` us`) and
 *     spaces trimmed, as `nvidia_smi` trims them (spaces before, units
 *     and spaces after); `[...]`,
 *     `N/A` and empty cells are NULL (an Arrow validity bitmap);
 *   - any other field: its raw bytes, dictionary-encoded (int32 codes, and
 *     the distinct values as Arrow string offsets and data, in order of
 *     first appearance): text, hex masks, the devices fields.
 *
 * It reads only what it reads exactly as the pure path (pyarrow's CSV
 * reader and Arrow's casts) does, and returns None for anything else: a
 * quote or a lone carriage return in the block, a line with another number
 * of fields, a number or time in any other form (an exponent, leading
 * zeros of an integer, more digits than a double holds exactly, a value out
 * of range), a float32 whose direct and double-rounded readings differ,
 * a header repeated in the log (its `timestamp` is not a time).
 * The caller then reads that block on the pure path, which decides, and
 * says which line is bad. So this file never has to agree with Arrow on
 * odd input, only on the common case, and tests compare both paths' tables.
 *
 * The loop over the lines runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Kinds of a plan entry (`nvsmi_native.TIMESTAMP` ... `RAW`, in order). */
enum { K_TS = 0, K_F64, K_F32, K_I32, K_I64, K_DICT };

#define MAX_PLAN 64

static const double POW10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};
static const float POW10F[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

/* ---- a dictionary of byte strings ------------------------------------------ */

typedef struct {
    uint64_t hash;
    int32_t code; /* -1: empty slot */
} slot_t;

typedef struct {
    slot_t *slots;
    size_t mask; /* slots - 1 (a power of two, minus one) */
    int32_t count;
    /* The distinct values, as Arrow string offsets and data. */
    int32_t *offsets;
    size_t offsets_cap;
    char *data;
    size_t data_len, data_cap;
} dict_t;

/* Up to 7 bytes as a little-endian word, by fixed-size loads (a memcpy
 * of a variable length is a call, and its store then load a stall). */
static inline uint64_t load_tail(const char *s, size_t n) {
    uint64_t w = 0;
    if (n & 4) {
        uint32_t v;
        memcpy(&v, s, 4);
        w = v;
        s += 4;
    }
    if (n & 2) {
        uint16_t v;
        memcpy(&v, s, 2);
        w |= (uint64_t)v << ((n & 4) * 8);
        s += 2;
    }
    if (n & 1) w |= (uint64_t)(unsigned char)*s << ((n & 6) * 8);
    return w;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    /* Eight bytes a step (a UUID is 40): a multiply-xorshift mix. */
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    const char *start = s;
    size_t length = n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w;
        if (length >= 8) { /* the last eight bytes, shifted past those mixed in */
            memcpy(&w, start + length - 8, 8);
            w >>= (8 - n) * 8;
        } else {
            w = load_tail(s, n);
        }
        h = (h ^ w) * 0x94D049BB133111EBULL;
        h ^= h >> 29;
    }
    return h;
}

/* memcmp(a, b, n) == 0 for the short strings of a log, without a call. */
static int bytes_equal(const char *a, const char *b, size_t n) {
    while (n >= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) return 0;
        a += 8;
        b += 8;
        n -= 8;
    }
    return load_tail(a, n) == load_tail(b, n);
}

static int dict_init(dict_t *d) {
    memset(d, 0, sizeof(*d));
    d->mask = 63;
    d->slots = malloc((d->mask + 1) * sizeof(slot_t));
    d->offsets_cap = 64;
    d->offsets = malloc(d->offsets_cap * sizeof(int32_t));
    if (!d->slots || !d->offsets) return -1;
    for (size_t i = 0; i <= d->mask; i++) d->slots[i].code = -1;
    d->offsets[0] = 0;
    return 0;
}

static void dict_free(dict_t *d) {
    free(d->slots);
    free(d->offsets);
    free(d->data);
}

static int dict_grow(dict_t *d) {
    size_t cap = (d->mask + 1) * 2;
    slot_t *slots = malloc(cap * sizeof(slot_t));
    if (!slots) return -1;
    for (size_t i = 0; i < cap; i++) slots[i].code = -1;
    for (size_t i = 0; i <= d->mask; i++) {
        if (d->slots[i].code < 0) continue;
        size_t j = d->slots[i].hash & (cap - 1);
        while (slots[j].code >= 0) j = (j + 1) & (cap - 1);
        slots[j] = d->slots[i];
    }
    free(d->slots);
    d->slots = slots;
    d->mask = cap - 1;
    return 0;
}

/* The code of `s` (added where new); -1 when out of memory or past int32. */
static int32_t dict_code(dict_t *d, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    size_t j = h & d->mask;
    while (d->slots[j].code >= 0) {
        slot_t *slot = &d->slots[j];
        if (slot->hash == h) {
            int32_t start = d->offsets[slot->code], end = d->offsets[slot->code + 1];
            if ((size_t)(end - start) == n && bytes_equal(d->data + start, s, n)) return slot->code;
        }
        j = (j + 1) & d->mask;
    }
    if (d->data_len + n > (size_t)INT32_MAX || d->count == INT32_MAX - 1) return -1;
    if (d->data_len + n > d->data_cap) {
        size_t cap = d->data_cap ? d->data_cap : 4096;
        while (cap < d->data_len + n) cap *= 2;
        char *data = realloc(d->data, cap);
        if (!data) return -1;
        d->data = data;
        d->data_cap = cap;
    }
    if ((size_t)d->count + 2 > d->offsets_cap) {
        int32_t *offsets = realloc(d->offsets, d->offsets_cap * 2 * sizeof(int32_t));
        if (!offsets) return -1;
        d->offsets = offsets;
        d->offsets_cap *= 2;
    }
    if (n) memcpy(d->data + d->data_len, s, n);
    d->data_len += n;
    int32_t code = d->count++;
    d->offsets[d->count] = (int32_t)d->data_len;
    d->slots[j].hash = h;
    d->slots[j].code = code;
    if ((size_t)d->count * 2 > d->mask + 1 && dict_grow(d) < 0) return -1;
    return code;
}

/* ---- fields ------------------------------------------------------------------ */

typedef struct {
    Py_ssize_t field;
    int kind;
    double scale;
    /* Outputs, one value (bit) a row. */
    char *data;
    uint8_t *valid;
    Py_ssize_t nulls;
    dict_t dict;
    PyObject *data_obj, *valid_obj;
    /* The unit this column's last number ended with (` W`), or length -1:
     * a column's values share one, so it is checked in one comparison. */
    char unit[8];
    int unit_len;
    /* A scale that is a whole number (MiB -> bytes), else 0: a whole
     * number of units times it is exact in integers, below `whole_max`. */
    int64_t whole_scale;
    uint64_t whole_max;
    /* Timestamps: the date (`YYYY/MM/DD`) of the last one, and its day's
     * microseconds since the epoch; a log has one date for many rows. */
    char date[10];
    int64_t date_us;
    int has_date;
} entry_t;

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

/* The characters `nvidia_smi._NUMBER_TRIM` trims after a number (only spaces
 * before it). */
static const uint8_t NUMBER_TRIM[256] = {
    [' '] = 1, ['%'] = 1, ['W'] = 1, ['M'] = 1, ['i'] = 1, ['B'] = 1, ['H'] = 1, ['z'] = 1, ['u'] = 1, ['s'] = 1,
};

static int is_number_trim(char c) { return NUMBER_TRIM[(unsigned char)c]; }

static int digits(const char *s, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* `YYYY/MM/DD` -> microseconds since the epoch at its midnight; 0 read,
 * -1 refused. */
static int read_date(const char *s, int64_t *out) {
    int year, month, day;
    if (s[4] != '/' || s[7] != '/' || digits(s, 4, &year) || digits(s + 5, 2, &month) || digits(s + 8, 2, &day))
        return -1;
    static const int DAYS[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > DAYS[month - 1]) return -1;
    if (month == 2 && day == 29 && !((year % 4 == 0 && year % 100 != 0) || year % 400 == 0)) return -1;
    *out = days_from_civil(year, (unsigned)month, (unsigned)day) * 86400 * 1000000;
    return 0;
}

/* `YYYY/MM/DD HH:MM:SS[.f{1,6}]` -> microseconds; 0 read, -1 refused.
 * The date is read once while it stays the same (`e`'s last). */
static int read_timestamp(entry_t *e, const char *s, Py_ssize_t n, int64_t *out) {
    int hour, minute, second;
    if (n < 19 || s[10] != ' ' || s[13] != ':' || s[16] != ':') return -1;
    if (!e->has_date || memcmp(s, e->date, 10) != 0) {
        if (read_date(s, &e->date_us)) return -1;
        memcpy(e->date, s, 10);
        e->has_date = 1;
    }
    if (digits(s + 11, 2, &hour) || digits(s + 14, 2, &minute) || digits(s + 17, 2, &second)) return -1;
    if (hour > 23 || minute > 59 || second > 59) return -1;
    int64_t micros = 0;
    if (n > 19) {
        Py_ssize_t places = n - 20;
        if (s[19] != '.' || places < 1 || places > 6) return -1;
        int fraction;
        if (digits(s + 20, (int)places, &fraction)) return -1;
        micros = fraction;
        for (Py_ssize_t i = places; i < 6; i++) micros *= 10;
    }
    *out = e->date_us + (int64_t)(hour * 3600 + minute * 60 + second) * 1000000 + micros;
    return 0;
}

/* A decimal `[-]D+[.D+]` as mantissa and places after the point; -1 where
 * it is another form or has more digits than a double holds exactly. */
static int read_decimal(const char *s, Py_ssize_t n, int *negative, uint64_t *mant, int *places, int *int_digits) {
    Py_ssize_t i = 0;
    *negative = 0;
    if (i < n && s[i] == '-') {
        *negative = 1;
        i++;
    }
    uint64_t m = 0;
    int whole = 0, after = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (whole + after >= 16) return -1;
        m = m * 10 + (uint64_t)(s[i] - '0');
        whole++;
        i++;
    }
    if (whole == 0) return -1;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (whole + after >= 16) return -1;
            m = m * 10 + (uint64_t)(s[i] - '0');
            after++;
            i++;
        }
        if (after == 0) return -1;
    }
    if (i != n) return -1;
    *mant = m;
    *places = after;
    *int_digits = whole;
    return 0;
}

/* The length of number field [s, s + n) without its unit and the spaces
 * before it: as trimming `NUMBER_TRIM` from the right a byte at a time,
 * but by one comparison where it ends with the unit its column's last
 * value ended with (and no trimmed byte comes before that unit). */
static Py_ssize_t trim_unit(entry_t *e, const char *s, Py_ssize_t n) {
    Py_ssize_t k = e->unit_len;
    if (k >= 0 && n > k && !is_number_trim(s[n - k - 1])) {
        int same;
        switch (k) {
        case 0: same = 1; break;
        case 2: same = s[n - 2] == e->unit[0] && s[n - 1] == e->unit[1]; break;
        case 4: {
            uint32_t a, b;
            memcpy(&a, s + n - 4, 4);
            memcpy(&b, e->unit, 4);
            same = a == b;
            break;
        }
        default: same = memcmp(s + n - k, e->unit, (size_t)k) == 0; break;
        }
        if (same) return n - k;
    }
    Py_ssize_t m = n;
    while (m && is_number_trim(s[m - 1])) m--;
    e->unit_len = n - m <= (Py_ssize_t)sizeof e->unit ? (int)(n - m) : -1;
    if (e->unit_len > 0) memcpy(e->unit, s + m, (size_t)(n - m));
    return m;
}

/* An integer into row `row` of an int32 or int64 column; -1 where it is
 * out of an int32's range. */
static int store_integer(entry_t *e, Py_ssize_t row, int64_t v) {
    if (e->kind == K_I32) {
        if (v < INT32_MIN || v > INT32_MAX) return -1;
        ((int32_t *)e->data)[row] = (int32_t)v;
    } else {
        ((int64_t *)e->data)[row] = v;
    }
    return 0;
}

/* One number field into row `row` of `e`; 0 read, -1 refused. */
static int read_number(entry_t *e, Py_ssize_t row, const char *s, Py_ssize_t n) {
    while (n && *s == ' ') s++, n--; /* spaces only: a unit before a number is no number */
    n = trim_unit(e, s, n);
    if (n == 0 || s[0] == '[' || (n == 3 && memcmp(s, "N/A", 3) == 0)) {
        e->valid[row >> 3] &= (uint8_t)~(1u << (row & 7));
        e->nulls++;
        switch (e->kind) {
        case K_F64: ((double *)e->data)[row] = 0; break;
        case K_F32: ((float *)e->data)[row] = 0; break;
        case K_I32: ((int32_t *)e->data)[row] = 0; break;
        default: ((int64_t *)e->data)[row] = 0; break;
        }
        return 0;
    }
    int negative, places, whole;
    uint64_t mant;
    if (read_decimal(s, n, &negative, &mant, &places, &whole)) return -1;
    if ((e->kind == K_I32 || e->kind == K_I64) && e->scale == 1.0) {
        /* Arrow casts text to an integer directly: digits only. */
        if (places || (whole > 1 && s[negative] == '0')) return -1;
        return store_integer(e, row, negative ? -(int64_t)mant : (int64_t)mant);
    }
    if (mant > (1ULL << 53)) return -1;
    if (places == 0) {
        /* A whole number: exact as a double, and so are the casts and the
         * scaling below where they stay under 2^53 (2^24 for a float32),
         * so they are done in integers. */
        if ((e->kind == K_I32 || e->kind == K_I64) && e->whole_scale && mant <= e->whole_max) {
            int64_t v = (int64_t)mant * e->whole_scale;
            return store_integer(e, row, negative ? -v : v);
        }
        if (e->kind == K_F32 && e->scale == 1.0 && mant <= (1ULL << 24)) {
            float f = (float)mant;
            ((float *)e->data)[row] = negative ? -f : f;
            return 0;
        }
    }
    /* Exact operands, one correctly rounded division: the double nearest
     * the decimal, as Arrow reads it. */
    double d = places ? (double)mant / POW10[places] : (double)mant;
    if (negative) d = -d;
    if (e->scale != 1.0) d *= e->scale;
    switch (e->kind) {
    case K_F64:
        ((double *)e->data)[row] = d;
        return 0;
    case K_F32: {
        float f = (float)d;
        if (e->scale == 1.0) {
            /* Arrow reads a float32 directly where a column has no NULL,
             * through a double where it has: both must agree. */
            if (mant > (1ULL << 24) || places > 10) return -1;
            float direct = places ? (float)mant / POW10F[places] : (float)mant;
            if (negative) direct = -direct;
            if (memcmp(&direct, &f, sizeof f) != 0) return -1;
        }
        ((float *)e->data)[row] = f;
        return 0;
    }
    default: {
        double r = nearbyint(d); /* round half to even, as pc.round */
        if (e->kind == K_I32) {
            if (!(r >= -2147483648.0 && r <= 2147483647.0)) return -1;
            ((int32_t *)e->data)[row] = (int32_t)r;
        } else {
            if (!(r >= -9223372036854775808.0 && r < 9223372036854775808.0)) return -1;
            ((int64_t *)e->data)[row] = (int64_t)r;
        }
        return 0;
    }
    }
}

/* ---- the block ------------------------------------------------------------ */

static Py_ssize_t kind_size(int kind) {
    switch (kind) {
    case K_F32: case K_I32: case K_DICT: return 4;
    default: return 8;
    }
}

/* The fields of one line, `commas[f]` ending field f (the last at the
 * line's end), into row `row`; 0 read, -1 refused, -2 out of memory. */
static int read_row(const char *s, Py_ssize_t fields, entry_t **by_field, const char **commas, Py_ssize_t row) {
    for (Py_ssize_t f = 0; f < fields; f++) {
        const char *t = commas[f];
        entry_t *e = by_field[f];
        if (e) {
            Py_ssize_t n = t - s;
            if (e->kind == K_TS) {
                const char *a = s, *b = t;
                while (a < b && is_space(*a)) a++;
                while (b > a && is_space(b[-1])) b--;
                if (read_timestamp(e, a, b - a, (int64_t *)e->data + row)) return -1;
            } else if (e->kind == K_DICT) {
                int32_t code = dict_code(&e->dict, s, (size_t)n);
                if (code < 0) return -2;
                ((int32_t *)e->data)[row] = code;
            } else if (read_number(e, row, s, n)) {
                return -1;
            }
        }
        s = t + 1;
    }
    return 0;
}

/* The line [line, eol) whose commas are `commas[0, k)`: skipped where
 * empty (as the CSV reader skips it), else read into row `*row`. */
static int end_line(const char *line, const char *eol, Py_ssize_t k, Py_ssize_t fields, entry_t **by_field,
                    const char **commas, Py_ssize_t *row) {
    if (eol > line && eol[-1] == '\r') eol--;
    if (eol == line) return 0;
    if (k != fields - 1) return -1; /* another number of fields */
    commas[k] = eol;
    int status = read_row(line, fields, by_field, commas, *row);
    if (status == 0) ++*row;
    return status;
}

/* The newlines in [p, end). A line has one in a hundred bytes or so:
 * each is counted by clearing its bit (no popcount instruction in the
 * baseline x86-64 a wheel is built for). */
static Py_ssize_t count_newlines(const char *p, const char *end) {
    Py_ssize_t count = 0;
#if defined(__SSE2__)
    for (; end - p >= 16; p += 16) {
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8('\n')));
        for (; m; m &= m - 1) count++;
    }
#endif
    for (; p < end; p++) count += *p == '\n';
    return count;
}

/* Scan the lines; rows read, or -1 refused, -2 out of memory. One pass
 * finds each line's commas and its end, sixteen bytes a step where SSE2
 * is at hand (every x86-64). A header repeated in the log is refused by
 * its timestamp field: the pure path skips it. `commas`: room for
 * `fields` pointers. */
static Py_ssize_t scan_lines(const char *p, const char *end, Py_ssize_t fields, entry_t **by_field,
                             const char **commas) {
    Py_ssize_t row = 0, k = 0;
    const char *line = p, *q = p;
    while (q < end) {
        unsigned m = 0;
        Py_ssize_t width = end - q < 16 ? end - q : 16;
#if defined(__SSE2__)
        if (width == 16) {
            const __m128i chunk = _mm_loadu_si128((const __m128i *)q);
            const __m128i separators = _mm_or_si128(_mm_cmpeq_epi8(chunk, _mm_set1_epi8(',')),
                                                    _mm_cmpeq_epi8(chunk, _mm_set1_epi8('\n')));
            const __m128i odd = _mm_or_si128(_mm_cmpeq_epi8(chunk, _mm_set1_epi8('"')),
                                             _mm_cmpeq_epi8(chunk, _mm_set1_epi8('\r')));
            m = (unsigned)_mm_movemask_epi8(_mm_or_si128(separators, odd));
        } else
#endif
        {
            for (Py_ssize_t i = 0; i < width; i++)
                if (q[i] == ',' || q[i] == '\n' || q[i] == '"' || q[i] == '\r') m |= 1u << i;
        }
        while (m) {
            const char *c = q + __builtin_ctz(m);
            m &= m - 1;
            if (*c == ',') {
                if (k == fields - 1) return -1; /* more fields than the header's */
                commas[k++] = c;
                continue;
            }
            /* What the CSV reader reads otherwise: a quote, a carriage
             * return that does not end a line. */
            if (*c == '"' || (*c == '\r' && (c + 1 >= end || c[1] != '\n'))) return -1;
            if (*c == '\r') continue; /* the line's end: taken off there */
            int status = end_line(line, c, k, fields, by_field, commas, &row);
            if (status) return status;
            k = 0;
            line = c + 1;
        }
        q += width;
    }
    if (line < end) { /* the last line, without a newline */
        int status = end_line(line, end, k, fields, by_field, commas, &row);
        if (status) return status;
    }
    return row;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t fields;
    PyObject *plan_obj;
    if (!PyArg_ParseTuple(args, "y*nO", &view, &fields, &plan_obj)) return NULL;
    PyObject *result = NULL, *seq = NULL;
    entry_t plan[MAX_PLAN];
    entry_t **by_field = NULL;
    const char **commas = NULL;
    int nplan = 0;
    memset(plan, 0, sizeof plan);
    const char *data = view.buf, *end = data + view.len;

    seq = PySequence_Fast(plan_obj, "plan: a sequence of (field, kind, scale)");
    if (!seq) goto done;
    nplan = (int)PySequence_Fast_GET_SIZE(seq);
    if (nplan > MAX_PLAN || fields < 1) {
        PyErr_SetString(PyExc_ValueError, "plan: too many entries, or no fields");
        nplan = 0;
        goto done;
    }
    by_field = calloc((size_t)fields, sizeof *by_field);
    commas = malloc((size_t)fields * sizeof *commas);
    if (!by_field || !commas) {
        PyErr_NoMemory();
        goto done;
    }
    /* Rows: at most one a newline, and one more for a last line without. */
    Py_ssize_t capacity = 1 + count_newlines(data, end);
    for (int i = 0; i < nplan; i++) {
        entry_t *e = &plan[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "nid", &e->field, &e->kind, &e->scale)) goto done;
        if (e->field < 0 || e->field >= fields || e->kind < K_TS || e->kind > K_DICT || by_field[e->field]) {
            PyErr_SetString(PyExc_ValueError, "plan: a field out of range or twice, or an unknown kind");
            goto done;
        }
        by_field[e->field] = e;
        e->unit_len = -1;
        if (e->scale >= 1.0 && e->scale <= 9007199254740992.0 && e->scale == floor(e->scale)) {
            e->whole_scale = (int64_t)e->scale;
            e->whole_max = (1ULL << 53) / (uint64_t)e->whole_scale;
        }
        e->data_obj = PyBytes_FromStringAndSize(NULL, capacity * kind_size(e->kind));
        if (!e->data_obj) goto done;
        e->data = PyBytes_AS_STRING(e->data_obj);
        if (e->kind != K_TS && e->kind != K_DICT) {
            e->valid_obj = PyBytes_FromStringAndSize(NULL, (capacity + 7) / 8);
            if (!e->valid_obj) goto done;
            e->valid = (uint8_t *)PyBytes_AS_STRING(e->valid_obj);
            memset(e->valid, 0xff, (size_t)(capacity + 7) / 8);
        }
        if (e->kind == K_DICT && dict_init(&e->dict) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    Py_ssize_t rows;
    Py_BEGIN_ALLOW_THREADS
    rows = scan_lines(data, end, fields, by_field, commas);
    Py_END_ALLOW_THREADS
    if (rows == -2) {
        PyErr_NoMemory();
        goto done;
    }
    if (rows < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *columns = PyList_New(nplan);
    if (!columns) goto done;
    for (int i = 0; i < nplan; i++) {
        entry_t *e = &plan[i];
        PyObject *item;
        if (e->kind == K_DICT) {
            item = Py_BuildValue("(Oy#y#)", e->data_obj, (const char *)e->dict.offsets,
                                 (Py_ssize_t)((e->dict.count + 1) * sizeof(int32_t)),
                                 e->dict.data ? e->dict.data : "", (Py_ssize_t)e->dict.data_len);
        } else if (e->kind == K_TS || e->nulls == 0) {
            item = Py_BuildValue("(OOn)", e->data_obj, Py_None, (Py_ssize_t)0);
        } else {
            item = Py_BuildValue("(OOn)", e->data_obj, e->valid_obj, e->nulls);
        }
        if (!item) {
            Py_DECREF(columns);
            goto done;
        }
        PyList_SET_ITEM(columns, i, item);
    }
    result = Py_BuildValue("(nN)", rows, columns);

done:
    for (int i = 0; i < nplan; i++) {
        Py_XDECREF(plan[i].data_obj);
        Py_XDECREF(plan[i].valid_obj);
        if (plan[i].kind == K_DICT) dict_free(&plan[i].dict);
    }
    free(by_field);
    free(commas);
    Py_XDECREF(seq);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, fields, plan) -> (rows, columns) or None: the lines of `data` "
     "(`fields` fields each) converted as `plan` ((field, kind, scale), ...) says."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_nvsmi_scan",
    .m_doc = "nvidia-smi CSV logs to columns in C: the fast path of collector.imports.nvsmi_native.",
    .m_size = -1,
    .m_methods = methods,
};

/* The version of the output above: a build from older sources is noticed
 * (nvsmi_native.VERSION) and not used. */
#define SCAN_VERSION 2

PyMODINIT_FUNC PyInit__nvsmi_scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "VERSION", SCAN_VERSION) < 0) Py_CLEAR(m);
    return m;
}
