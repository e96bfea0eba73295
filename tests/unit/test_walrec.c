/*
 * test_walrec.c - the WAL record codec: layout, round trips, and that every
 * damaged or impossible header is refused.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/crc32c.h"
#include "wal/metarec.h"
#include "wal/walrec.h"

/* A record laid out in memory: header, payload, padding. */
struct rec {
	unsigned char *buf;
	size_t hdr_len, total;
};

static struct nrs_walrec sample(uint32_t len)
{
	return (struct nrs_walrec){
		.kind = NRS_WALREC_DATA, .lsn = 1000, .stream_id = 42,
		.base = 1u << 20, .len = len, .n_appends = len < 3 ? len : 3,
		.epoch = 7, .prev_lsn = 999,
	};
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 9)) ^ seed);
}

/*
 * Encode r with payload given in nsplit pieces of irregular sizes (one of
 * them empty when nsplit > 2).
 */
static struct rec build(const struct nrs_walrec *r, const unsigned char *payload,
			int nsplit)
{
	struct iovec iov[16];
	struct rec out;
	size_t off = 0;
	ssize_t h;

	assert_true(nsplit >= 1 && nsplit <= 16);
	for (int i = 0; i < nsplit; i++) {
		size_t n = (r->len - off) / (size_t)(nsplit - i);

		if (i == nsplit - 1)
			n = r->len - off;
		else if (i == 1 && nsplit > 2)
			n = 0;
		else if (n > 3)
			n -= (size_t)i * 3;	/* uneven, crossing chunks */
		iov[i].iov_base = (void *)(payload + off);
		iov[i].iov_len = n;
		off += n;
	}
	out.hdr_len = nrs_walrec_hdr_len(r->len);
	out.total = nrs_walrec_total_len(r->len);
	out.buf = calloc(1, out.total);
	assert_non_null(out.buf);
	h = nrs_walrec_encode_hdr(r, iov, nsplit, out.buf, out.total);
	assert_int_equal(h, (ssize_t)out.hdr_len);
	memcpy(out.buf + out.hdr_len, payload, r->len);
	return out;
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void set_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void set_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Recompute the header CRC the way the format document says. */
static void fix_crc(unsigned char *h)
{
	uint32_t n = nrs_walrec_nchunks(le32(h + 32));
	uint32_t crc = nrs_crc32c(0, h, 60);

	set_le32(h + 60, nrs_crc32c(crc, h + 64, 4 * (size_t)n));
}

static void test_crc32c_vector(void **state)
{
	const char *s = "123456789";

	(void)state;
	assert_int_equal(nrs_crc32c(0, s, 9), 0xe3069283u);
	assert_int_equal(nrs_crc32c(nrs_crc32c(0, s, 4), s + 4, 5), 0xe3069283u);
	assert_int_equal(nrs_crc32c(0, "", 0), 0);
}

static void test_sizes(void **state)
{
	(void)state;
	assert_int_equal(nrs_walrec_nchunks(0), 0);
	assert_int_equal(nrs_walrec_nchunks(1), 1);
	assert_int_equal(nrs_walrec_nchunks(65536), 1);
	assert_int_equal(nrs_walrec_nchunks(65537), 2);
	assert_int_equal(nrs_walrec_nchunks(UINT32_MAX), 65536);
	assert_int_equal(nrs_walrec_hdr_len(0), 64);
	assert_int_equal(nrs_walrec_total_len(0), 64);
	assert_int_equal(nrs_walrec_hdr_len(1), 68);
	assert_int_equal(nrs_walrec_total_len(1), 72);
	assert_int_equal(nrs_walrec_total_len(4), 72);
	assert_int_equal(nrs_walrec_total_len(5), 80);
	assert_int_equal(nrs_walrec_total_len(65537), 65616);
}

/* The bytes on disk are what the format document says, little-endian. */
static void test_layout(void **state)
{
	unsigned char payload[100];
	struct nrs_walrec r = sample(sizeof(payload));
	struct rec x;

	(void)state;
	fill(payload, sizeof(payload), 1);
	x = build(&r, payload, 1);
	assert_memory_equal(x.buf, "NRSR", 4);
	assert_int_equal(x.buf[4], 1);
	assert_int_equal(x.buf[5], 0);
	assert_int_equal(x.buf[6], 1);
	assert_int_equal(x.buf[8], 1000 & 0xff);
	assert_int_equal(x.buf[9], 1000 >> 8);
	assert_int_equal(x.buf[16], 42);
	assert_int_equal(x.buf[24 + 2], 0x10);		/* base 1 MiB */
	assert_int_equal(le32(x.buf + 32), 100);
	assert_int_equal(le32(x.buf + 36), 3);
	assert_int_equal(x.buf[40], 7);
	assert_int_equal(le32(x.buf + 48), 999);
	assert_int_equal(le32(x.buf + 56), 0);
	assert_int_equal(le32(x.buf + 64), nrs_crc32c(0, payload, 100));
	assert_int_equal(le32(x.buf + 60),
			 nrs_crc32c(nrs_crc32c(0, x.buf, 60), x.buf + 64, 4));
	free(x.buf);
}

static void round_trip(uint32_t len, int nsplit)
{
	unsigned char *payload = malloc(len ? len : 1);
	struct nrs_walrec r = sample(len), d;
	struct rec one, x;
	uint32_t bad = 12345;

	assert_non_null(payload);
	fill(payload, len, len);
	x = build(&r, payload, nsplit);
	one = build(&r, payload, 1);
	/* Chunk CRCs do not depend on how the payload was split. */
	assert_memory_equal(x.buf, one.buf, x.hdr_len);
	memset(&d, 0xa5, sizeof(d));
	assert_int_equal(nrs_walrec_decode_hdr(x.buf, x.total, &d), 0);
	assert_int_equal(d.kind, r.kind);
	assert_int_equal(d.lsn, r.lsn);
	assert_int_equal(d.stream_id, r.stream_id);
	assert_int_equal(d.base, r.base);
	assert_int_equal(d.len, r.len);
	assert_int_equal(d.n_appends, r.n_appends);
	assert_int_equal(d.epoch, r.epoch);
	assert_int_equal(d.prev_lsn, r.prev_lsn);
	/* Exactly the header is enough. */
	assert_int_equal(nrs_walrec_decode_hdr(x.buf, x.hdr_len, &d), 0);
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 0,
			nrs_walrec_nchunks(len), x.buf + x.hdr_len, &bad), 0);
	assert_int_equal(bad, 12345);
	for (size_t i = x.hdr_len + len; i < x.total; i++)
		assert_int_equal(x.buf[i], 0);
	free(one.buf);
	free(x.buf);
	free(payload);
}

