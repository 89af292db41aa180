/* JSON syntax checking: a recursive-descent recogniser that builds nothing. Each function takes
 * the position of the next byte and returns the position after what it recognised, or -1. */
#include <stddef.h>
#include <string.h>
#include <sys/types.h>

#include "core/json.h"

struct text {
    const unsigned char *s;
    size_t len;
};

static ssize_t value(const struct text *t, size_t i, int depth);

static size_t
skip_space(const struct text *t, size_t i)
{
    while (i < t->len && (t->s[i] == ' ' || t->s[i] == '\t' || t->s[i] == '\n' || t->s[i] == '\r'))
        i++;
    return i;
}

static int
is_digit(const struct text *t, size_t i)
{
    return i < t->len && t->s[i] >= '0' && t->s[i] <= '9';
}

static size_t
digits(const struct text *t, size_t i)
{
    while (is_digit(t, i))
        i++;
    return i;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static ssize_t
number(const struct text *t, size_t i)
{
    if (i < t->len && t->s[i] == '-')
        i++;
    if (!is_digit(t, i))
        return -1;
    i = t->s[i] == '0' ? i + 1 : digits(t, i);
    if (i < t->len && t->s[i] == '.') {
        if (!is_digit(t, ++i))
            return -1;
        i = digits(t, i);
    }
    if (i < t->len && (t->s[i] == 'e' || t->s[i] == 'E')) {
        i++;
        if (i < t->len && (t->s[i] == '+' || t->s[i] == '-'))
            i++;
        if (!is_digit(t, i))
            return -1;
        i = digits(t, i);
    }
    return (ssize_t)i;
}

static int
is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* One escape after the backslash at i - 1. */
static ssize_t
escape(const struct text *t, size_t i)
{
    if (i >= t->len)
        return -1;
    if (strchr("\"\\/bfnrt", t->s[i]) && t->s[i] != '\0')
        return (ssize_t)i + 1;
    if (t->s[i] != 'u' || t->len - i < 5)
        return -1;
    for (size_t k = 1; k <= 4; k++)
        if (!is_hex(t->s[i + k]))
            return -1;
    return (ssize_t)i + 5;
}

static ssize_t
string(const struct text *t, size_t i)
{
    if (i >= t->len || t->s[i] != '"')
        return -1;
    for (i++; i < t->len;) {
        unsigned char c = t->s[i];
        if (c == '"')
            return (ssize_t)i + 1;
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            ssize_t next = escape(t, i + 1);
            if (next < 0)
                return -1;
            i = (size_t)next;
        } else {
            i++;
        }
    }
    return -1;
}

static ssize_t
literal(const struct text *t, size_t i, const char *word)
{
    size_t n = strlen(word);
    if (t->len - i < n || memcmp(t->s + i, word, n) != 0)
        return -1;
    return (ssize_t)(i + n);
}

/* The members of an object or the elements of an array, after its opening bracket. */
static ssize_t
members(const struct text *t, size_t i, int depth, int object, char close)
{
    i = skip_space(t, i);
    if (i < t->len && t->s[i] == (unsigned char)close)
        return (ssize_t)i + 1;
    for (;;) {
        ssize_t next;
        if (object) {
            next = string(t, skip_space(t, i));
            if (next < 0)
                return -1;
            i = skip_space(t, (size_t)next);
            if (i >= t->len || t->s[i] != ':')
                return -1;
            i++;
        }
        next = value(t, i, depth);
        if (next < 0)
            return -1;
        i = skip_space(t, (size_t)next);
        if (i < t->len && t->s[i] == (unsigned char)close)
            return (ssize_t)i + 1;
        if (i >= t->len || t->s[i] != ',')
            return -1;
        i++;
    }
}

static ssize_t
value(const struct text *t, size_t i, int depth)
{
    i = skip_space(t, i);
    if (i >= t->len)
        return -1;
    switch (t->s[i]) {
    case '{':
    case '[':
        if (depth >= TSOCK__JSON_MAX_DEPTH)
            return -1;
        return members(t, i + 1, depth + 1, t->s[i] == '{', t->s[i] == '{' ? '}' : ']');
    case '"': return string(t, i);
    case 't': return literal(t, i, "true");
    case 'f': return literal(t, i, "false");
    case 'n': return literal(t, i, "null");
    default: return number(t, i);
    }
}

int
tsock__json_is_object(const char *s, size_t len)
{
    struct text t = {(const unsigned char *)s, len};
    size_t start = skip_space(&t, 0);
    if (start >= len || t.s[start] != '{')
        return 0;
    ssize_t end = value(&t, start, 0);
    return end >= 0 && skip_space(&t, (size_t)end) == len;
}
