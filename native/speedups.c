/* seglog._speedups: the per-frame loops a profile proved to bound recovery and sealed reads.
 *
 * Each function here has a pure-Python twin that defines it (named in its docstring), and
 * `tests/core/test_native.py` holds the two equal on random and corrupted input. The module
 * is optional: setup.py builds it when a C compiler is present, `seglog.core.native` falls
 * back to the Python twins when it is absent or SEGLOG_PURE_PYTHON is set.
 *
 * XXH3-64 comes from the vendored single-header xxHash 0.8.4 (native/xxhash, BSD-2), the
 * same algorithm (seed 0) as the `xxhash` package every other checksum here goes through.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include "xxhash.h"

/* Little-endian loads whatever the host's byte order (the compiler makes them one move). */
static inline uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t le64(const unsigned char *p) {
    return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32);
}

/* Whether buf[lo:hi] lies in a buffer of `size` bytes (callable without the GIL), and the
 * error of the first slice that does not (with the GIL). */
static inline int inside(int64_t lo, int64_t hi, int64_t size) { return lo >= 0 && lo <= hi && hi <= size; }

static void outside_error(const char *what, Py_ssize_t i, int64_t lo, int64_t hi, Py_ssize_t size) {
    PyErr_Format(PyExc_ValueError, "%s %zd [%lld:%lld] is outside a buffer of %zd bytes", what, i,
                 (long long)lo, (long long)hi, size);
}

/* The slices buf[starts[i]:stops[i]] (8-byte columns of one length): their count, or -1
 * with ValueError set if the columns differ or a slice (a `what`) is out of bounds. */
static Py_ssize_t checked_slices(const char *what, const Py_buffer *buf, const Py_buffer *starts,
                                 const Py_buffer *stops) {
    if (starts->len % 8 || stops->len != starts->len) {
        PyErr_SetString(PyExc_ValueError, "starts and stops must be 8-byte columns of one length");
        return -1;
    }
    Py_ssize_t n = starts->len / 8;
    const int64_t *a = (const int64_t *)starts->buf, *b = (const int64_t *)stops->buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!inside(a[i], b[i], (int64_t)buf->len)) {
            outside_error(what, i, a[i], b[i], buf->len);
            return -1;
        }
    }
    return n;
}

/* ---- xxh3_slices ------------------------------------------------------------------- */

PyDoc_STRVAR(xxh3_slices_doc,
"xxh3_slices(buf, starts, stops, out) -> None\n\n"
"XXH3-64 (seed 0) of buf[starts[i]:stops[i]] into out[i]. starts and stops are buffers of\n"
"native int64, out a writable buffer of native uint64, all of one length. Raises\n"
"ValueError if any slice is out of buf's bounds or reversed (out is then undefined).\n"
"Python twin: seglog.core.native.xxh3_slices_py.");

static PyObject *xxh3_slices(PyObject *self, PyObject *args) {
    Py_buffer buf, starts, stops, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &buf, &starts, &stops, &out)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = starts.len / 8;
    if (starts.len % 8 || stops.len != starts.len || out.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts, stops and out must be 8-byte columns of one length");
        goto done;
    }
    {
        const int64_t *a = (const int64_t *)starts.buf, *b = (const int64_t *)stops.buf;
        const unsigned char *base = (const unsigned char *)buf.buf;
        uint64_t *sums = (uint64_t *)out.buf;
        const int64_t size = (int64_t)buf.len;
        Py_ssize_t bad = -1;
        int64_t bad_a = 0, bad_b = 0;
        /* Readers on two threads (the segment reader's `read_many`) hash in parallel. Each
         * bound is read once, checked, then used: `out` may alias the bounds, and without
         * the GIL another thread may write to them. */
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t lo = a[i], hi = b[i];
            if (!inside(lo, hi, size)) {
                bad = i, bad_a = lo, bad_b = hi;
                break;
            }
            sums[i] = XXH3_64bits(base + lo, (size_t)(hi - lo));
        }
        Py_END_ALLOW_THREADS
        if (bad >= 0) {
            outside_error("slice", bad, bad_a, bad_b, buf.len);
            goto done;
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&stops);
    PyBuffer_Release(&out);
    return result;
}

/* ---- byte_slices ------------------------------------------------------------------- */

PyDoc_STRVAR(byte_slices_doc,
"byte_slices(buf, starts, stops) -> list[bytes]\n\n"
"[bytes(buf[starts[i]:stops[i]]) for each i]; starts and stops are buffers of native int64\n"
"of one length. Raises ValueError if any slice is out of buf's bounds or reversed.\n"
"Python twin: seglog.core.native.byte_slices_py.");

static PyObject *byte_slices(PyObject *self, PyObject *args) {
    Py_buffer buf, starts, stops;
    if (!PyArg_ParseTuple(args, "y*y*y*", &buf, &starts, &stops)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = checked_slices("slice", &buf, &starts, &stops);
    if (n < 0) goto done;
    const int64_t *a = (const int64_t *)starts.buf, *b = (const int64_t *)stops.buf;
    out = PyList_New(n);
    if (out == NULL) goto done;
    const char *base = (const char *)buf.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *piece = PyBytes_FromStringAndSize(base + a[i], (Py_ssize_t)(b[i] - a[i]));
        if (piece == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, piece);
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&stops);
    return out;
}

/* ---- spans_into -------------------------------------------------------------------- */

PyDoc_STRVAR(spans_into_doc,
"spans_into(buf, starts, stops, out, at) -> int\n\n"
"Copy buf[starts[i]:stops[i]] for each i, one after another, into the writable buffer out\n"
"from byte at; returns the offset just past the last byte written. starts and stops are\n"
"buffers of native int64 of one length; out must not overlap any of them. Raises ValueError\n"
"if a slice is out of buf's bounds or reversed, the spans do not fit in out from at, or out\n"
"overlaps (nothing is written then). The copy runs with the GIL released. Python twin:\n"
"seglog.core.native.spans_into_py.");

/* Whether two buffers share a byte. */
static int overlapping(const Py_buffer *x, const Py_buffer *y) {
    const char *a = (const char *)x->buf, *b = (const char *)y->buf;
    return x->len > 0 && y->len > 0 && a < b + y->len && b < a + x->len;
}

static PyObject *spans_into(PyObject *self, PyObject *args) {
    Py_buffer buf, starts, stops, out;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "y*y*y*w*n", &buf, &starts, &stops, &out, &at)) return NULL;
    PyObject *result = NULL;
    if (overlapping(&out, &buf) || overlapping(&out, &starts) || overlapping(&out, &stops)) {
        PyErr_SetString(PyExc_ValueError, "out must not overlap buf, starts or stops");
        goto done;
    }
    Py_ssize_t n = checked_slices("slice", &buf, &starts, &stops);
    if (n < 0) goto done;
    if (at < 0 || at > out.len) {
        PyErr_Format(PyExc_ValueError, "at %zd is outside %zd bytes", at, out.len);
        goto done;
    }
    {
        const int64_t *a = (const int64_t *)starts.buf, *b = (const int64_t *)stops.buf;
        const int64_t room = (int64_t)(out.len - at);
        int64_t total = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t k = b[i] - a[i]; /* checked: 0 <= k <= len(buf) */
            if (k > room - total) {
                PyErr_Format(PyExc_ValueError, "the spans do not fit in %zd bytes from %zd",
                             out.len, at);
                goto done;
            }
            total += k;
        }
        const char *src = (const char *)buf.buf;
        char *dst = (char *)out.buf + at;
        const int64_t size = (int64_t)buf.len;
        int64_t left = total;
        int changed = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            /* Read once and checked again: nothing else may have changed them, but a
             * caller's bug must not become a write out of bounds. */
            int64_t lo = a[i], hi = b[i];
            if (!inside(lo, hi, size) || hi - lo > left) {
                changed = 1;
                break;
            }
            memcpy(dst, src + lo, (size_t)(hi - lo));
            dst += hi - lo;
            left -= hi - lo;
        }
        Py_END_ALLOW_THREADS
        if (changed || left) {
            PyErr_SetString(PyExc_ValueError, "starts or stops changed during the copy");
            goto done;
        }
        result = PyLong_FromSsize_t(at + (Py_ssize_t)total);
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&stops);
    PyBuffer_Release(&out);
    return result;
}

/* ---- gather_rows ------------------------------------------------------------------- */

PyDoc_STRVAR(gather_rows_doc,
"gather_rows(buf, offsets, width) -> bytes\n\n"
"The `width` bytes at each of `offsets` (a buffer of native int64) of `buf`, one after\n"
"another: what numpy's buf[offsets[:, None] + arange(width)] holds, without its index\n"
"array. Raises ValueError if a row is outside buf. Python twin:\n"
"seglog.core.native.gather_rows_py.");