static void test_round_trip(void **state)
{
	(void)state;
	round_trip(0, 1);
	round_trip(1, 1);
	round_trip(100, 3);
	round_trip(65536, 4);
	round_trip(65537, 5);
	round_trip(200 * 1024, 7);
	round_trip(200 * 1024 + 3, 16);
}

static void test_zero_length(void **state)
{
	struct nrs_walrec r = sample(0), d;
	unsigned char h[64];

	(void)state;
	assert_int_equal(nrs_walrec_encode_hdr(&r, NULL, 0, h, sizeof(h)), 64);
	assert_int_equal(nrs_walrec_decode_hdr(h, sizeof(h), &d), 0);
	assert_int_equal(d.len, 0);
	assert_int_equal(d.n_appends, 0);
	assert_int_equal(nrs_walrec_verify_chunks(h, &d, 0, 0, NULL, NULL), 0);
	r.n_appends = 1;
	assert_int_equal(nrs_walrec_encode_hdr(&r, NULL, 0, h, sizeof(h)),
			 -EINVAL);
}

static void test_encode_rejects(void **state)
{
	unsigned char payload[10] = { 0 }, h[128];
	struct iovec iov = { payload, sizeof(payload) };
	struct nrs_walrec r = sample(10);

	(void)state;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, h, 67), -EINVAL);
	iov.iov_len = 9;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, h, sizeof(h)),
			 -EINVAL);
	iov.iov_len = 11;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, h, sizeof(h)),
			 -EINVAL);
	iov.iov_len = 10;
	r.prev_lsn = r.lsn;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, h, sizeof(h)),
			 -EINVAL);
	r = sample(10);
	r.n_appends = 11;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, h, sizeof(h)),
			 -EINVAL);
	r = sample(10);
	r.kind = 2;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, h, sizeof(h)),
			 -EINVAL);
	r = sample(10);
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, h, sizeof(h)), 68);
}

