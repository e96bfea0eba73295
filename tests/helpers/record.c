/*
 * record.c - build and check the self-checking test records (record.h has
 * the layout).  Shared by nrs-appender, nrs-verify and nrs-tail.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "record.h"

static uint32_t crc_table[256];

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_fill(void)
{
	uint32_t c;
	unsigned int i, k;

	for (i = 0; i < 256; i++) {
		c = i;
		for (k = 0; k < 8; k++)
			c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
		crc_table[i] = c;
	}
}

static void crc_init(void)
{
	pthread_once(&crc_once, crc_fill);
}

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n)
{
	crc = ~crc;
	while (n--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t payload_seed(uint32_t writer, uint64_t seq, uint32_t len)
{
	return ((uint64_t)writer << 40) ^ (seq * 0x100000001b3ull) ^ len;
}

/* The payload of (writer, seq, len): n bytes into p. */
static void payload(uint32_t writer, uint64_t seq, uint32_t len,
		    unsigned char *p, size_t n)
{
	uint64_t s = payload_seed(writer, seq, len);
	size_t i = 0;

	while (i + 8 <= n) {
		put64(p + i, splitmix64(&s));
		i += 8;
	}
	if (i < n) {
		unsigned char last[8];

		put64(last, splitmix64(&s));
		memcpy(p + i, last, n - i);
	}
}

/* Index of the first byte of p (n bytes) that differs from the payload of
 * (writer, seq, len), or n if none does. */
static size_t payload_cmp(uint32_t writer, uint64_t seq, uint32_t len,
			  const unsigned char *p, size_t n)
{
	uint64_t s = payload_seed(writer, seq, len);
	unsigned char want[8];
	size_t i, k, m;

	for (i = 0; i < n; i += 8) {
		put64(want, splitmix64(&s));
		m = n - i < 8 ? n - i : 8;
		if (memcmp(want, p + i, m))
			for (k = 0; k < m; k++)
				if (want[k] != p[i + k])
					return i + k;
	}
	return n;
}

uint32_t nrs_rec_tag(const char *path)
{
	const char *base = strrchr(path, '/');
	uint32_t h = 2166136261u;

	base = base ? base + 1 : path;
	while (*base) {
		h ^= (unsigned char)*base++;
		h *= 16777619u;
	}
	return h;
}

static void put_header(const struct nrs_rec *r, unsigned char *buf)
{
	put32(buf, NRS_REC_MAGIC);
	put32(buf + 4, r->len);
	put32(buf + 8, r->writer);
	put32(buf + 12, r->tag);
	put64(buf + 16, r->seq);
	put32(buf + 24, 0);
	put32(buf + 28, 0);
}

void nrs_rec_build(const struct nrs_rec *r, unsigned char *buf)
{
	crc_init();
	put_header(r, buf);
	payload(r->writer, r->seq, r->len, buf + NRS_REC_HDR,
		r->len - NRS_REC_HDR);
	put32(buf + 24, crc_update(0, buf, r->len));
}

int nrs_rec_check(const unsigned char *buf, size_t avail, struct nrs_rec *out,
		  char *why, size_t whylen)
{
	unsigned char hdr[NRS_REC_HDR];
	uint32_t crc, want;
	size_t n, bad;

	crc_init();
	if (avail < 8) {
		/* Too little to know: only the magic can be checked. */
		if (memcmp(buf, "NRSt", avail < 4 ? avail : 4)) {
			snprintf(why, whylen, "bad magic (bytes %s)",
				 nrs_rec_hex(buf, avail));
			return -1;
		}
		out->len = NRS_REC_HDR;
		return 0;
	}
	if (get32(buf) != NRS_REC_MAGIC) {
		snprintf(why, whylen, "bad magic (bytes %s)",
			 nrs_rec_hex(buf, avail < 32 ? avail : 32));
		return -1;
	}
	out->len = get32(buf + 4);
	if (out->len < NRS_REC_MIN || out->len > NRS_REC_MAX) {
		snprintf(why, whylen, "impossible record length %u", out->len);
		return -1;
	}
	if (avail < out->len)
		return 0;
	out->writer = get32(buf + 8);
	out->tag = get32(buf + 12);
	out->seq = get64(buf + 16);
	want = get32(buf + 24);
	if (get32(buf + 28) != 0) {
		snprintf(why, whylen, "pad field not zero");
		return -1;
	}
	memcpy(hdr, buf, NRS_REC_HDR);
	put32(hdr + 24, 0);
	crc = crc_update(0, hdr, NRS_REC_HDR);
	crc = crc_update(crc, buf + NRS_REC_HDR, out->len - NRS_REC_HDR);
	if (crc != want) {
		snprintf(why, whylen,
			 "CRC mismatch (writer %u seq %llu len %u: stored %08x, computed %08x)",
			 out->writer, (unsigned long long)out->seq, out->len,
			 want, crc);
		return -1;
	}
	n = out->len - NRS_REC_HDR;
	bad = payload_cmp(out->writer, out->seq, out->len, buf + NRS_REC_HDR, n);
	if (bad != n) {
		snprintf(why, whylen,
			 "payload differs from what writer %u wrote as seq %llu at payload byte %zu",
			 out->writer, (unsigned long long)out->seq, bad);
		return -1;
	}
	return 1;
}

const char *nrs_rec_hex(const unsigned char *buf, size_t n)
{
	static __thread char s[3 * 32 + 1];
	size_t i;

	if (n > 32)
		n = 32;
	s[0] = '\0';
	for (i = 0; i < n; i++)
		snprintf(s + 3 * i, sizeof(s) - 3 * i, "%02x%s", buf[i],
			 i + 1 < n ? " " : "");
	return s;
}