static PyObject *gather_rows(PyObject *self, PyObject *args) {
    Py_buffer buf, offsets;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*y*n", &buf, &offsets, &width)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = offsets.len / 8;
    const int64_t *at = (const int64_t *)offsets.buf;
    if (offsets.len % 8 || width < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets must be an 8-byte column and width >= 0");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (at[i] < 0 || at[i] > (int64_t)buf.len - (int64_t)width) {
            PyErr_Format(PyExc_ValueError, "row %zd at %lld is outside a buffer of %zd bytes", i,
                         (long long)at[i], buf.len);
            goto done;
        }
    }
    out = PyBytes_FromStringAndSize(NULL, n * width);
    if (out == NULL) goto done;
    char *dst = PyBytes_AS_STRING(out);
    const char *src = (const char *)buf.buf;
    for (Py_ssize_t i = 0; i < n; i++) memcpy(dst + i * width, src + at[i], (size_t)width);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&offsets);
    return out;
}

/* ---- segment_layout ---------------------------------------------------------------- */

PyDoc_STRVAR(segment_layout_doc,
"segment_layout(data, first_seq, offsets, lengths, checksums, cols, bits) -> bool\n\n"
"Locate and verify every frame of a sealed segment's .data bytes in one pass. offsets and\n"
"lengths (native int64, the .idx entries) must chain from 0 to len(data); each frame must\n"
"pass every check seglog.core.segment_run.segment_layout makes (length prefix, section\n"
"lengths, seq first_seq+i, flags, and its XXH3-64 checksum when checksums is true). Fills\n"
"cols (a writable native int64 buffer of 6*n: rows ts, node_at, node_len, tag_len,\n"
"blob_start, blob_end) and bits (n bytes: bit0 has_tag, bit1 has_node, bit2 deleted).\n"
"Returns False at the first failing check, leaving the outputs undefined: the caller then\n"
"runs the Python path, which names the error. Python twin: the numpy path of\n"
"seglog.core.segment_run.segment_layout.");

static PyObject *segment_layout(PyObject *self, PyObject *args) {
    Py_buffer data, offsets, lengths, cols, bits;
    unsigned long long first_seq;
    int checksums;
    if (!PyArg_ParseTuple(args, "y*Ky*y*py*w*", &data, &first_seq, &offsets, &lengths,
                          &checksums, &cols, &bits))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = offsets.len / 8;
    if (offsets.len % 8 || lengths.len != offsets.len || cols.len != 6 * 8 * n ||
        bits.len < n || cols.readonly || bits.readonly) {
        PyErr_SetString(PyExc_ValueError,
                        "offsets and lengths must be int64 columns of one length n, cols 6*n int64, bits n bytes");
        goto done;
    }
    {
        const int64_t *off = (const int64_t *)offsets.buf, *len = (const int64_t *)lengths.buf;
        const unsigned char *base = (const unsigned char *)data.buf;
        const int64_t size = (int64_t)data.len;
        int64_t *ts = (int64_t *)cols.buf, *node_at = ts + n, *node_len = ts + 2 * n,
                *tag_len = ts + 3 * n, *blob_start = ts + 4 * n, *blob_end = ts + 5 * n;
        unsigned char *bit = (unsigned char *)bits.buf;
        int ok = n > 0;
        int64_t at = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            int64_t o = off[i], l = len[i];
            /* chained from 0, in bounds, at least a minimal frame (38 bytes) */
            if (o != at || l < 38 || l > size - o) { ok = 0; break; }
            at = o + l;
            const unsigned char *f = base + o;
            uint32_t frame_len = le32(f);
            unsigned flags = f[4];
            uint64_t seq = le64(f + 5);
            uint16_t nl = le16(f + 21), tl = le16(f + 23);
            uint32_t dl = le32(f + 25);
            int64_t body_end = o + l - 9;
            if ((int64_t)frame_len + 4 != l || o + 29 + (int64_t)nl + tl + dl != body_end ||
                seq != (uint64_t)first_seq + (uint64_t)i || (flags & ~3u) ||
                (!(flags & 2) && nl) || (!(flags & 1) && tl)) {
                ok = 0;
                break;
            }
            if (checksums && XXH3_64bits(f + 4, (size_t)(body_end - o - 4)) != le64(base + body_end)) {
                ok = 0;
                break;
            }
            ts[i] = (int64_t)le64(f + 13);
            node_at[i] = o + 29;
            node_len[i] = nl;
            tag_len[i] = tl;
            blob_start[i] = body_end - dl;
            blob_end[i] = body_end;
            bit[i] = (unsigned char)(flags | (base[o + l - 1] == 0xD5 ? 4 : 0));
        }
        if (ok && at != size) ok = 0;
        Py_END_ALLOW_THREADS
        result = PyBool_FromLong(ok);
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&cols);
    PyBuffer_Release(&bits);
    return result;
}

/* ---- blobs_sliceable --------------------------------------------------------------- */

PyDoc_STRVAR(blobs_sliceable_doc,
"blobs_sliceable(buf, starts, ends, out) -> None\n\n"
"out[i] = 1 if the blob buf[starts[i]:ends[i]] is {\"d\":...} with no '\"m\"' after its\n"
"opening (its data is buf[starts[i]+5:ends[i]-1], no meta), else 0. starts and ends are\n"
"buffers of native int64 (ascending, disjoint blobs), out a writable uint8 buffer of their\n"
"length. Raises ValueError if a blob is outside buf or reversed (out is then undefined).\n"
"Python twin: seglog.core.segment_run.blobs_sliceable_py.");

static PyObject *blobs_sliceable(PyObject *self, PyObject *args) {
    Py_buffer buf, starts, ends, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &buf, &starts, &ends, &out)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = starts.len / 8;
    if (starts.len % 8 || ends.len != starts.len || out.len != n) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must be 8-byte columns, out 1-byte, of one length");
        goto done;
    }
    {
        const int64_t *a = (const int64_t *)starts.buf, *b = (const int64_t *)ends.buf;
        const unsigned char *base = (const unsigned char *)buf.buf;
        unsigned char *flags = (unsigned char *)out.buf;
        const int64_t size = (int64_t)buf.len;
        Py_ssize_t bad = -1;
        int64_t bad_a = 0, bad_b = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t lo = a[i], hi = b[i];
            if (!inside(lo, hi, size)) {
                bad = i, bad_a = lo, bad_b = hi;
                break;
            }
            int ok = hi - lo >= 6 && base[hi - 1] == '}' && memcmp(base + lo, "{\"d\":", 5) == 0;
            /* A quoted m at q-1..q+1 with q-1 >= lo+5 and q+2 <= hi: search the m's, which
             * are rarer than quotes in JSON. */
            const unsigned char *q = base + lo + 6, *last = base + hi - 2;
            while (ok && q <= last) {
                q = memchr(q, 'm', (size_t)(last - q + 1));
                if (q == NULL) break;
                if (q[-1] == '"' && q[1] == '"') ok = 0;
                q++;
            }
            flags[i] = (unsigned char)ok;
        }
        Py_END_ALLOW_THREADS
        if (bad >= 0) {
            outside_error("blob", bad, bad_a, bad_b, buf.len);
            goto done;
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&out);
    return result;
}

/* ---- label_codes ------------------------------------------------------------------- */

PyDoc_STRVAR(label_codes_doc,
"label_codes(buf, starts, widths, out) -> list[str]\n\n"
"The distinct labels among the spans buf[starts[i]:starts[i]+widths[i]] (native int64\n"
"columns), in order of first appearance, each decoded once as UTF-8; out[i] (a writable\n"
"native uint32 column) is 1 + the index of span i's label. UnicodeDecodeError if a label\n"
"is not UTF-8 (raised after every span is checked); ValueError if a span is outside buf (out\n"
"is then undefined) or out overlaps buf. The spans are hashed with the GIL released. Python\n"
"twin:\n"
"seglog.core.segment_run.label_codes_py.");

typedef struct {
    uint64_t hash;
    int64_t start, width;
    uint32_t code; /* 0: empty slot */
} label_slot;

/* The spans' hash table, grown by doubling; allocated with PyMem_Raw* so the loop over
 * the spans runs without the GIL (the labels' str objects are made after it). */
static int label_slots_grow(label_slot **slots, size_t *cap) {
    size_t ncap = *cap * 2;
    label_slot *grown = PyMem_RawCalloc(ncap, sizeof(label_slot));
    if (grown == NULL) return -1;
    for (size_t j = 0; j < *cap; j++) {
        if (!(*slots)[j].code) continue;
        size_t q = (size_t)(*slots)[j].hash & (ncap - 1);
        while (grown[q].code) q = (q + 1) & (ncap - 1);
        grown[q] = (*slots)[j];
    }
    PyMem_RawFree(*slots);
    *slots = grown;
    *cap = ncap;
    return 0;
}