/* Every single-bit flip of the fixed header and the CRC table is caught. */
static void test_header_bit_flips(void **state)
{
	uint32_t lens[] = { 0, 100, 200 * 1024 };

	(void)state;
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		unsigned char *payload = malloc(lens[k] + 1);
		struct nrs_walrec r = sample(lens[k]), d;
		struct rec x;
		int badmsg = 0;

		fill(payload, lens[k], 3);
		x = build(&r, payload, 2);
		for (size_t bit = 0; bit < x.hdr_len * 8; bit++) {
			int rc;

			x.buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
			rc = nrs_walrec_decode_hdr(x.buf, x.total, &d);
			x.buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
			/* -ENODATA only when the flip made len claim a table
			 * longer than the buffer. */
			if (rc == -ENODATA)
				assert_true(bit / 8 >= 32 && bit / 8 < 36);
			else
				assert_int_equal(rc, -EBADMSG);
			badmsg += rc == -EBADMSG;
		}
		assert_true(badmsg >= (int)(x.hdr_len * 8) - 32);
		assert_int_equal(nrs_walrec_decode_hdr(x.buf, x.total, &d), 0);
		free(x.buf);
		free(payload);
	}
}

static void test_truncated(void **state)
{
	uint32_t len = 200 * 1024;
	unsigned char *payload = malloc(len);
	struct nrs_walrec r = sample(len), d, sentinel;
	struct rec x;

	(void)state;
	fill(payload, len, 9);
	x = build(&r, payload, 3);
	memset(&sentinel, 0x5a, sizeof(sentinel));
	for (size_t avail = 0; avail < 64; avail++) {
		d = sentinel;
		assert_int_equal(nrs_walrec_decode_hdr(x.buf, avail, &d),
				 -ENODATA);
		assert_memory_equal(&d, &sentinel, sizeof(d));
	}
	assert_int_equal(x.hdr_len, 64 + 4 * 4);
	for (size_t avail = 64; avail < x.hdr_len; avail++) {
		d = sentinel;
		assert_int_equal(nrs_walrec_decode_hdr(x.buf, avail, &d),
				 -ENODATA);
		assert_int_equal(d.len, len);	/* enough to size the read */
		assert_int_equal(d.lsn, r.lsn);
		assert_int_equal(nrs_walrec_hdr_len(d.len), x.hdr_len);
	}
	assert_int_equal(nrs_walrec_decode_hdr(x.buf, x.hdr_len, &d), 0);
	/* Bad magic is reported as soon as the fixed part is there. */
	x.buf[0] ^= 1;
	assert_int_equal(nrs_walrec_decode_hdr(x.buf, 64, &d), -EBADMSG);
	free(x.buf);
	free(payload);
}