static PyObject *label_codes(PyObject *self, PyObject *args) {
    Py_buffer buf, starts, widths, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &buf, &starts, &widths, &out)) return NULL;
    PyObject *table = NULL;
    label_slot *slots = NULL;
    int64_t *firsts = NULL; /* (start, width) of each distinct label, in code order */
    Py_ssize_t n = starts.len / 8;
    const int64_t *a = (const int64_t *)starts.buf, *w = (const int64_t *)widths.buf;
    uint32_t *codes = (uint32_t *)out.buf;
    const unsigned char *base = (const unsigned char *)buf.buf;
    if (starts.len % 8 || widths.len != starts.len || out.len != n * 4) {
        PyErr_SetString(PyExc_ValueError, "starts, widths (int64) and out (uint32) must be of one length");
        goto fail;
    }
    if (overlapping(&out, &buf)) { /* the labels are decoded after the codes are written */
        PyErr_SetString(PyExc_ValueError, "out must not overlap buf");
        goto fail;
    }
    size_t cap = 64, used = 0, firsts_cap = 32;
    slots = PyMem_RawCalloc(cap, sizeof(label_slot));
    firsts = PyMem_RawMalloc(firsts_cap * 2 * sizeof(int64_t));
    if (slots == NULL || firsts == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t bad = -1;
    int nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Read once, checked, then used: `out` may alias the spans. */
        int64_t at = a[i], width = w[i];
        if (at < 0 || width < 0 || at > (int64_t)buf.len - width) {
            bad = i;
            break;
        }
        const unsigned char *p = base + at;
        uint64_t h = XXH3_64bits(p, (size_t)width);
        size_t k = (size_t)h & (cap - 1);
        while (slots[k].code && !(slots[k].hash == h && slots[k].width == width &&
                                  memcmp(base + slots[k].start, p, (size_t)width) == 0))
            k = (k + 1) & (cap - 1);
        if (slots[k].code) {
            codes[i] = slots[k].code;
            continue;
        }
        if (used == firsts_cap) {
            int64_t *more = PyMem_RawRealloc(firsts, firsts_cap * 4 * sizeof(int64_t));
            if (more == NULL) {
                nomem = 1;
                break;
            }
            firsts = more;
            firsts_cap *= 2;
        }
        firsts[2 * used] = at;
        firsts[2 * used + 1] = width;
        used++;
        slots[k] = (label_slot){h, at, width, (uint32_t)used};
        codes[i] = (uint32_t)used;
        if (used * 2 > cap && label_slots_grow(&slots, &cap) < 0) {
            nomem = 1;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
        goto fail;
    }
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "span %zd is outside a buffer of %zd bytes", bad, buf.len);
        goto fail;
    }
    table = PyList_New((Py_ssize_t)used);
    if (table == NULL) goto fail;
    for (size_t j = 0; j < used; j++) {
        PyObject *label = PyUnicode_DecodeUTF8(
            (const char *)base + firsts[2 * j], (Py_ssize_t)firsts[2 * j + 1], NULL);
        if (label == NULL) goto fail;
        PyList_SET_ITEM(table, (Py_ssize_t)j, label);
    }
    PyMem_RawFree(slots);
    PyMem_RawFree(firsts);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&widths);
    PyBuffer_Release(&out);
    return table;
fail:
    PyMem_RawFree(slots);
    PyMem_RawFree(firsts);
    Py_XDECREF(table);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&widths);
    PyBuffer_Release(&out);
    return NULL;
}

/* ---- scan_wal_chunk ---------------------------------------------------------------- */

enum { HEADER_SIZE = 38, MIN_FRAME_LEN = 42, MIN_FRAMED = 46, FLAG_TAG = 1, FLAG_NODE = 2 };

PyDoc_STRVAR(scan_wal_chunk_doc,
"scan_wal_chunk(src, off, limit, collect, valid_types, append_type, body_ok)\n"
"    -> (frames, next_offset, stopped)\n\n"
"Up to `limit` valid WAL frames (STORAGE 3.1) of `src` from `off`, each as the tuple\n"
"(end, type, flags, topic_id, seq, ts, node, tag, data); `stopped` is true at the logical\n"
"end. `valid_types` is 256 bytes, non-zero at each known frame type; `body_ok(type, data)`\n"
"validates every control (non-append) body. With collect false, only validates.\n"
"Python twin: seglog.core.frame_scanner._scan_chunk_py.");

static PyObject *decode_section(const unsigned char *p, Py_ssize_t n, int *bad) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        *bad = 1;
    }
    return s;
}

static PyObject *scan_wal_chunk(PyObject *self, PyObject *args) {
    Py_buffer src, types;
    Py_ssize_t off, limit;
    int collect, append_type;
    PyObject *body_ok;
    if (!PyArg_ParseTuple(args, "y*nnpy*iO", &src, &off, &limit, &collect, &types, &append_type,
                          &body_ok))
        return NULL;
    PyObject *out = NULL, *result = NULL;
    int stopped = 0;
    if (types.len != 256) {
        PyErr_SetString(PyExc_ValueError, "valid_types must be 256 bytes");
        goto fail;
    }
    if (off < 0) { /* past the end is the logical end, as in the twin */
        PyErr_SetString(PyExc_ValueError, "a negative offset");
        goto fail;
    }
    out = PyList_New(0);
    if (out == NULL) goto fail;
    const unsigned char *base = (const unsigned char *)src.buf;
    const unsigned char *known = (const unsigned char *)types.buf;
    const int64_t size = (int64_t)src.len;
    for (Py_ssize_t k = 0; k < limit; k++) {
        if (size - off < MIN_FRAMED) {
            stopped = 1;
            break;
        }
        const unsigned char *h = base + off;
        uint32_t frame_len = le32(h);
        unsigned ftype = h[4], flags = h[5];
        uint64_t topic_id = le64(h + 6), seq = le64(h + 14), ts = le64(h + 22);
        uint32_t nl = le16(h + 30), tl = le16(h + 32), dl = le32(h + 34);
        int64_t end = (int64_t)off + 4 + (int64_t)frame_len;
        int64_t chk_at = end - 8;
        if (frame_len < MIN_FRAME_LEN || end > size ||
            (int64_t)nl + tl + dl != (int64_t)frame_len - MIN_FRAME_LEN || !known[ftype] ||
            XXH3_64bits(h + 4, (size_t)(chk_at - off - 4)) != le64(base + chk_at)) {
            stopped = 1;
            break;
        }
        PyObject *node = NULL, *tag = NULL, *data = NULL;
        int bad = 0;
        const unsigned char *p = h + HEADER_SIZE;
        if (flags & FLAG_NODE) {
            node = decode_section(p, nl, &bad);
            if (node == NULL) {
                if (bad) { stopped = 1; break; }
                goto fail;
            }
        }
        if (flags & FLAG_TAG) {
            tag = decode_section(p + nl, tl, &bad);
            if (tag == NULL) {
                Py_XDECREF(node);
                if (bad) { stopped = 1; break; }
                goto fail;
            }
        }
        if ((int)ftype != append_type || collect) {
            data = PyBytes_FromStringAndSize((const char *)(base + chk_at - dl), dl);
            if (data == NULL) {
                Py_XDECREF(node);
                Py_XDECREF(tag);
                goto fail;
            }
        }
        if ((int)ftype != append_type) {
            /* Control bodies are validated even when the frame is skipped. */
            PyObject *ok = PyObject_CallFunction(body_ok, "iO", (int)ftype, data);
            int truth = ok == NULL ? -1 : PyObject_IsTrue(ok);
            Py_XDECREF(ok);
            if (truth != 1) {
                Py_XDECREF(node);
                Py_XDECREF(tag);
                Py_DECREF(data);
                if (truth < 0) goto fail;
                stopped = 1;
                break;
            }
        }
        if (collect) {
            PyObject *t = Py_BuildValue("(LiiKKKNNN)", (long long)end, (int)ftype, (int)flags,
                                        (unsigned long long)topic_id, (unsigned long long)seq,
                                        (unsigned long long)ts, node ? node : Py_NewRef(Py_None),
                                        tag ? tag : Py_NewRef(Py_None), data);
            if (t == NULL) goto fail; /* "N" steals node, tag and data even on failure */
            int rc = PyList_Append(out, t);
            Py_DECREF(t);
            if (rc < 0) goto fail;
        } else {
            Py_XDECREF(node);
            Py_XDECREF(tag);
            Py_XDECREF(data);
        }
        off = (Py_ssize_t)end;
    }
    result = Py_BuildValue("(NnO)", out, off, stopped ? Py_True : Py_False);
    out = NULL; /* stolen by "N" */
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&src);
    PyBuffer_Release(&types);
    return result;
}

/* ---- encode_segment ---------------------------------------------------------------- */

enum { SEG_HEADER = 29, SEG_TRAILER = 9, IDX_ENTRY = 20, SEG_DEL = 0xD5 };

PyDoc_STRVAR(encode_segment_doc,
"encode_segment(first_seq, ts, nodes, tags, blobs, deleted) -> (data, idx)\n\n"
"Both files of a sealed segment (STORAGE 4.2, 4.3) for records given as equal-length\n"
"columns, seq first_seq + i being row i. ValueError when the columns are empty or differ in\n"
"length, or a field does not fit its width; UnicodeEncodeError for a node or tag that is\n"
"not encodable. Python twin: seglog.core.segment_format.encode_columns_py.");

PyDoc_STRVAR(encode_segment_rows_doc,
"encode_segment_rows(first_seq, ts, nodes, tags, datas, metas, deleted) -> (data, idx)\n\n"
"encode_segment with each payload blob built from compact JSON columns: {\"d\":data} or\n"
"{\"d\":data,\"m\":meta}; a deleted row, or one without data, is a hole ({\"d\":null}) and\n"
"a deleted row has no node or tag; data and meta must be bytes. Python twin:\n"
"seglog.core.segment_format.encode_payload_columns_py.");

static inline void put16(unsigned char *p, uint32_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }

static inline void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

static inline void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

/* An unsigned 64-bit value of an integer-like object (as the struct module takes it): 0,
 * or 1 (no exception set) when it is out of range or not an integer, -1 on other errors. */
static int as_u64(PyObject *o, uint64_t *out) {
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
        PyErr_Clear();
        return 1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(i); /* OverflowError if negative too */
    Py_DECREF(i);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        return 1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* The UTF-8 of a node or tag (None: absent). 0 ok, -1 with an exception set. */
static int section(PyObject *o, const char **p, Py_ssize_t *n, int *present) {
    if (o == Py_None) {
        *p = ""; *n = 0; *present = 0;
        return 0;
    }
    if (!PyUnicode_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "a node or tag must be str or None");
        return -1;
    }
    *p = PyUnicode_AsUTF8AndSize(o, n);
    *present = 1;
    return *p == NULL ? -1 : 0;
}

/* One row of a segment being encoded: its labels, its ts, and its payload blob as one
 * span (given) or as {"d":data[,"m":meta]} (built). */
typedef struct {
    const char *node, *tag, *data, *meta;
    Py_ssize_t nl, tl, dn, mn;
    int has_node, has_tag, dead, wrap, has_meta;
    uint64_t ts;
} seg_row;

static const char HOLE[] = "{\"d\":null}";

static inline uint64_t row_blob_len(const seg_row *r) {
    return r->wrap ? 6 + (uint64_t)r->dn + (r->has_meta ? 5 + (uint64_t)r->mn : 0) : (uint64_t)r->dn;
}

static PyObject *encode_segment_impl(PyObject *args, int from_payloads) {
    enum { MAXC = 6 };
    int ncols = from_payloads ? 6 : 5;
    PyObject *first_obj, *cols_in[MAXC], *cols[MAXC] = {NULL, NULL, NULL, NULL, NULL, NULL};
    int ok = from_payloads
                 ? PyArg_ParseTuple(args, "OOOOOOO", &first_obj, &cols_in[0], &cols_in[1],
                                    &cols_in[2], &cols_in[3], &cols_in[4], &cols_in[5])
                 : PyArg_ParseTuple(args, "OOOOOO", &first_obj, &cols_in[0], &cols_in[1],
                                    &cols_in[2], &cols_in[3], &cols_in[4]);
    if (!ok) return NULL;
    PyObject *result = NULL, *data = NULL, *idx = NULL;
    Py_buffer *views = NULL;
    seg_row *rows = NULL;
    Py_ssize_t n = 0, viewed = 0;
    uint64_t first_seq = 0;
    for (int c = 0; c < ncols; c++) {
        /* A tuple copy: nothing a row's __bool__ or __index__ runs can change it under us. */
        cols[c] = PySequence_Tuple(cols_in[c]);
        if (cols[c] == NULL) goto done;
    }
    n = PySequence_Fast_GET_SIZE(cols[0]);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "a segment needs at least one record");
        goto done;
    }
    for (int c = 1; c < ncols; c++) {
        if (PySequence_Fast_GET_SIZE(cols[c]) != n) {
            PyErr_SetString(PyExc_ValueError, "segment columns differ in length");
            goto done;
        }
    }
    PyObject **ts = PySequence_Fast_ITEMS(cols[0]), **nodes = PySequence_Fast_ITEMS(cols[1]),
             **tags = PySequence_Fast_ITEMS(cols[2]), **dead = PySequence_Fast_ITEMS(cols[ncols - 1]);
    PyObject **blobs = from_payloads ? NULL : PySequence_Fast_ITEMS(cols[3]);
    PyObject **datas = from_payloads ? PySequence_Fast_ITEMS(cols[3]) : NULL;
    PyObject **metas = from_payloads ? PySequence_Fast_ITEMS(cols[4]) : NULL;
    int rc = as_u64(first_obj, &first_seq);
    if (rc < 0) goto done;
    rows = PyMem_Calloc((size_t)n, sizeof(seg_row));
    views = from_payloads ? NULL : PyMem_Calloc((size_t)n, sizeof(Py_buffer));
    if (rows == NULL || (!from_payloads && views == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    /* Pass 1, in record order as the twin checks: every field's width, the total size. */
    uint64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        seg_row *r = &rows[i];
        uint64_t seq = first_seq + (uint64_t)i;
        r->dead = PyObject_IsTrue(dead[i]);
        if (r->dead < 0) goto done;
        int hole = from_payloads && r->dead; /* a dead row's payload and labels are gone */
        PyObject *node = hole ? Py_None : nodes[i], *tag = hole ? Py_None : tags[i];
        if (section(node, &r->node, &r->nl, &r->has_node) < 0 ||
            section(tag, &r->tag, &r->tl, &r->has_tag) < 0)
            goto done;
        if (!from_payloads) {
            if (PyObject_GetBuffer(blobs[i], &views[i], PyBUF_SIMPLE) < 0) goto done;
            viewed = i + 1;
            r->data = (const char *)views[i].buf;
            r->dn = views[i].len;
        } else if (hole || datas[i] == Py_None) {
            r->data = HOLE;
            r->dn = (Py_ssize_t)(sizeof(HOLE) - 1);
        } else {
            if (!PyBytes_Check(datas[i]) || (metas[i] != Py_None && !PyBytes_Check(metas[i]))) {
                PyErr_SetString(PyExc_TypeError, "a segment row's data and meta must be bytes");
                goto done;
            }
            r->wrap = 1;
            r->data = PyBytes_AS_STRING(datas[i]);
            r->dn = PyBytes_GET_SIZE(datas[i]);
            r->has_meta = metas[i] != Py_None;
            if (r->has_meta) {
                r->meta = PyBytes_AS_STRING(metas[i]);
                r->mn = PyBytes_GET_SIZE(metas[i]);
            }
        }
        int seq_wide = rc != 0 || (i > 0 && seq < first_seq);
        int trc = as_u64(ts[i], &r->ts);
        if (trc < 0) goto done;
        uint64_t bl = row_blob_len(r);
        uint64_t frame_len = SEG_HEADER - 4 + (uint64_t)r->nl + (uint64_t)r->tl + bl + SEG_TRAILER;
        if (seq_wide || trc || r->nl > 0xFFFF || r->tl > 0xFFFF || bl > 0xFFFFFFFFu ||
            frame_len + 4 > 0xFFFFFFFFu || total > 0xFFFFFFFFu) {
            if (seq_wide)
                PyErr_Format(PyExc_ValueError, "segment field out of range: seq %S + %zd", first_obj, i);
            else
                PyErr_Format(PyExc_ValueError, "segment field out of range near seq %llu",
                             (unsigned long long)seq);
            goto done;
        }
        total += frame_len + 4;
    }
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    idx = PyBytes_FromStringAndSize(NULL, n * IDX_ENTRY);
    if (data == NULL || idx == NULL) goto done;
    unsigned char *d = (unsigned char *)PyBytes_AS_STRING(data);
    unsigned char *x = (unsigned char *)PyBytes_AS_STRING(idx);
    /* Pass 2: the frames and their index entries, without the GIL (the event loop runs
     * meanwhile): it reads only the rows' spans, which the tuple copies keep alive and which
     * are immutable bytes and str buffers or buffer views held until `done`, and writes only
     * the two new objects. */
    Py_BEGIN_ALLOW_THREADS
    memset(x, 0, (size_t)n * IDX_ENTRY);
    uint64_t offset = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const seg_row *r = &rows[i];
        uint64_t bl = row_blob_len(r);
        uint32_t flags = (r->has_tag ? 1u : 0u) | (r->has_node ? 2u : 0u);
        uint32_t frame_len = (uint32_t)(SEG_HEADER - 4 + r->nl + r->tl + bl + SEG_TRAILER);
        unsigned char *f = d + offset;
        put32(f, frame_len);
        f[4] = (unsigned char)flags;
        put64(f + 5, first_seq + (uint64_t)i);
        put64(f + 13, r->ts);
        put16(f + 21, (uint32_t)r->nl);
        put16(f + 23, (uint32_t)r->tl);
        put32(f + 25, (uint32_t)bl);
        unsigned char *q = f + SEG_HEADER;
        memcpy(q, r->node, (size_t)r->nl);
        q += r->nl;
        memcpy(q, r->tag, (size_t)r->tl);
        q += r->tl;
        if (r->wrap) {
            memcpy(q, "{\"d\":", 5);
            q += 5;
        }
        memcpy(q, r->data, (size_t)r->dn);
        q += r->dn;
        if (r->wrap) {
            if (r->has_meta) {
                memcpy(q, ",\"m\":", 5);
                memcpy(q + 5, r->meta, (size_t)r->mn);
                q += 5 + r->mn;
            }
            *q++ = '}';
        }
        put64(q, XXH3_64bits(f + 4, (size_t)(q - f - 4)));
        q[8] = r->dead ? SEG_DEL : 0;
        unsigned char *e = x + i * IDX_ENTRY;
        put32(e, (uint32_t)offset);
        put32(e + 4, frame_len + 4);
        put64(e + 8, r->ts);
        e[16] = (unsigned char)flags;
        offset += (uint64_t)frame_len + 4;
    }
    Py_END_ALLOW_THREADS
    result = PyTuple_Pack(2, data, idx);