static void test_payload_flip(void **state)
{
	uint32_t len = 200 * 1024, bad = 99;	/* chunks 0..3, last short */
	unsigned char *payload = malloc(len), *data;
	struct nrs_walrec r = sample(len), d;
	struct rec x;

	(void)state;
	fill(payload, len, 5);
	x = build(&r, payload, 4);
	data = x.buf + x.hdr_len;
	assert_int_equal(nrs_walrec_decode_hdr(x.buf, x.total, &d), 0);
	assert_int_equal(nrs_walrec_nchunks(len), 4);

	data[2 * 65536 + 777] ^= 0x10;
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 0, 4, data, &bad),
			 -EBADMSG);
	assert_int_equal(bad, 2);
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 0, 2, data, NULL),
			 0);
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 3, 1,
			 data + 3 * 65536, NULL), 0);
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 2, 2,
			 data + 2 * 65536, &bad), -EBADMSG);
	assert_int_equal(bad, 2);
	data[2 * 65536 + 777] ^= 0x10;

	/* The short last chunk is checked over its own length only. */
	data[len - 1] ^= 1;
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 0, 4, data, &bad),
			 -EBADMSG);
	assert_int_equal(bad, 3);
	data[len - 1] ^= 1;
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 0, 4, data, &bad),
			 0);
	/* Out of range. */
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 3, 2, data, NULL),
			 -EINVAL);
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 5, 0, data, NULL),
			 -EINVAL);
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, UINT32_MAX, 2,
			 data, NULL), -EINVAL);
	free(x.buf);
	free(payload);
}

/*
 * Impossible fields under a correct CRC: each edit is applied to a fresh
 * valid header, the CRC recomputed, and decode must say -EUCLEAN.
 */
enum edit {
	E_NONE, E_PREV_EQ, E_PREV_GT, E_LSN0, E_NAPP0, E_NAPP_GT, E_VERSION,
	E_KIND, E_RESERVED, E_BASE_OVF, E_LEN_MAX, E_NAPP_LEN0,
};

static int decode_edited(enum edit e)
{
	/* Room for the table of a len of MAX + 1. */
	size_t size = nrs_walrec_hdr_len(NRS_WALREC_MAX_LEN + 1);
	unsigned char payload[64], *h = calloc(1, size);
	struct iovec iov = { payload, sizeof(payload) };
	struct nrs_walrec r = sample(sizeof(payload)), d;
	int rc;

	assert_non_null(h);
	fill(payload, sizeof(payload), 11);
	if (e == E_NAPP_LEN0) {
		r = sample(0);
		iov.iov_len = 0;
	}
	assert_true(nrs_walrec_encode_hdr(&r, &iov, 1, h, size) > 0);
	switch (e) {
	case E_NONE: break;
	case E_PREV_EQ: set_le64(h + 48, r.lsn); break;
	case E_PREV_GT: set_le64(h + 48, r.lsn + 1); break;
	case E_LSN0: set_le64(h + 8, 0); set_le64(h + 48, 0); break;
	case E_NAPP0: set_le32(h + 36, 0); break;
	case E_NAPP_GT: set_le32(h + 36, sizeof(payload) + 1); break;
	case E_VERSION: h[4] = 2; break;
	case E_KIND: h[6] = 2; break;
	case E_RESERVED: h[57] = 1; break;
	case E_BASE_OVF: set_le64(h + 24, UINT64_MAX - sizeof(payload) + 1);
		break;
	case E_LEN_MAX: set_le32(h + 32, NRS_WALREC_MAX_LEN + 1); break;
	case E_NAPP_LEN0: set_le32(h + 36, 1); break;
	}
	fix_crc(h);
	rc = nrs_walrec_decode_hdr(h, size, &d);
	free(h);
	return rc;
}

static void test_impossible_fields(void **state)
{
	(void)state;
	assert_int_equal(decode_edited(E_NONE), 0);	/* fix_crc is right */
	for (enum edit e = E_PREV_EQ; e <= E_NAPP_LEN0; e++)
		assert_int_equal(decode_edited(e), -EUCLEAN);
}

/* A META record: metarec.h's payload around a change, through walrec. */
static struct rec meta_build(uint64_t seq, const char *change,
			     struct nrs_walrec *r)
{
	unsigned char fixed[NRS_METAREC_FIXED];
	size_t n = strlen(change);
	struct iovec iov[2] = { { fixed, sizeof(fixed) },
				{ (void *)change, n } };
	struct rec out;