done:
    for (Py_ssize_t i = 0; i < viewed; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(rows);
    Py_XDECREF(data);
    Py_XDECREF(idx);
    for (int c = 0; c < ncols; c++) Py_XDECREF(cols[c]);
    return result;
}

static PyObject *encode_segment(PyObject *self, PyObject *args) { return encode_segment_impl(args, 0); }

static PyObject *encode_segment_rows(PyObject *self, PyObject *args) { return encode_segment_impl(args, 1); }

/* ---- encode_appends ---------------------------------------------------------------- */

enum { WAL_HEADER = 38, FLAG_DURABLE = 4, FLAG_MORE = 8 };

PyDoc_STRVAR(encode_appends_doc,
"encode_appends(topic_id, first_seq, ts, data, meta, node, tag, durable, out) -> None\n\n"
"Appends to the list `out` one Append frame (STORAGE 3.1) per record, seq first_seq + i,\n"
"each frame but the last flagged `more`. The records are four lists of one length (a\n"
"RecordBatch's columns): data (bytes), meta (bytes or None), node and tag (str or None);\n"
"a payload blob is {\"d\":data} or {\"d\":data,\"m\":meta}. ValueError when a field does\n"
"not fit its width or the lists differ in length; `out` is then unchanged. Data and meta\n"
"must be bytes (TypeError otherwise). Python twin:\n"
"seglog.core.append_frames.encode_appends_py.");

/* A column's value as a byte span (bytes) or UTF-8 (str); None is absent. 0 ok. */
static int value_span(PyObject *v, int text, const char **p, Py_ssize_t *n, int *present) {
    *present = v != Py_None;
    *p = "";
    *n = 0;
    if (v == Py_None) return 0;
    if (text) {
        if (!PyUnicode_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "a record's node and tag must be str or None");
            return -1;
        }
        *p = PyUnicode_AsUTF8AndSize(v, n);
        return *p == NULL ? -1 : 0;
    }
    if (!PyBytes_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "a record's data_json and meta_json must be bytes");
        return -1;
    }
    *p = PyBytes_AS_STRING(v);
    *n = PyBytes_GET_SIZE(v);
    return 0;
}

static PyObject *encode_appends(PyObject *self, PyObject *args) {
    PyObject *tid_obj, *first_obj, *ts_obj, *data, *meta, *node, *tag, *out;
    int durable;
    if (!PyArg_ParseTuple(args, "OOOO!O!O!O!pO!", &tid_obj, &first_obj, &ts_obj, &PyList_Type,
                          &data, &PyList_Type, &meta, &PyList_Type, &node, &PyList_Type, &tag,
                          &durable, &PyList_Type, &out))
        return NULL;
    uint64_t tid = 0, first = 0, ts = 0;
    int r1 = as_u64(tid_obj, &tid), r2 = as_u64(first_obj, &first), r3 = as_u64(ts_obj, &ts);
    if (r1 < 0 || r2 < 0 || r3 < 0) return NULL;
    int header_wide = r1 || r2 || r3; /* raised at the first record, where the twin packs */
    Py_ssize_t n = PyList_GET_SIZE(data), start = PyList_GET_SIZE(out);
    if (PyList_GET_SIZE(meta) != n || PyList_GET_SIZE(node) != n || PyList_GET_SIZE(tag) != n) {
        PyErr_SetString(PyExc_ValueError, "a record batch's columns differ in length");
        return NULL;
    }
    /* No Python code runs in this loop (no method of a value is called), so the borrowed
       items stay alive and the lists cannot change under us. */
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *dp = "", *mp = "", *np_ = "", *tp = "";
        Py_ssize_t dn = 0, mn = 0, nn = 0, tn = 0;
        int hd = 0, hm = 0, hn = 0, ht = 0;
        /* In the twin's order: the payload blob (data, then meta), then node and tag. */
        int bad = value_span(PyList_GET_ITEM(data, i), 0, &dp, &dn, &hd) < 0;
        if (!bad && !hd) {
            PyErr_SetString(PyExc_TypeError, "a record's data_json must be bytes");
            bad = 1;
        }
        bad = bad || value_span(PyList_GET_ITEM(meta, i), 0, &mp, &mn, &hm) < 0 ||
              value_span(PyList_GET_ITEM(node, i), 1, &np_, &nn, &hn) < 0 ||
              value_span(PyList_GET_ITEM(tag, i), 1, &tp, &tn, &ht) < 0;
        uint64_t dl = (uint64_t)dn + 6 + (hm ? (uint64_t)mn + 5 : 0); /* {"d": .. [,"m": ..] } */
        uint64_t frame_len = MIN_FRAME_LEN + (uint64_t)nn + (uint64_t)tn + dl;
        int seq_wide = i > 0 && first + (uint64_t)i < first;
        if (!bad && (header_wide || seq_wide || nn > 0xFFFF || tn > 0xFFFF || dl > 0xFFFFFFFFu ||
                     frame_len > 0xFFFFFFFFu)) {
            PyErr_Format(PyExc_ValueError, "append frame field out of range at record %zd", i);
            bad = 1;
        }
        PyObject *frame = bad ? NULL : PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(4 + frame_len));
        if (frame == NULL) goto fail;
        unsigned char *f = (unsigned char *)PyBytes_AS_STRING(frame);
        unsigned flags = (durable ? FLAG_DURABLE : 0) | (i + 1 < n ? FLAG_MORE : 0) |
                         (hn ? FLAG_NODE : 0) | (ht ? FLAG_TAG : 0);
        put32(f, (uint32_t)frame_len);
        f[4] = 1; /* Append */
        f[5] = (unsigned char)flags;
        put64(f + 6, tid);
        put64(f + 14, first + (uint64_t)i);
        put64(f + 22, ts);
        put16(f + 30, (uint32_t)nn);
        put16(f + 32, (uint32_t)tn);
        put32(f + 34, (uint32_t)dl);
        unsigned char *q = f + WAL_HEADER;
        memcpy(q, np_, (size_t)nn);
        q += nn;
        memcpy(q, tp, (size_t)tn);
        q += tn;
        memcpy(q, "{\"d\":", 5);
        memcpy(q + 5, dp, (size_t)dn);
        q += 5 + dn;
        if (hm) {
            memcpy(q, ",\"m\":", 5);
            memcpy(q + 5, mp, (size_t)mn);
            q += 5 + mn;
        }
        *q++ = '}';
        put64(q, XXH3_64bits(f + 4, (size_t)(q - f - 4)));
        int rc = PyList_Append(out, frame);
        Py_DECREF(frame);
        if (rc < 0) goto fail;
    }
    Py_RETURN_NONE;
fail:
    PyList_SetSlice(out, start, PyList_GET_SIZE(out), NULL); /* out unchanged on failure */
    return NULL;
}

/* ---- json_rows -------------------------------------------------------------------- */

PyDoc_STRVAR(json_rows_doc,
"json_rows(seqs, ts, data) -> bytes\n\n"
"The JSON array of records with nothing but seq, ts and data to show, one object per\n"
"row: [{\"$seq\":<seq>,\"$ts\":<ts>,\"data\":<data>},...]. seqs and ts are lists of ints\n"
"in [0, 2**64), data a list of bytes (compact JSON, spliced as is), all of one length.\n"
"Raises ValueError for lists of different lengths, TypeError for a non-bytes datum or a\n"
"non-int, OverflowError for an int outside u64. Python twin:\n"
"seglog.http.responses.json_rows_py.");

static char *put_u64(char *p, unsigned long long v) {
    char tmp[20];
    int k = 0;
    do {
        tmp[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (k) *p++ = tmp[--k];
    return p;
}

static PyObject *json_rows(PyObject *self, PyObject *args) {
    PyObject *seqs, *tss, *datas;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &seqs, &PyList_Type, &tss, &PyList_Type,
                          &datas))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(seqs);
    if (PyList_GET_SIZE(tss) != n || PyList_GET_SIZE(datas) != n) {
        PyErr_SetString(PyExc_ValueError, "seqs, ts and data must have one length");
        return NULL;
    }
    /* Sizes first (no Python code runs between the passes: the lists cannot change). */
    Py_ssize_t total = 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyList_GET_ITEM(datas, i);
        if (!PyBytes_Check(d)) {
            PyErr_Format(PyExc_TypeError, "data[%zd] is not bytes", i);
            return NULL;
        }
        /* {"$seq": ,"$ts": ,"data": } plus two u64s and the comma */
        Py_ssize_t row = PyBytes_GET_SIZE(d) + 8 + 7 + 8 + 1 + 40 + 1;
        if (total > PY_SSIZE_T_MAX - row) {
            PyErr_NoMemory();
            return NULL;
        }
        total += row;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    char *start = PyBytes_AS_STRING(out), *p = start;
    *p++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *so = PyList_GET_ITEM(seqs, i), *to = PyList_GET_ITEM(tss, i);
        if (!PyLong_Check(so) || !PyLong_Check(to)) {
            PyErr_Format(PyExc_TypeError, "seqs[%zd] and ts[%zd] must be ints", i, i);
            Py_DECREF(out);
            return NULL;
        }
        unsigned long long sv = PyLong_AsUnsignedLongLong(so);
        if (sv == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        unsigned long long tv = PyLong_AsUnsignedLongLong(to);
        if (tv == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *d = PyList_GET_ITEM(datas, i);
        if (i) *p++ = ',';
        memcpy(p, "{\"$seq\":", 8);
        p = put_u64(p + 8, sv);
        memcpy(p, ",\"$ts\":", 7);
        p = put_u64(p + 7, tv);
        memcpy(p, ",\"data\":", 8);
        p += 8;
        memcpy(p, PyBytes_AS_STRING(d), (size_t)PyBytes_GET_SIZE(d));
        p += PyBytes_GET_SIZE(d);
        *p++ = '}';
    }
    *p++ = ']';
    if (_PyBytes_Resize(&out, p - start) < 0) return NULL;
    return out;
}

/* ---- json_unproven ----------------------------------------------------------------- */

PyDoc_STRVAR(json_unproven_doc,
"json_unproven(texts) -> list[int]\n\n"
"The indexes of the bytes in the list `texts` that this scan cannot prove to be canonical\n"
"JSON: exactly one value, the text orjson.dumps(orjson.loads(t)) gives back, with no integer\n"
"outside 64 bits. It proves the common subset: no whitespace; strings of valid UTF-8 whose\n"
"only escapes are \\\" \\\\ \\n \\t \\r \\b \\f; integers of at most 18 digits without a\n"
"leading zero (not -0); true, false, null; objects without a duplicate key (at most 32 keys\n"
"each) nested at most 64 deep. Floats, \\u escapes, longer integers and anything else are\n"
"listed, for the caller's exact check: a sound filter, never a verdict that a text is bad.\n"
"Python twin (exact, so it lists a subset of these): seglog.core.native.json_unproven_py.");

#define CANON_MAX_DEPTH 64
#define CANON_MAX_KEYS 32

static inline int cont(unsigned char c) { return (c & 0xC0) == 0x80; }

/* The end of the canonical string that starts at p[i] == '"', or -1. UTF-8 is checked as
 * strictly as Python's decoder: no overlong form, no surrogate, nothing above U+10FFFF. */
static Py_ssize_t canon_string(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    for (i++; i < n;) {
        unsigned char c = p[i];
        if (c == '"') return i + 1;
        if (c == '\\') {
            if (i + 1 >= n) return -1;
            unsigned char e = p[i + 1];
            if (e != '"' && e != '\\' && e != 'n' && e != 't' && e != 'r' && e != 'b' && e != 'f')
                return -1;
            i += 2;
        } else if (c < 0x20) {
            return -1;
        } else if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || !cont(p[i + 1])) return -1;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || !cont(p[i + 1]) || !cont(p[i + 2])) return -1;
            if ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] >= 0xA0)) return -1;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || !cont(p[i + 1]) || !cont(p[i + 2]) || !cont(p[i + 3])) return -1;
            if ((c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] >= 0x90)) return -1;
            i += 4;
        } else {
            return -1;
        }
    }
    return -1;
}

/* The end of the canonical integer at p[i] ('-' or a digit), or -1. */
static Py_ssize_t canon_int(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    int neg = p[i] == '-';
    Py_ssize_t d = i + neg, j = d;
    while (j < n && p[j] >= '0' && p[j] <= '9') j++;
    Py_ssize_t digits = j - d;
    if (digits < 1 || digits > 18) return -1;
    if (p[d] == '0' && (digits > 1 || neg)) return -1; /* 01, -0 */
    if (j < n && (p[j] == '.' || p[j] == 'e' || p[j] == 'E')) return -1;
    return j;
}

static int canon_word(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, const char *w, Py_ssize_t k) {
    return i + k <= n && memcmp(p + i, w, (size_t)k) == 0;
}

/* The end of the canonical value that starts at p[i] (see json_unproven_doc), or -1. */
static Py_ssize_t canon_value(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    unsigned char kind[CANON_MAX_DEPTH];
    int keybase[CANON_MAX_DEPTH];
    Py_ssize_t key_at[CANON_MAX_DEPTH * CANON_MAX_KEYS], key_len[CANON_MAX_DEPTH * CANON_MAX_KEYS];
    int depth = 0, nkeys = 0;
value:
    if (i >= n) return -1;
    switch (p[i]) {
    case '{':
    case '[':
        if (depth == CANON_MAX_DEPTH) return -1;
        kind[depth] = p[i];
        keybase[depth] = nkeys;
        depth++;
        i++;
        if (i < n && p[i] == (kind[depth - 1] == '{' ? '}' : ']')) {
            i++;
            depth--;
            goto after;
        }
        if (kind[depth - 1] == '[') goto value;
        goto key;
    case '"':
        i = canon_string(p, i, n);
        if (i < 0) return -1;
        goto after;
    case 't':
        if (!canon_word(p, i, n, "true", 4)) return -1;
        i += 4;
        goto after;
    case 'f':
        if (!canon_word(p, i, n, "false", 5)) return -1;
        i += 5;
        goto after;
    case 'n':
        if (!canon_word(p, i, n, "null", 4)) return -1;
        i += 4;
        goto after;
    default:
        if (p[i] != '-' && (p[i] < '0' || p[i] > '9')) return -1;
        i = canon_int(p, i, n);
        if (i < 0) return -1;
        goto after;
    }
key:
    if (i >= n || p[i] != '"') return -1;
    {
        Py_ssize_t start = i;
        i = canon_string(p, i, n);
        if (i < 0) return -1;
        Py_ssize_t len = i - start;
        int base = keybase[depth - 1];
        if (nkeys - base == CANON_MAX_KEYS) return -1;
        for (int k = base; k < nkeys; k++)
            if (key_len[k] == len && memcmp(p + key_at[k], p + start, (size_t)len) == 0) return -1;
        key_at[nkeys] = start;
        key_len[nkeys] = len;
        nkeys++;
    }
    if (i >= n || p[i] != ':') return -1;
    i++;
    goto value;
after:
    if (depth == 0) return i;
    if (i >= n) return -1;
    if (p[i] == ',') {
        i++;
        if (kind[depth - 1] == '{') goto key;
        goto value;
    }
    if (p[i] != (kind[depth - 1] == '{' ? '}' : ']')) return -1;
    i++;
    depth--;
    nkeys = keybase[depth];
    goto after;
}