	assert_int_equal(nrs_metarec_make(77, seq, n, r, fixed), 0);
	out.hdr_len = nrs_walrec_hdr_len(r->len);
	out.total = nrs_walrec_total_len(r->len);
	out.buf = calloc(1, out.total);
	assert_non_null(out.buf);
	assert_int_equal(nrs_walrec_encode_hdr(r, iov, 2, out.buf, out.total),
			 (ssize_t)out.hdr_len);
	memcpy(out.buf + out.hdr_len, fixed, sizeof(fixed));
	memcpy(out.buf + out.hdr_len + sizeof(fixed), change, n);
	return out;
}

/* WV4 and metarec.c MR1: a META record round-trips; its payload is taken
 * only as its header says. */
static void test_meta_record(void **state)
{
	struct nrs_walrec r, d;
	struct nrs_metarec mr;
	struct rec x = meta_build(5, "a changeset", &r);
	unsigned char *p = x.buf + x.hdr_len;

	(void)state;
	assert_int_equal(nrs_walrec_decode_hdr(x.buf, x.hdr_len, &d), 0);
	assert_int_equal(d.kind, NRS_WALREC_META);
	assert_int_equal(d.base, 5);
	assert_int_equal(d.stream_id, 0);
	assert_int_equal(d.len, NRS_METAREC_FIXED + 11);
	assert_int_equal(nrs_walrec_verify_chunks(x.buf, &d, 0, 1, p, NULL), 0);
	assert_int_equal(nrs_metarec_decode(&d, p, &mr), 0);
	assert_int_equal(mr.seq, 5);
	assert_int_equal(mr.change_len, 11);
	assert_memory_equal(mr.change, "a changeset", 11);
	/* MR1: the payload's seq, magic, format, reserved */
	for (int off = 0; off < NRS_METAREC_FIXED; off++) {
		p[off] ^= 1;
		assert_int_equal(nrs_metarec_decode(&d, p, &mr), -EUCLEAN);
		p[off] ^= 1;
	}
	d.kind = NRS_WALREC_DATA;
	assert_int_equal(nrs_metarec_decode(&d, p, &mr), -EUCLEAN);
	/* WV4: a META header naming a stream, a chain, no seq, two appends */
	for (int e = 0; e < 5; e++) {
		unsigned char *h = x.buf;

		switch (e) {
		case 0: set_le64(h + 16, 42); break;		/* stream */
		case 1: set_le64(h + 48, 3); break;		/* prev */
		case 2: set_le64(h + 40, 1); break;		/* epoch */
		case 3: set_le64(h + 24, 0); break;		/* seq 0 */
		case 4: set_le32(h + 36, 2); break;		/* appends */
		}
		fix_crc(h);
		assert_int_equal(nrs_walrec_decode_hdr(h, x.hdr_len, &d),
				 -EUCLEAN);
		free(x.buf);
		x = meta_build(5, "a changeset", &r);
	}
	/* the encoder refuses what WV4 refuses */
	r.stream_id = 1;
	assert_int_equal(nrs_walrec_encode_hdr(&r, NULL, 0, x.buf, x.total),
			 -EINVAL);
	free(x.buf);
	assert_int_equal(nrs_metarec_make(0, 5, 1, &r, (unsigned char[16]){ 0 }),
			 -EINVAL);
	assert_int_equal(nrs_metarec_make(1, 0, 1, &r, (unsigned char[16]){ 0 }),
			 -EINVAL);
	assert_int_equal(nrs_metarec_make(1, 5, 0, &r, (unsigned char[16]){ 0 }),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_vector),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_zero_length),
		cmocka_unit_test(test_encode_rejects),
		cmocka_unit_test(test_header_bit_flips),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_payload_flip),
		cmocka_unit_test(test_impossible_fields),
		cmocka_unit_test(test_meta_record),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