/* Whether p[0:n] is proven canonical (see json_unproven_doc). */
static int canonical_json(const unsigned char *p, Py_ssize_t n) { return canon_value(p, 0, n) == n; }

/* Append `item` (a new reference, or NULL after a failed call) to `list`; -1 on error. */
static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *json_unproven(PyObject *self, PyObject *args) {
    PyObject *texts;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &texts)) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(texts);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(texts, i);
        if (!PyBytes_Check(t)) {
            PyErr_Format(PyExc_TypeError, "texts[%zd] is not bytes", i);
            Py_DECREF(out);
            return NULL;
        }
        if (canonical_json((const unsigned char *)PyBytes_AS_STRING(t), PyBytes_GET_SIZE(t)))
            continue;
        if (append_new(out, PyLong_FromSsize_t(i)) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

PyDoc_STRVAR(json_unproven_spans_doc,
"json_unproven_spans(buf, starts, stops) -> list[int]\n\n"
"json_unproven([bytes(buf[starts[i]:stops[i]]) for each i]) without the copies (an Arrow\n"
"string column's values and offsets); starts and stops are buffers of native int64 of one\n"
"length. Raises ValueError if any span is out of buf's bounds or reversed.\n"
"Python twin: seglog.core.native.json_unproven_spans_py.");

static PyObject *json_unproven_spans(PyObject *self, PyObject *args) {
    Py_buffer buf, starts, stops;
    if (!PyArg_ParseTuple(args, "y*y*y*", &buf, &starts, &stops)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = checked_slices("span", &buf, &starts, &stops);
    if (n < 0) goto done;
    const int64_t *a = (const int64_t *)starts.buf, *b = (const int64_t *)stops.buf;
    out = PyList_New(0);
    if (out == NULL) goto done;
    const unsigned char *base = (const unsigned char *)buf.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (canonical_json(base + a[i], (Py_ssize_t)(b[i] - a[i]))) continue;
        if (append_new(out, PyLong_FromSsize_t(i)) < 0) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&stops);
    return out;
}

/* ---- record_columns ---------------------------------------------------------------- */

PyDoc_STRVAR(record_columns_doc,
"record_columns(records, max_data, max_tag, max_node) -> (data, tag, node, own_node) | None\n\n"
"The columns of an append body's `records` array (a buffer holding exactly the array's\n"
"JSON text): data as bytes (each value's text, which must be canonical in json_unproven's\n"
"sense and at most max_data bytes), tag and node as str or None (absent), and whether any\n"
"record names its own node. Only the common form is taken: objects whose keys are `data`\n"
"(required), `tag` and `node` (strings without escapes, at most max_tag / max_node bytes of\n"
"UTF-8), each once, with JSON whitespace between tokens. Anything else returns None and the\n"
"caller decodes the body in full: a fast path, never a verdict. Python twin (the full\n"
"decode it must agree with): seglog.http.write_decode.record_columns_py.");

#define LABEL_CACHE 16

typedef struct {
    const unsigned char *at;
    Py_ssize_t len;
    PyObject *str; /* borrowed from the output lists, which hold a reference */
} label_entry;

typedef struct {
    label_entry e[LABEL_CACHE];
    int used, next;
} label_cache;

static inline Py_ssize_t skip_ws(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    while (i < n && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t')) i++;
    return i;
}

/* A new reference to the str of p[a:b] (valid UTF-8), shared with an earlier equal label. */
static PyObject *label_str(label_cache *c, const unsigned char *p, Py_ssize_t a, Py_ssize_t b) {
    Py_ssize_t len = b - a;
    for (int k = 0; k < c->used; k++) {
        label_entry *e = &c->e[k];
        if (e->len == len && memcmp(e->at, p + a, (size_t)len) == 0) {
            Py_INCREF(e->str);
            return e->str;
        }
    }
    PyObject *str = PyUnicode_DecodeUTF8((const char *)p + a, len, "strict");
    if (str == NULL) return NULL;
    label_entry *e = &c->e[c->used < LABEL_CACHE ? c->used++ : (c->next++ % LABEL_CACHE)];
    e->at = p + a;
    e->len = len;
    e->str = str;
    return str;
}

/* The end of the string label at p[i] (a canonical string without escapes, its UTF-8 at
 * most `max` bytes), or -1. */
static Py_ssize_t label_end(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, Py_ssize_t max) {
    if (i >= n || p[i] != '"') return -1;
    Py_ssize_t end = canon_string(p, i, n);
    if (end < 0 || end - i - 2 > max) return -1;
    if (memchr(p + i + 1, '\\', (size_t)(end - i - 2)) != NULL) return -1;
    return end;
}

/* The columns being built by record_columns / record_columns_lines. */
typedef struct {
    PyObject *data, *tags, *nodes;
    label_cache tag_cache, node_cache;
    Py_ssize_t max_data, max_tag, max_node;
    int own_node;
} columns;

enum { PARSE_FALLBACK = -1, PARSE_ERROR = -2 };

/* Where the value of the member `key` (quoted, `k` bytes) at p[i] starts, past its `:`
 * and the whitespace around it; -1 if p[i] holds another key or no `:` follows. */
static Py_ssize_t value_at(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, const char *key,
                           Py_ssize_t k) {
    if (!canon_word(p, i, n, key, k)) return -1;
    i = skip_ws(p, i + k, n);
    if (i >= n || p[i] != ':') return -1;
    return skip_ws(p, i + 1, n);
}

/* One record object at p[i] (its `{`) into `c`: the index just past its `}`, or
 * PARSE_FALLBACK (not the common form: the caller's full decode decides), or PARSE_ERROR
 * (an exception is set). */
static Py_ssize_t parse_record(columns *c, const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    if (i >= n || p[i] != '{') return PARSE_FALLBACK;
    Py_ssize_t d0 = -1, d1 = -1, t0 = -1, t1 = -1, n0 = -1, n1 = -1;
    i = skip_ws(p, i + 1, n);
    for (;;) {
        Py_ssize_t v;
        if (d0 < 0 && (v = value_at(p, i, n, "\"data\"", 6)) >= 0) {
            d0 = v;
            d1 = canon_value(p, d0, n);
            if (d1 < 0 || d1 - d0 > c->max_data) return PARSE_FALLBACK;
            i = d1;
        } else if (t0 < 0 && (v = value_at(p, i, n, "\"tag\"", 5)) >= 0) {
            t0 = v;
            t1 = label_end(p, t0, n, c->max_tag);
            if (t1 < 0) return PARSE_FALLBACK;
            i = t1;
        } else if (n0 < 0 && (v = value_at(p, i, n, "\"node\"", 6)) >= 0) {
            n0 = v;
            n1 = label_end(p, n0, n, c->max_node);
            if (n1 < 0) return PARSE_FALLBACK;
            i = n1;
        } else {
            return PARSE_FALLBACK; /* another key, a repeated one, or no key */
        }
        i = skip_ws(p, i, n);
        if (i < n && p[i] == ',') {
            i = skip_ws(p, i + 1, n);
            continue;
        }
        if (i < n && p[i] == '}') break;
        return PARSE_FALLBACK;
    }
    if (d0 < 0) return PARSE_FALLBACK;
    if (append_new(c->data, PyBytes_FromStringAndSize((const char *)p + d0, d1 - d0)) < 0)
        return PARSE_ERROR;
    if (t0 < 0) {
        if (PyList_Append(c->tags, Py_None) < 0) return PARSE_ERROR;
    } else if (append_new(c->tags, label_str(&c->tag_cache, p, t0 + 1, t1 - 1)) < 0) {
        return PARSE_ERROR;
    }
    if (n0 < 0) {
        if (PyList_Append(c->nodes, Py_None) < 0) return PARSE_ERROR;
    } else {
        c->own_node = 1;
        if (append_new(c->nodes, label_str(&c->node_cache, p, n0 + 1, n1 - 1)) < 0)
            return PARSE_ERROR;
    }
    return i + 1;
}

static int columns_init(columns *c, Py_ssize_t max_data, Py_ssize_t max_tag, Py_ssize_t max_node) {
    memset(c, 0, sizeof(*c));
    c->max_data = max_data;
    c->max_tag = max_tag;
    c->max_node = max_node;
    c->data = PyList_New(0);
    c->tags = PyList_New(0);
    c->nodes = PyList_New(0);
    return (c->data == NULL || c->tags == NULL || c->nodes == NULL) ? -1 : 0;
}

static PyObject *columns_result(columns *c) {
    return Py_BuildValue("(OOOO)", c->data, c->tags, c->nodes, c->own_node ? Py_True : Py_False);
}

static void columns_clear(columns *c) {
    Py_XDECREF(c->data);
    Py_XDECREF(c->tags);
    Py_XDECREF(c->nodes);
}

static PyObject *record_columns(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t max_data, max_tag, max_node;
    if (!PyArg_ParseTuple(args, "y*nnn", &buf, &max_data, &max_tag, &max_node)) return NULL;
    const unsigned char *p = (const unsigned char *)buf.buf;
    Py_ssize_t n = buf.len, i;
    PyObject *out = NULL;
    columns c;
    if (columns_init(&c, max_data, max_tag, max_node) < 0) goto done;
    i = skip_ws(p, 0, n);
    if (i >= n || p[i] != '[') goto fallback;
    i = skip_ws(p, i + 1, n);
    if (i < n && p[i] == ']') goto fallback; /* no records: the full decode reports it */
    for (;;) {
        i = parse_record(&c, p, i, n);
        if (i == PARSE_ERROR) goto done;
        if (i == PARSE_FALLBACK) goto fallback;
        i = skip_ws(p, i, n);
        if (i < n && p[i] == ',') {
            i = skip_ws(p, i + 1, n);
            continue;
        }
        if (i < n && p[i] == ']') break;
        goto fallback;
    }
    if (skip_ws(p, i + 1, n) != n) goto fallback;
    out = columns_result(&c);
    goto done;
fallback:
    out = Py_NewRef(Py_None);
done:
    columns_clear(&c);
    PyBuffer_Release(&buf);
    return out;
}

PyDoc_STRVAR(record_columns_lines_doc,
"record_columns_lines(lines, max_data, max_tag, max_node) -> (data, tag, node, own_node) | None\n\n"
"record_columns for NDJSON: each item of the list `lines` (bytes) must hold exactly one\n"
"record object, with JSON whitespace around it; no record spans two lines. None when a\n"
"line is not in the common form (or not bytes), or there is no line. Python twin:\n"
"seglog.http.write_decode.record_columns_lines_py.");

static PyObject *record_columns_lines(PyObject *self, PyObject *args) {
    PyObject *given, *lines = NULL, *out = NULL;
    Py_ssize_t max_data, max_tag, max_node;
    if (!PyArg_ParseTuple(args, "O!nnn", &PyList_Type, &given, &max_data, &max_tag, &max_node))
        return NULL;
    columns c;
    if (columns_init(&c, max_data, max_tag, max_node) < 0) goto done;
    /* Our own list: the label caches point into earlier lines, which it keeps alive
     * whatever happens to the caller's list meanwhile. */
    lines = PyList_GetSlice(given, 0, PyList_GET_SIZE(given));
    if (lines == NULL) goto done;
    Py_ssize_t count = PyList_GET_SIZE(lines);
    if (count == 0) goto fallback;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *line = PyList_GET_ITEM(lines, k);
        if (!PyBytes_Check(line)) goto fallback; /* a bytearray, say: the full decode takes it */
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(line);
        Py_ssize_t n = PyBytes_GET_SIZE(line);
        Py_ssize_t i = parse_record(&c, p, skip_ws(p, 0, n), n);
        if (i == PARSE_ERROR) goto done;
        if (i == PARSE_FALLBACK || skip_ws(p, i, n) != n) goto fallback;
    }
    out = columns_result(&c);
    goto done;
fallback:
    out = Py_NewRef(Py_None);
done:
    columns_clear(&c);
    Py_XDECREF(lines);
    return out;
}

/* ---- table_codes ------------------------------------------------------------------- */

PyDoc_STRVAR(table_codes_doc,
"table_codes(labels, table, out) -> int\n\n"
"out[i] = table[labels[i]] for the list `labels` and the dict `table` (label -> code, None\n"
"included), into `out`, a writable native uint32 buffer of len(labels). Returns -1 when\n"
"every label is in the table, else the index of the first that is not (out is filled up\n"
"to it). OverflowError for a code outside uint32. Python twin:\n"
"seglog.core.native.table_codes_py.");

static PyObject *table_codes(PyObject *self, PyObject *args) {
    PyObject *labels, *table;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "O!O!w*", &PyList_Type, &labels, &PyDict_Type, &table, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(labels), miss = -1;
    if (out.len != n * 4) {
        PyErr_SetString(PyExc_ValueError, "out must be a uint32 column of len(labels)");
        goto done;
    }
    uint32_t *codes = (uint32_t *)out.buf, code = 0;
    PyObject *prev = NULL; /* the previous label (borrowed from the list): most repeat */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(labels, i);
        if (x != prev) {
            PyObject *c = PyDict_GetItemWithError(table, x); /* str and None: no Python runs */
            if (c == NULL) {
                if (PyErr_Occurred()) goto done;
                miss = i;
                break;
            }
            unsigned long v = PyLong_AsUnsignedLong(c);
            if (v == (unsigned long)-1 && PyErr_Occurred()) goto done;
            if (v > 0xFFFFFFFFul) {
                PyErr_SetString(PyExc_OverflowError, "a label code is outside uint32");
                goto done;
            }
            code = (uint32_t)v;
            prev = x;
        }
        codes[i] = code;
    }
    result = PyLong_FromSsize_t(miss);
done:
    PyBuffer_Release(&out);
    return result;
}

/* ---- int64_column ------------------------------------------------------------------ */

PyDoc_STRVAR(int64_column_doc,
"int64_column(values, out) -> None\n\n"
"out[i] = values[i] for a list of ints, out a writable buffer of len(values) native int64:\n"
"numpy's asarray(values, int64) without its per-item type discovery (~30 ns per item).\n"
"Raises ValueError if out has another length, TypeError for an item that is not an int and\n"
"OverflowError for one outside int64 (out is then partly written). Python twin:\n"
"seglog.core.native.int64_column_py.");

static PyObject *int64_column(PyObject *self, PyObject *args) {
    PyObject *values;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "O!w*", &PyList_Type, &values, &out)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (out.len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "out must be an int64 column of len(values)");
        goto done;
    }
    int64_t *dst = (int64_t *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(values, i);
        if (!PyLong_Check(x)) {
            PyErr_Format(PyExc_TypeError, "item %zd is not an int", i);
            goto done;
        }
#if LONG_MAX == INT64_MAX
        /* PyLong_AsLongLong goes through _PyLong_AsByteArray for any value above 2**30
         * (~20 ns); this reads the digits directly. */
        int overflow = 0;
        long v = PyLong_AsLongAndOverflow(x, &overflow);
        if (overflow) {
            PyErr_Format(PyExc_OverflowError, "item %zd is outside int64", i);
            goto done;
        }
#else
        long long v = PyLong_AsLongLong(x);
#endif
        if (v == -1 && PyErr_Occurred()) goto done;
        dst[i] = (int64_t)v;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"xxh3_slices", xxh3_slices, METH_VARARGS, xxh3_slices_doc},
    {"byte_slices", byte_slices, METH_VARARGS, byte_slices_doc},
    {"gather_rows", gather_rows, METH_VARARGS, gather_rows_doc},
    {"spans_into", spans_into, METH_VARARGS, spans_into_doc},
    {"label_codes", label_codes, METH_VARARGS, label_codes_doc},
    {"blobs_sliceable", blobs_sliceable, METH_VARARGS, blobs_sliceable_doc},
    {"segment_layout", segment_layout, METH_VARARGS, segment_layout_doc},
    {"scan_wal_chunk", scan_wal_chunk, METH_VARARGS, scan_wal_chunk_doc},
    {"encode_segment", encode_segment, METH_VARARGS, encode_segment_doc},
    {"encode_segment_rows", encode_segment_rows, METH_VARARGS, encode_segment_rows_doc},
    {"encode_appends", encode_appends, METH_VARARGS, encode_appends_doc},
    {"json_rows", json_rows, METH_VARARGS, json_rows_doc},
    {"json_unproven", json_unproven, METH_VARARGS, json_unproven_doc},
    {"json_unproven_spans", json_unproven_spans, METH_VARARGS, json_unproven_spans_doc},
    {"record_columns", record_columns, METH_VARARGS, record_columns_doc},
    {"record_columns_lines", record_columns_lines, METH_VARARGS, record_columns_lines_doc},
    {"table_codes", table_codes, METH_VARARGS, table_codes_doc},
    {"int64_column", int64_column, METH_VARARGS, int64_column_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "seglog._speedups",
    "C twins of seglog's per-frame hot loops (see native/speedups.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    return PyModule_Create(&module);
}
